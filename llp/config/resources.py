"""How a stage's work is spread over Ray actors (shared by the pipeline config and the actor pools)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llp.config.schema import check, field


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

    def cpu_demand(self) -> float:
        """CPUs a training stage's actors reserve at once (Ray waits forever for CPUs that never come)."""
        if self.mode == "colocated":
            return self.sim_actor_cpus
        return self.sim_actors * self.sim_actor_cpus + self.learner_cpus
