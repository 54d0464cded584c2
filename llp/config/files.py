"""Where the YAML configs live and how they are read (a task config is assembled by llp.sim.tasks)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from llp.config.schema import ConfigError, merge

CONF_DIR = Path(os.environ.get("LLP_CONF_DIR", Path(__file__).resolve().parents[2] / "conf"))


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last silently)."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, _ in node.value:  # the mapping's own keys (merged ones, '<<: *anchor', may be overridden)
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark,
                f"the key {key!r} is given twice (line {seen[key] + 1} and line {key_node.start_mark.line + 1})",
                key_node.start_mark,
            )  # fmt: skip
        seen[key] = key_node.start_mark.line
    loader.flatten_mapping(node)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def load_yaml(text: str):
    """Parse YAML text as ``yaml.safe_load`` does, but a key given twice in one mapping is a YAMLError."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a safe loader)


def read_yaml(path: Path) -> dict:
    """Load a YAML mapping; a file that is missing or not a mapping, or that gives a key twice, is a ConfigError
    naming it."""
    if not path.is_file():
        raise ConfigError(str(path), "file not found")
    try:
        data = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(str(path), f"not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(str(path), "expected a mapping at the top level")
    return data


def named(kind: str, name: str, _seen: tuple[str, ...] = ()) -> dict:
    """conf/<kind>/<name>.yaml as a dict, with a clear error listing what exists. A file with ``extends: BASE``
    is BASE's config with the file's own keys deep-merged on top (derived configs adjust, never copy)."""
    folder = CONF_DIR / kind
    path = folder / f"{name}.yaml"
    if not path.is_file():
        options = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ConfigError(kind, f"no {kind} named {name!r}; allowed values: {', '.join(options)}")
    data = read_yaml(path)
    base = data.pop("extends", None)
    if base is None:
        return data
    if base in (*_seen, name):
        raise ConfigError(str(path), f"'extends: {base}' makes a cycle")
    return merge(named(kind, base, (*_seen, name)), data)
