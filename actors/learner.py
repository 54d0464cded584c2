"""Learner actor: owns the networks and the optimiser, turns rollout batches into updated weights."""

from __future__ import annotations

import os

import torch

from llp.config.schema import build
from llp.learn.checkpoint import load_checkpoint, save_checkpoint
from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO
from llp.learn.storage import Rollout


class HoldsLearner:
    """What every actor that owns a learner (``self.ppo``) answers: weights, checkpoints, the policy."""

    ppo: PPO

    def pid(self) -> int:
        return os.getpid()

    def weights(self) -> dict:
        return {
            "actor": self.ppo.actor.state_dict(),
            "critic": None if self.ppo.critic is None else self.ppo.critic.state_dict(),
        }

    def save(self, path: str, iteration: int, history: list) -> str:
        return str(save_checkpoint(path, self.ppo, iteration, history=history))

    def load(self, path: str) -> dict:
        state = load_checkpoint(path, self.ppo)
        return {"iteration": state["iteration"], "history": state["history"]}

    def actor_state(self) -> dict:
        return self.ppo.actor.state_dict()


class LearnerWorker(HoldsLearner):
    """PPO (and DAgger) updates on rollouts gathered by simulator actors."""

    def __init__(
        self,
        obs_dims: dict,
        num_actions: int,
        actor_cfg: dict,
        critic_cfg: dict | None,
        ppo_cfg: dict,
        seed: int,
        threads: int = 1,
    ):
        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        actor = Actor(build(ActorConfig, actor_cfg), obs_dims, num_actions)
        critic = Critic(build(CriticConfig, critic_cfg), obs_dims) if critic_cfg is not None else None
        self.ppo = PPO(actor, critic, build(PPOConfig, ppo_cfg))

    def update(self, *rollouts: Rollout) -> tuple[dict, dict]:
        """One learning step on the simulators' rollouts (joined along the env axis); returns (metrics, weights)."""
        rollout = rollouts[0] if len(rollouts) == 1 else Rollout.concat_envs(list(rollouts))
        metrics = self.ppo.update(rollout)
        return metrics, self.weights()
