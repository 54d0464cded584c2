"""Co-located actor: simulator and learner in one process (the GPU-simulator layout).

With MuJoCo Warp on a GPU (``sim.backend: warp``, ``sim.device: cuda``) the env is
``DeviceParkourEnv``: the task runs in torch on the GPU that simulates, the
learner sits on the same GPU, and rollouts never leave it. On the embedded
MuJoCo simulator it is simply the lowest-overhead layout on one machine.
"""

from __future__ import annotations

import torch

from llp.actors.learner import HoldsLearner
from llp.actors.simulator import HostsEnv, build_env
from llp.learn.learner import build_collector, build_learner, teacher_groups, train_iteration
from llp.learn.spec import TrainSpec


def task_on_device(spec: TrainSpec) -> bool:
    """The task runs where the physics runs: on a GPU with the warp backend (terrain envs)."""
    from llp.sim.config import EnvConfig

    env = spec.env
    return isinstance(env, EnvConfig) and env.backend == "warp" and env.device != "cpu"


class ColocatedWorker(HostsEnv, HoldsLearner):
    def __init__(self, spec: TrainSpec, threads: int = 1, learner_threads: int = 1, device_task: bool | None = None):
        """``device_task``: compute the task in torch beside the physics (``DeviceParkourEnv``); None: when the
        physics runs on a GPU (``task_on_device``)."""
        torch.set_num_threads(learner_threads)
        on_device = task_on_device(spec) if device_task is None else device_task
        self.env = build_env(spec, 0, threads, device_task=on_device)
        groups = teacher_groups(spec, self.env.course_state()["column"])
        device = self.env.device if on_device else "cpu"
        self.learner = build_learner(spec, self.env.obs_dims(), self.env.num_actions, groups, device=device)
        self.collector = build_collector(self.env, spec, self.learner.actor, self.learner.ppo.critic)

    def iteration(self) -> dict:
        return train_iteration(self.collector, self.learner)

    def set_teacher_drives(self, share: float) -> None:
        self.collector.set_teacher_drives(share)
