"""Co-located actor: simulator and learner in one process (the GPU-simulator layout).

With a GPU simulator holding thousands of envs, rollouts never leave the device
and the learner runs next to them; several such actors would average gradients
for multi-GPU training. On the embedded MuJoCo simulator it is simply the
lowest-overhead layout on one machine.
"""

from __future__ import annotations

import os

import torch

from llp.actors.learner import HoldsLearner
from llp.config.schema import build
from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO
from llp.learn.rollout import RolloutCollector
from llp.learn.runner import train_iteration
from llp.sim.config import EnvConfig
from llp.sim.env import ParkourEnv


class ColocatedWorker(HoldsLearner):
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
        torch.manual_seed(seed)
        self.env = ParkourEnv(build(EnvConfig, env_cfg), num_envs, seed=seed, threads=threads)
        dims = self.env.obs_dims()
        actor = Actor(build(ActorConfig, actor_cfg), dims, self.env.num_actions)
        critic = Critic(build(CriticConfig, critic_cfg), dims) if critic_cfg is not None else None
        ppo = build(PPOConfig, ppo_cfg)
        self.ppo = PPO(actor, critic, ppo)
        self.collector = RolloutCollector(self.env, actor, critic, ppo.num_steps)

    def spaces(self) -> dict:
        return {
            "obs_dims": self.env.obs_dims(),
            "num_actions": self.env.num_actions,
            "pid": os.getpid(),
            "num_envs": self.env.num_envs,
        }

    def iteration(self) -> dict:
        return train_iteration(self.collector, self.ppo)
