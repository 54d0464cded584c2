"""Co-located actor: simulator and learner in one process (the GPU-simulator layout).

With a GPU simulator holding thousands of envs, rollouts never leave the device
and the learner runs next to them; several such actors would average gradients
for multi-GPU training. On the embedded MuJoCo simulator it is simply the
lowest-overhead layout on one machine.
"""

from __future__ import annotations

import torch

from llp.actors.learner import HoldsLearner
from llp.actors.simulator import HostsEnv, build_env
from llp.learn.learner import build_collector, build_learner, teacher_groups, train_iteration
from llp.learn.spec import TrainSpec


class ColocatedWorker(HostsEnv, HoldsLearner):
    def __init__(self, spec: TrainSpec, threads: int = 1, learner_threads: int = 1):
        torch.set_num_threads(learner_threads)
        self.env = build_env(spec, 0, threads)
        groups = teacher_groups(spec, self.env.course_state()["column"])
        self.learner = build_learner(spec, self.env.obs_dims(), self.env.num_actions, groups)
        self.collector = build_collector(self.env, spec, self.learner.actor, self.learner.ppo.critic)

    def iteration(self) -> dict:
        return train_iteration(self.collector, self.learner)
