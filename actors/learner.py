"""Learner actor: owns the networks, the optimiser and the discriminators; turns rollouts into new weights."""

from __future__ import annotations

import os

import numpy as np
import torch

from llp.learn.learner import Learner, build_learner, teacher_groups
from llp.learn.spec import TrainSpec
from llp.learn.storage import Rollout


class HoldsLearner:
    """What every actor that owns a ``Learner`` answers: weights, checkpoints, the policy."""

    learner: Learner

    def pid(self) -> int:
        return os.getpid()

    def weights(self) -> dict:
        return self.learner.weights()

    def save(self, path: str, iteration: int, history: list) -> str:
        return self.learner.save(path, iteration, history)

    def load(self, path: str) -> dict:
        return self.learner.load(path)

    def actor_state(self) -> dict:
        return self.learner.actor.state_dict()

    def inject_nonfinite(self, count: int) -> None:
        """Chaos drill: the next ``count`` updates see a NaN reward (``LLP_INJECT_FAULT=<stage>@<it>:nan<count>``)."""
        self.learner.poison_next = count


class LearnerWorker(HoldsLearner):
    """The stage's ``Learner`` on rollouts gathered by its simulator actors (joined along the env axis)."""

    def __init__(self, spec: TrainSpec, spaces: dict, num_sims: int, threads: int = 1):
        torch.set_num_threads(threads)
        torch.manual_seed(spec.seed)
        groups = teacher_groups(spec, np.tile(spaces["columns"], num_sims))
        self.learner = build_learner(spec, spaces["obs_dims"], spaces["num_actions"], groups)

    def update(self, *rollouts: Rollout) -> tuple[dict, dict]:
        """One learning step; returns (metrics, weights)."""
        rollout = rollouts[0] if len(rollouts) == 1 else Rollout.concat_envs(list(rollouts))
        return self.learner.update(rollout), self.weights()
