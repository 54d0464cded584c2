"""Co-located actor: simulator and learner in one process (the GPU-simulator layout).

With a GPU simulator holding thousands of envs, rollouts never leave the device
and the learner runs next to them; several such actors would average gradients
for multi-GPU training. On the embedded MuJoCo simulator it is simply the
lowest-overhead layout on one machine.
"""

from __future__ import annotations

import torch

from llp.actors.learner import HoldsLearner
from llp.actors.simulator import HostsEnv, build_env_and_models
from llp.config.schema import build
from llp.learn.configs import PPOConfig
from llp.learn.ppo import PPO
from llp.learn.rollout import RolloutCollector
from llp.learn.runner import train_iteration


class ColocatedWorker(HostsEnv, HoldsLearner):
    def __init__(
        self,
        env_cfg: dict,
        num_envs: int,
        seed: int,
        actor_cfg: dict,
        critic_cfg: dict | None,
        ppo_cfg: dict,
        threads: int = 1,
        learner_threads: int = 1,
    ):
        torch.set_num_threads(learner_threads)
        self.env, actor, critic = build_env_and_models(env_cfg, num_envs, seed, actor_cfg, critic_cfg, threads)
        ppo = build(PPOConfig, ppo_cfg)
        self.ppo = PPO(actor, critic, ppo)
        self.collector = RolloutCollector(self.env, actor, critic, ppo.num_steps)

    def iteration(self) -> dict:
        return train_iteration(self.collector, self.ppo)
