"""The pipeline configuration: which stages run, their budgets, resources, and where results go.

``load_pipeline(profile, sets)`` merges conf/pipeline.yaml, conf/profile/<profile>.yaml
and ``--set key.path=value`` overrides, then validates everything, including each
stage's simulator config, before any Ray, Prefect or MLflow state exists.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from llp.config.files import CONF_DIR, named, read_yaml
from llp.config.schema import ConfigError, build, check, field, merge, to_dict


@dataclass(kw_only=True)
class ResourcesConfig:
    """How a stage's work is spread over Ray actors."""

    mode: Literal["decoupled", "colocated"] = field(
        default="decoupled",
        doc="decoupled: simulator actors roll out with a policy copy and ship batches to a learner actor; "
        "colocated: one actor holds simulator and learner (GPU simulators: rollouts never leave the device).",
    )
    sim_actors: int = field(default=2, doc="Simulator actors (one simulator instance each).")
    sim_actor_cpus: float = field(default=0.9, doc="CPUs reserved per simulator actor (fractional is fine).")
    sim_threads: int = field(default=1, doc="MuJoCo batch threads inside each simulator actor.")
    learner_cpus: float = field(default=0.1, doc="CPUs reserved for the learner actor.")
    learner_gpus: float = field(default=0.0, doc="GPUs reserved for the learner (or the co-located actor).")
    learner_threads: int = field(
        default=1, doc="Torch threads of the learner (simulators idle while it updates, so it may use their cores)."
    )
    max_restarts: int = field(default=3, doc="Times Ray replaces a dead simulator actor.")
    task_retries: int = field(default=2, doc="Times a rollout call is retried on a replaced actor.")

    def validate(self, path: str) -> None:
        check(self.sim_actors >= 1, f"{path}.sim_actors", "must be >= 1")
        check(self.sim_actor_cpus > 0, f"{path}.sim_actor_cpus", "must be positive")
        check(self.learner_cpus >= 0, f"{path}.learner_cpus", "must be >= 0")
        check(self.sim_threads >= 1, f"{path}.sim_threads", "must be >= 1")
        check(self.learner_threads >= 1, f"{path}.learner_threads", "must be >= 1")
        check(self.max_restarts >= 0 and self.task_retries >= 0, f"{path}.max_restarts", "must be >= 0")


@dataclass(kw_only=True)
class PipelineConfig:
    """One LLP pipeline run."""

    name: str = field(default="llp-pipeline", doc="Prefect flow name.")
    experiment: str = field(default="llp", doc="MLflow experiment.")
    profile: str = field(default="local", doc="Profile the config was built from (recorded).")
    seed: int = field(default=0, doc="Base seed; each stage derives its own.")
    run_root: str = field(default="runs", doc="Folder for run directories, local MLflow and Prefect state.")
    resources: ResourcesConfig = field(default_factory=ResourcesConfig, doc="Ray actor layout.")
    stages: dict[str, dict[str, Any]] = field(default_factory=dict, doc="Stage name -> stage config, in order.")

    def validate(self, path: str) -> None:
        from llp.stages.registry import STAGES

        check(len(self.stages) > 0, "stages", "the pipeline needs at least one stage")
        for name, raw in self.stages.items():
            check(name in STAGES, f"stages.{name}", f"unknown stage; allowed values: {', '.join(STAGES)}")
            spec = STAGES[name]
            stage_cfg = build(spec.config, raw, f"stages.{name}")
            for input_name, upstream in spec.inputs(stage_cfg).items():
                check(
                    upstream in self.stages,
                    f"stages.{name}.{input_name}",
                    f"refers to stage {upstream!r}, which is not in this pipeline ({', '.join(self.stages)})",
                )
                check(
                    list(self.stages).index(upstream) < list(self.stages).index(name),
                    f"stages.{name}",
                    f"input stage {upstream!r} must come before it",
                )

    def stage(self, name: str):
        """The typed config of stage ``name``."""
        from llp.stages.registry import STAGES

        return build(STAGES[name].config, self.stages[name], f"stages.{name}")


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
