"""The fields stage configs share: a stage's retries; the task and robot it runs; and, for a training stage, the
task's overrides, its simulators' size and its checkpoints. A stage redeclares a shared field only to change its
default or its words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field


@dataclass(kw_only=True)
class StageConfig:
    retries: int = field(default=1, doc="Prefect retries of this stage.")


@dataclass(kw_only=True)
class TaskStageConfig(StageConfig):
    task: str = field(default="locomotion", doc="Task config (conf/task/).")
    robot: str = field(default="lightbot0_like", doc="Robot config (conf/robot/).")


@dataclass(kw_only=True)
class TrainingStageConfig(TaskStageConfig):
    env: dict[str, Any] = field(default_factory=dict, doc="Overrides of the task config (validated).")
    envs_per_actor: int = field(default=64, doc="Envs in each simulator actor.")
    checkpoint_every: int = field(default=50, doc="Iterations between mid-stage checkpoints (and metric uploads).")
    retries: int = field(default=2, doc="Prefect retries of this stage (each resumes from its last checkpoint).")

    def check_training(self, path: str, *counts: str) -> None:
        """The shared fields are in range, and so is each of ``counts`` (a budget or a trial count: >= 1)."""
        for name in ("envs_per_actor", "checkpoint_every", *counts):
            check(getattr(self, name) >= 1, f"{path}.{name}", "must be >= 1")
        check(self.retries >= 0, f"{path}.retries", "must be >= 0")
