"""Ablations as config: each changes one training condition of the pipeline (``conf/ablation/<name>.yaml``).

An ablation is a list of ``--set`` overrides applied before the user's own, plus a description and the stage
it changes. `llp run --ablation NAME` applies it and tags the pipeline run ``llp.ablation=NAME`` so that
`llp compare llp.ablation=NAME` finds it. The paper's ablations of stages this platform does not have yet are
not shipped; ``LEFT_OUT`` says which, and why.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from llp.config.files import CONF_DIR, load_yaml
from llp.config.schema import ConfigError

ABLATION_DIR = CONF_DIR / "ablation"

LEFT_OUT = {
    "single_reference": "skills learned from the seed alone, without growth: the pipeline grows the climb over two "
    "rounds and its skill stage reads only grown entries; a seed-only library is not built yet",
}


@dataclass(frozen=True)
class Ablation:
    name: str
    description: str
    stage: str
    sets: list[str]


def available() -> list[str]:
    return sorted(p.stem for p in ABLATION_DIR.glob("*.yaml"))


def load_ablation(name: str) -> Ablation:
    path = ABLATION_DIR / f"{name}.yaml"
    if not path.is_file():
        why = f" ({LEFT_OUT[name]})" if name in LEFT_OUT else ""
        raise ConfigError("ablation", f"no ablation named {name!r}{why}; allowed values: {', '.join(available())}")
    try:
        data = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(str(path), f"not valid YAML: {err}") from None
    unknown = set(data) - {"description", "stage", "set"}
    if unknown:
        raise ConfigError(f"ablation {name}", f"unknown keys {sorted(unknown)}; allowed: description, stage, set")
    sets = data.get("set") or []
    if not isinstance(sets, list) or not all(isinstance(s, str) and "=" in s for s in sets):
        raise ConfigError(f"ablation {name}.set", "expected a list of KEY.PATH=VALUE overrides")
    return Ablation(name, str(data.get("description", "")), str(data.get("stage", "")), sets)
