"""The contract every simulator backend meets (MuJoCo today; Isaac Lab with thousands of GPU envs later).

Learning code, rollouts and actors depend on this protocol only: a batch of N
envs, torch tensors in and out (on the simulator's device), observation groups
of named terms, per-env auto-reset with terminations and truncations kept
apart, and the final observation of every env that ended.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from llp.sim.env import Obs, StepResult


@runtime_checkable
class VecEnv(Protocol):
    num_envs: int
    num_actions: int
    reward_names: list[str]  # order of the columns of info["weighted_terms"]

    def obs_dims(self) -> dict[str, dict[str, int]]:
        """Observation group -> term -> width."""
        ...

    def reset(self) -> Obs:
        """Reset every env; the first observation, {group: {term: [N, width]}}."""
        ...

    def step(self, actions: torch.Tensor) -> StepResult:
        """Apply actions [N, num_actions] for one policy step; ended envs reset individually."""
        ...
