"""Typed, validated configuration: plain dataclasses built from YAML dictionaries.

Every config class is a dataclass whose fields carry a ``doc`` string in their
metadata. ``build(cls, data)`` turns a nested dict into an instance and fails on
the first unknown key, wrong type or impossible value with a ``ConfigError``
that names the full key path and what is allowed there.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or impossible."""

    def __init__(self, path: str, message: str):
        self.path = path
        super().__init__(f"{path or '<root>'}: {message}")


def field(default: Any = dataclasses.MISSING, *, doc: str, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with a documentation string (shown in errors and ``llp config``)."""
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc})


def check(condition: bool, path: str, message: str) -> None:
    """Raise ``ConfigError(path, message)`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(path, message)


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in get_args(tp))
    if origin in (list, tuple):
        args = get_args(tp)
        return f"a list of {_type_name(args[0])}" if args else "a list"
    if origin is dict:
        return f"a mapping of {_type_name(get_args(tp)[1])}"
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        allowed = get_args(tp)
        check(value in allowed, path, f"got {value!r}, allowed values: {', '.join(repr(a) for a in allowed)}")
        return value
    if origin in (Union, types.UnionType):
        given = [a for a in get_args(tp) if a is not type(None)]
        if value is not None and len(given) == 1:  # an optional value that is given: its own type's error
            return _convert(given[0], value, path)
        errors = []
        for arg in get_args(tp):
            try:
                return _convert(arg, value, path)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(path, f"got {value!r}, expected {_type_name(tp)}")
    if tp is type(None):
        check(value is None, path, f"got {value!r}, expected null")
        return None
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if origin in (list, tuple):
        check(isinstance(value, (list, tuple)), path, f"got {value!r}, expected {_type_name(tp)}")
        args = get_args(tp)
        if origin is tuple and args and args[-1] is not Ellipsis:
            check(len(value) == len(args), path, f"expected {len(args)} values, got {len(value)}")
            return tuple(_convert(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        items = [_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        check(isinstance(value, dict), path, f"got {value!r}, expected {_type_name(tp)}")
        key_tp, val_tp = get_args(tp) or (Any, Any)
        return {_convert(key_tp, k, path): _convert(val_tp, v, f"{path}.{k}") for k, v in value.items()}
    if tp is bool:
        check(isinstance(value, bool), path, f"got {value!r}, expected true or false")
        return value
    if tp is int:
        check(isinstance(value, int) and not isinstance(value, bool), path, f"got {value!r}, expected an integer")
        return value
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        check(ok, path, f"got {value!r}, expected a number")
        check(math.isfinite(value), path, f"got {value!r}, expected a finite number")
        return float(value)
    if tp is str:
        check(isinstance(value, str), path, f"got {value!r}, expected a string")
        return value
    raise ConfigError(path, f"unsupported config type {tp!r}")


def build(cls: type[T], data: Any, path: str = "") -> T:
    """Build dataclass ``cls`` from ``data`` (a dict), validating keys, types and values."""
    if isinstance(data, cls):
        return data
    check(isinstance(data, dict), path, f"expected a mapping of {cls.__name__} fields, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        where = f"{path}.{key}" if path else str(key)
        raise ConfigError(where, f"unknown key; allowed keys: {', '.join(sorted(fields))}")
    kwargs = {}
    for name, f in fields.items():
        sub = f"{path}.{name}" if path else name
        if name in data:
            kwargs[name] = _convert(hints[name], data[name], sub)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(sub, "required key is missing")
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if validate is not None:
        validate(path)
    return obj


def to_dict(obj: Any) -> Any:
    """The plain-data form of a config (dicts, lists, scalars), suitable for YAML and hashing."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def merge(base: dict, override: dict) -> dict:
    """Deep-merge ``override`` into a copy of ``base`` (mappings merge, everything else replaces)."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def docs(cls: type) -> dict[str, str]:
    """Field name -> documentation string of a config dataclass."""
    return {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}
