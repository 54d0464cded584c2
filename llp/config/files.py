"""Where the YAML configs live and how a task config is assembled from them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from llp.config.schema import ConfigError, build, merge

CONF_DIR = Path(os.environ.get("LLP_CONF_DIR", Path(__file__).resolve().parents[2] / "conf"))


def read_yaml(path: Path) -> dict:
    """Load a YAML mapping; a file that is missing or not a mapping is a ConfigError naming it."""
    if not path.is_file():
        raise ConfigError(str(path), "file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
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


def env_config(task: str = "locomotion", robot: str = "lightbot0_like", overrides: dict[str, Any] | None = None):
    """The EnvConfig of ``task`` on ``robot`` with ``overrides`` deep-merged on top."""
    from llp.sim.backend import sim_defaults
    from llp.sim.config import EnvConfig

    data = merge(named("task", task), {"robot": named("robot", robot), **sim_defaults()})
    if overrides:
        data = merge(data, overrides)
    return build(EnvConfig, data)
