"""The env group's label as an observation: ``obs["group"]["onehot"]``, for critics that may know which
group an env is in (the multi-expert stages' actors may not; ``TrainSpec`` refuses an actor that reads it)."""

from __future__ import annotations

import torch


class GroupLabel:
    """Wraps an env of group ``index`` of ``count``: every observation it returns also holds the group's one-hot.
    Everything else is the wrapped env's."""

    def __init__(self, env, index: int, count: int):
        if not 0 <= index < count:
            raise ValueError(f"group index {index} is not one of {count} groups")
        self.env = env
        self.onehot = torch.zeros(env.num_envs, count)
        self.onehot[:, index] = 1.0

    def __getattr__(self, name):
        return getattr(self.env, name)

    def obs_dims(self) -> dict:
        return {**self.env.obs_dims(), "group": {"onehot": self.onehot.shape[1]}}

    def _labelled(self, obs: dict | None) -> dict | None:
        if obs is not None:
            obs["group"] = {"onehot": self.onehot.clone()}
        return obs

    def reset(self) -> dict:
        return self._labelled(self.env.reset())

    def step(self, actions: torch.Tensor):
        result = self.env.step(actions)
        self._labelled(result.obs)
        self._labelled(result.final_obs)
        return result
