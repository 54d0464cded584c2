"""The pipeline configuration: which stages run, their budgets, resources, and where results go.

``load_pipeline(profile, sets)`` merges conf/pipeline.yaml, conf/profile/<profile>.yaml
and ``--set key.path=value`` overrides and validates the result. This layer knows no
stage: ``llp.stages.registry.load_pipeline`` also validates each stage's config
(simulator config included), before any Ray, Prefect or MLflow state exists.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import yaml

from llp.config.files import CONF_DIR, named, read_yaml
from llp.config.resources import ResourcesConfig
from llp.config.schema import ConfigError, build, check, field, merge, to_dict

__all__ = ["PipelineConfig", "ResourcesConfig", "SimConfig", "apply_sets", "config_hash", "load_pipeline", "resolved"]


@dataclass(kw_only=True)
class SimConfig:
    """The physics engine every stage's simulators run (a stage's own env overrides win)."""

    backend: str = field(
        default="mujoco",
        doc="mujoco: MuJoCo's C engine, a model per terrain tile, threads per actor (the embedded default); "
        "warp: MuJoCo Warp, every env a world of one model, on the CPU or a GPU; isaaclab: Isaac Lab 3 on Newton, in "
        "its own environment (make isaaclab), for the locomotion teacher (docs/simulator.md: the backend table).",
    )
    device: str = field(default="cpu", doc="Where the warp backend runs: cpu, cuda or cuda:N (isaaclab: cpu).")
    # whether this backend can run here is checked with the stages (llp.stages.registry.check_pipeline)


@dataclass(kw_only=True)
class PipelineConfig:
    """One LLP pipeline run."""

    name: str = field(default="llp-pipeline", doc="Prefect flow name.")
    experiment: str = field(default="llp", doc="MLflow experiment.")
    profile: str = field(default="local", doc="Profile the config was built from (recorded).")
    seed: int = field(default=0, doc="Base seed; each stage derives its own.")
    run_root: str = field(default="runs", doc="Folder for run directories, local MLflow and Prefect state.")
    resources: ResourcesConfig = field(default_factory=ResourcesConfig, doc="Ray actor layout.")
    sim: SimConfig = field(default_factory=SimConfig, doc="Physics engine of every stage's simulators.")
    stages: dict[str, dict[str, Any]] = field(
        default_factory=dict,
        doc="Stage name -> stage config, in order (a stage reading another is run after it). The stage's kind is its "
        "`kind:` entry, or its name.",
    )
    skills: dict[str, dict[str, str]] = field(
        default_factory=dict,
        doc="Skill name -> {references: the stage growing its reference library, expert: the stage training its "
        "expert}. The merge and the transition take every skill named here (unless their config names some).",
    )

    def validate(self, path: str) -> None:
        # each stage's own config is checked by llp.stages.registry.check_pipeline, one layer up
        check(len(self.stages) > 0, "stages", "the pipeline needs at least one stage")
        for skill, decl in self.skills.items():
            check(isinstance(decl, dict) and set(decl) == {"references", "expert"}, f"skills.{skill}",
                  "expected {references: <stage>, expert: <stage>}")  # fmt: skip
            check(all(isinstance(v, str) and v for v in decl.values()), f"skills.{skill}", "stage names are strings")

    def check_gpu_layout(self) -> None:
        """A GPU simulator needs the co-located layout (checked after the backend can run on that device)."""
        if self.sim.device != "cpu":  # one actor owns the GPU's Warp batch and the learner beside it
            check(self.resources.mode == "colocated", "sim.device",
                  f"{self.sim.device} simulates on a GPU, which needs resources.mode colocated (one actor owns "
                  "the Warp batch and the learner on that GPU); it is decoupled")  # fmt: skip
            check(self.resources.learner_gpus >= 1, "resources.learner_gpus",
                  f"sim.device {self.sim.device} needs the co-located actor to hold a GPU: set it to 1")  # fmt: skip


def parse_set(item: str) -> tuple[list[str], Any]:
    """'a.b.c=value' -> (['a', 'b', 'c'], value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(item, "--set expects key.path=value")
    key, raw = item.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(key, "--set expects a dotted key path such as stages.locomotion_teacher.iterations")
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_sets(data: dict, sets: list[str]) -> dict:
    for item in sets:
        path, value = parse_set(item)
        node = data
        for part in path[:-1]:
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(".".join(path), f"{part!r} is not a mapping")
            node = nxt
        node[path[-1]] = value
    return data


def load_pipeline(profile: str = "local", sets: list[str] | None = None) -> PipelineConfig:
    """Merge pipeline.yaml + profile + --set overrides and validate (no side effects)."""
    base = read_yaml(CONF_DIR / "pipeline.yaml")
    data = merge(base, named("profile", profile))
    data["profile"] = profile
    data = apply_sets(data, list(sets or []))
    return build(PipelineConfig, data)


def config_hash(data: Any) -> str:
    """Stable content hash of plain config data."""
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def resolved(cfg: PipelineConfig) -> dict:
    return to_dict(cfg)
