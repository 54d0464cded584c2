"""Small vectorised envs with the ParkourEnv interface, for learning-rule tests."""

from __future__ import annotations

import math

import torch

from llp.sim.env import StepResult


class _Base:
    num_envs: int
    num_actions: int

    def __init__(self, num_envs: int, horizon: int, seed: int):
        self.num_envs, self.horizon = num_envs, horizon
        self.gen = torch.Generator().manual_seed(seed)
        self.t = torch.zeros(num_envs, dtype=torch.long)
        self.episode_return = torch.zeros(num_envs)

    def rand(self, *shape) -> torch.Tensor:
        return torch.rand(*shape, generator=self.gen)

    def obs_dims(self) -> dict[str, dict[str, int]]:
        return {g: {t: v.shape[-1] for t, v in terms.items()} for g, terms in self._obs().items()}

    def _finish(self, reward, terminated, truncated, info=None) -> StepResult:
        info = dict(info or {})
        self.episode_return += reward
        done = terminated | truncated
        final_obs = None
        if bool(done.any()):
            final_obs = self._obs()
            ids = torch.nonzero(done)[:, 0]
            info["episode"] = {
                "return": self.episode_return[ids].tolist(),
                "length": self.t[ids].tolist(),
                "terminated": terminated[ids].tolist(),
            }
            self.episode_return[ids] = 0.0
            self._reset(ids)
        return StepResult(self._obs(), reward, terminated, truncated, final_obs, info)


class PointMass(_Base):
    """Drive a 2-D point mass to a target: reward = -distance; time-outs after ``horizon`` steps.

    The critic additionally sees the remaining time (asymmetric observation groups).
    """

    num_actions = 2

    def __init__(self, num_envs: int = 64, horizon: int = 50, seed: int = 0):
        super().__init__(num_envs, horizon, seed)
        self.pos = torch.zeros(num_envs, 2)
        self.vel = torch.zeros(num_envs, 2)
        self.target = torch.zeros(num_envs, 2)
        self._reset(torch.arange(num_envs))

    def _reset(self, ids):
        self.pos[ids] = self.rand(len(ids), 2) * 4 - 2
        self.vel[ids] = 0.0
        self.target[ids] = self.rand(len(ids), 2) * 4 - 2
        self.t[ids] = 0

    def _obs(self):
        state = torch.cat([self.pos, self.vel, self.target - self.pos], dim=1)
        time_left = (1 - self.t.float() / self.horizon)[:, None]
        return {"policy": {"state": state.clone()}, "critic": {"state": state.clone(), "time": time_left}}

    def reset(self):
        return self._obs()

    def step(self, actions):
        a = actions.clamp(-1, 1)
        self.vel = 0.9 * self.vel + 0.1 * a
        self.pos = self.pos + 0.1 * self.vel * 5
        self.t += 1
        reward = -torch.linalg.norm(self.target - self.pos, dim=1) * 0.1
        truncated = self.t >= self.horizon
        return self._finish(reward, torch.zeros_like(truncated), truncated)


