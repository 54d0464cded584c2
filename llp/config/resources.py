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
    learners: int = field(
        default=1,
        doc="Learner actors training the policy data-parallel (decoupled mode): each takes the rollouts of "
        "sim_actors / learners simulators, and torch.distributed averages their gradients every step "
        "(NCCL on GPUs, Gloo on CPUs). One per GPU; learner_cpus, learner_gpus and learner_resources are "
        "per learner.",
    )
    learner_threads: int = field(
        default=1, doc="Torch threads of the learner (simulators idle while it updates, so it may use their cores)."
    )
    sim_resources: dict[str, float] = field(
        default_factory=dict,
        doc="Ray custom resources each simulator actor needs, to place it on chosen nodes of a cluster "
        "(e.g. {cpu_sim_node: 1}; the node declares them with `ray start --resources`).",
    )
    learner_resources: dict[str, float] = field(
        default_factory=dict, doc="Ray custom resources the learner (or co-located) actor needs (e.g. {head: 1})."
    )
    placement_timeout_s: float = field(
        default=600.0,
        doc="Seconds a stage waits for its actors to be placed; then it fails, naming what it asked for and what "
        "the cluster has free (an autoscaling cluster may need minutes to add nodes).",
    )
    max_restarts: int = field(default=3, doc="Times Ray replaces a dead simulator actor.")
    task_retries: int = field(default=2, doc="Times a rollout call is retried on a replaced actor.")

    def validate(self, path: str) -> None:
        check(self.sim_actors >= 1, f"{path}.sim_actors", "must be >= 1")
        check(self.sim_actor_cpus > 0, f"{path}.sim_actor_cpus", "must be positive")
        check(self.learner_cpus >= 0, f"{path}.learner_cpus", "must be >= 0")
        check(self.sim_threads >= 1, f"{path}.sim_threads", "must be >= 1")
        check(self.learners >= 1, f"{path}.learners", "must be >= 1")
        check(self.sim_actors % self.learners == 0, f"{path}.learners",
              f"must divide sim_actors ({self.sim_actors}): each learner takes the same number of simulators' "
              "rollouts, so that all take the same number of steps")  # fmt: skip
        check(self.learners == 1 or self.mode == "decoupled", f"{path}.learners",
              "data-parallel learners need mode: decoupled")  # fmt: skip
        check(self.learner_threads >= 1, f"{path}.learner_threads", "must be >= 1")
        for name, table in (("sim_resources", self.sim_resources), ("learner_resources", self.learner_resources)):
            for key, amount in table.items():
                check(amount > 0, f"{path}.{name}.{key}", "must be positive")
                check(key not in ("CPU", "GPU", "memory"), f"{path}.{name}.{key}",
                      "CPUs and GPUs have their own settings (sim_actor_cpus, learner_cpus, learner_gpus)")  # fmt: skip
        check(self.max_restarts >= 0 and self.task_retries >= 0, f"{path}.max_restarts", "must be >= 0")
        check(self.placement_timeout_s > 0, f"{path}.placement_timeout_s", "must be positive")

    def custom_resources(self) -> dict[str, float]:
        """Custom resources the stage's actors ask for at once (only a cluster's nodes declare them)."""
        total: dict[str, float] = {}
        parts = [(self.learner_resources, 1)] if self.mode == "colocated" else [
            (self.sim_resources, self.sim_actors), (self.learner_resources, self.learners)]  # fmt: skip
        for resources, count in parts:
            for name, amount in resources.items():
                total[name] = total.get(name, 0.0) + amount * count
        return total

    def for_groups(self, groups: int) -> ResourcesConfig:
        """The simulator layout of a stage with ``groups`` env groups: the same number of actors per group (as
        many as fit in ``sim_actors``, at least one), sharing the same simulator CPUs in all."""
        from dataclasses import replace

        actors = groups * max(1, self.sim_actors // groups)
        if actors == self.sim_actors:
            return self
        share = self.sim_actors / actors  # every per-actor reservation shrinks alike: the stage asks for no more
        cpus = round(self.sim_actor_cpus * share, 3)  # than its configured total, which the cluster was sized for
        custom = {name: round(amount * share, 4) for name, amount in self.sim_resources.items()}
        return replace(self, sim_actors=actors, sim_actor_cpus=cpus, sim_resources=custom)

    def gpu_demand(self) -> float:
        """GPUs a training stage's actors reserve at once."""
        return self.learner_gpus * (1 if self.mode == "colocated" else self.learners)

    def cpu_demand(self) -> float:
        """CPUs a training stage's actors reserve at once (Ray waits forever for CPUs that never come)."""
        if self.mode == "colocated":
            return self.sim_actor_cpus
        return self.sim_actors * self.sim_actor_cpus + self.learners * self.learner_cpus
