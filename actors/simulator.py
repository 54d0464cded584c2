"""Simulator actor: one simulator instance with many envs, rolling out a copy of the current policy.

Plain Python class; ``actors.pool`` wraps it with ``ray.remote`` and resources.
It imports neither Prefect nor MLflow, so Ray workers never start either.
"""

from __future__ import annotations

import os

import torch

from llp.config.schema import build
from llp.learn.configs import ActorConfig, CriticConfig
from llp.learn.models import Actor, Critic
from llp.learn.rollout import RolloutCollector
from llp.sim.config import EnvConfig
from llp.sim.env import ParkourEnv


def build_env_and_models(
    env_cfg: dict, num_envs: int, seed: int, actor_cfg: dict, critic_cfg: dict | None, threads: int
) -> tuple[ParkourEnv, Actor, Critic | None]:
    """The simulator instance of an actor and the networks sized for its observations."""
    torch.manual_seed(seed)
    env = ParkourEnv(build(EnvConfig, env_cfg), num_envs, seed=seed, threads=threads)
    dims = env.obs_dims()
    actor = Actor(build(ActorConfig, actor_cfg), dims, env.num_actions)
    critic = Critic(build(CriticConfig, critic_cfg), dims) if critic_cfg is not None else None
    return env, actor, critic


class HostsEnv:
    """What every actor that hosts a simulator answers about it."""

    env: ParkourEnv

    def spaces(self) -> dict:
        return {
            "obs_dims": self.env.obs_dims(),
            "num_actions": self.env.num_actions,
            "pid": os.getpid(),
            "num_envs": self.env.num_envs,
        }

    def pid(self) -> int:
        return os.getpid()


class SimulatorWorker(HostsEnv):
    """Hosts a ``ParkourEnv`` of ``num_envs`` envs and a policy copy; ``collect(weights)`` returns a rollout."""

    def __init__(
        self,
        env_cfg: dict,
        num_envs: int,
        seed: int,
        actor_cfg: dict,
        critic_cfg: dict | None,
        num_steps: int,
        threads: int = 1,
        reward_groups: list[list[str]] | None = None,
    ):
        torch.set_num_threads(1)
        self.env, self.actor, self.critic = build_env_and_models(
            env_cfg, num_envs, seed, actor_cfg, critic_cfg, threads
        )
        self.collector = RolloutCollector(self.env, self.actor, self.critic, num_steps, reward_groups=reward_groups)

    def collect(self, weights: dict) -> tuple:
        """Load the broadcast weights, roll out ``num_steps`` steps of every env; returns (rollout, metrics)."""
        self.actor.load_state_dict(weights["actor"])
        if self.critic is not None and weights.get("critic") is not None:
            self.critic.load_state_dict(weights["critic"])
        rollout = self.collector.collect()
        return rollout, self.collector.pop_metrics()