class ScriptedExpertEnv(_Base):
    """1-D double integrator (x, v); the scripted expert is a = -2 x - 1.5 v.

    Episodes start at x in [-start, start]; the expert from |x0| <= 0.5 never leaves |x| <= 0.5.
    """

    num_actions = 1

    def __init__(self, num_envs: int = 64, horizon: int = 40, start: float = 3.0, seed: int = 0):
        super().__init__(num_envs, horizon, seed)
        self.start = start
        self.x = torch.zeros(num_envs)
        self.v = torch.zeros(num_envs)
        self._reset(torch.arange(num_envs))

    @staticmethod
    def expert(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return -2.0 * x - 1.5 * v

    def _reset(self, ids):
        self.x[ids] = (self.rand(len(ids)) * 2 - 1) * self.start
        self.v[ids] = 0.0
        self.t[ids] = 0

    def _obs(self):
        s = torch.stack([self.x, self.v], dim=1)
        return {"policy": {"state": s.clone()}, "teacher": {"state": s.clone()}}

    def reset(self):
        return self._obs()

    def step(self, actions):
        a = actions[:, 0].clamp(-10, 10)
        self.v = self.v + 0.1 * a
        self.x = self.x + 0.1 * self.v
        self.t += 1
        reward = -(self.x**2)
        truncated = self.t >= self.horizon
        return self._finish(reward, torch.zeros_like(truncated), truncated)


class CueMemory(_Base):
    """A cue (+1 or -1) is shown only at the first step of an episode; the right action at every later step is
    the cue. The teacher group shows the cue all the time (a privileged teacher)."""

    num_actions = 1

    def __init__(self, num_envs: int = 64, horizon: int = 8, seed: int = 0):
        super().__init__(num_envs, horizon, seed)
        self.cue = torch.zeros(num_envs)
        self._reset(torch.arange(num_envs))

    def _reset(self, ids):
        self.cue[ids] = torch.where(self.rand(len(ids)) < 0.5, -1.0, 1.0)
        self.t[ids] = 0

    def _obs(self):
        shown = torch.where(self.t == 0, self.cue, torch.zeros_like(self.cue))
        clock = self.t.float() / self.horizon
        policy = torch.stack([shown, clock], dim=1)
        teacher = torch.stack([self.cue, clock], dim=1)
        return {"policy": {"cue": policy}, "teacher": {"cue": teacher}}

    def reset(self):
        return self._obs()

    def step(self, actions):
        correct = (torch.sign(actions[:, 0]) == self.cue) & (self.t > 0)
        reward = correct.float()
        self.t += 1
        truncated = self.t >= self.horizon
        return self._finish(reward, torch.zeros_like(truncated), truncated)


class Slider(_Base):
    """A 1-D slider whose action is its velocity. AMP features: (x, v). The reference motion moves at speed 1
    (a triangle wave between -1 and 1); there is no task reward, only style."""

    num_actions = 1

    def __init__(self, num_envs: int = 64, horizon: int = 50, seed: int = 0):
        super().__init__(num_envs, horizon, seed)
        self.x = torch.zeros(num_envs)
        self.v = torch.zeros(num_envs)
        self.progress = torch.zeros(num_envs)
        self._reset(torch.arange(num_envs))

    def _reset(self, ids):
        self.x[ids] = self.rand(len(ids)) * 2 - 1
        self.v[ids] = 0.0
        self.t[ids] = 0

    def _obs(self):
        feats = torch.stack([self.x, self.v], dim=1)
        return {
            "policy": {"state": feats.clone()},
            "amp": {"features": feats.clone(), "progress": self.t[:, None].float() * 0.1},
        }

    def reset(self):
        return self._obs()

    def step(self, actions):
        self.v = actions[:, 0].clamp(-2, 2)
        self.x = self.x + 0.1 * self.v
        self.t += 1
        reward = torch.zeros(self.num_envs)
        truncated = self.t >= self.horizon
        return self._finish(reward, torch.zeros_like(truncated), truncated)

    @staticmethod
    def reference_transitions(n: int = 4096) -> torch.Tensor:
        """Transitions ((x, v), (x', v')) of the reference triangle wave at speed 1, dt 0.1."""
        phase = torch.rand(n) * 4.0

        def at(p):
            p = p % 4.0
            x = torch.where(p < 2.0, p - 1.0, 3.0 - p)
            v = torch.where(p < 2.0, torch.ones_like(p), -torch.ones_like(p))
            return torch.stack([x, v], dim=1)

        return torch.cat([at(phase), at(phase + 0.1)], dim=1)


def speed_of(policy_v: torch.Tensor) -> float:
    return float(policy_v.abs().mean())


__all__ = ["PointMass", "ScriptedExpertEnv", "CueMemory", "Slider", "speed_of", "math"]


class ChattyEnv:
    """Prints to stdout as simulators do (tests of ``llp.sim.remote_env``); its reward is the sum of the actions."""

    num_actions = 2
    reward_names = ["sum"]

    def __init__(self, num_envs: int):
        self.num_envs = num_envs
        print("ChattyEnv: starting, and writing to stdout")

    def obs_dims(self) -> dict[str, dict[str, int]]:
        return {"policy": {"x": 1}}

    def reset(self):
        return {"policy": {"x": torch.zeros(self.num_envs, 1)}}

    def step(self, actions: torch.Tensor) -> StepResult:
        print("ChattyEnv: a step")
        if actions.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions must be [{self.num_envs}, {self.num_actions}], got {list(actions.shape)}")
        none = torch.zeros(self.num_envs, dtype=torch.bool)
        return StepResult(self.reset(), actions.sum(dim=1), none, none, None, {})
