"""Rollout storage: one on-policy batch of T steps x N envs, ready for PPO and DAgger.

Besides observations, actions and rewards it keeps what exact replay needs: the
policy memory before every step (frame history, GRU state), done flags split
into terminations and truncations, the critic's value of each truncated final
state, and (for DAgger) the teacher's action label of every visited state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from llp.learn.memory import Memory


@dataclass
class Rollout:
    """A batch of T steps from N envs (time-major)."""

    actor_obs: torch.Tensor  # [T, N, D] raw actor input frames
    critic_obs: torch.Tensor  # [T, N, Dc] raw critic inputs
    actions: torch.Tensor  # [T, N, A] actions sent to the env
    log_probs: torch.Tensor  # [T, N] log pi(a|s) at collection time
    means: torch.Tensor  # [T, N, A] action means at collection time
    stds: torch.Tensor  # [T, N, A] action stds at collection time
    values: torch.Tensor  # [T, N, H] V(s_t)
    rewards: torch.Tensor  # [T, N, H] rewards per reward group (style reward included when AMP is on)
    terminated: torch.Tensor  # [T, N] bool
    truncated: torch.Tensor  # [T, N] bool
    final_values: torch.Tensor  # [T, N, H] V(final state) where truncated, else 0
    last_values: torch.Tensor  # [N, H] V(s_T)
    frames: torch.Tensor | None = None  # [T, N, K-1, D] frame history before each step (frame stacking)
    fresh: torch.Tensor | None = None  # [T, N] bool: history not yet filled before each step
    hidden: torch.Tensor | None = None  # [T, L, N, Hg] GRU state before each step
    teacher_actions: torch.Tensor | None = None  # [T, N, A] DAgger labels on student-visited states
    labelled: torch.Tensor | None = None  # [N] bool: envs some teacher labels (the others' labels are not used)
    recon_targets: torch.Tensor | None = None  # [T, N, R] reconstruction targets (teacher height scan)
    amp_obs: torch.Tensor | None = None  # [T+1, N, F] AMP features of s_t (row T: after the last step)
    amp_phase: torch.Tensor | None = None  # [T, N] phase weight (0 = walk prior, 1 = skill prior)
    extras: dict = field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return self.actions.shape[0]

    @property
    def num_envs(self) -> int:
        return self.actions.shape[1]

    def memory_at(self, t: int, env_ids: torch.Tensor | slice = slice(None)) -> Memory:
        """The policy memory just before step ``t`` for ``env_ids``."""
        return Memory(
            frames=None if self.frames is None else self.frames[t, env_ids],
            fresh=None if self.fresh is None else self.fresh[t, env_ids],
            hidden=None if self.hidden is None else self.hidden[t][:, env_ids],
        )

    def stacked_frames(self) -> torch.Tensor:
        """[T, N, K, D]: the stacked input the policy saw at each step (feed-forward replay)."""
        frames = self.actor_obs[:, :, None, :]
        if self.frames is None:
            return frames
        history = torch.where(
            self.fresh[..., None, None],
            frames.expand_as(self.frames[..., :1, :]).expand(-1, -1, self.frames.shape[2], -1),
            self.frames,
        )
        return torch.cat([history, frames], dim=2)

    @property
    def dones(self) -> torch.Tensor:
        return self.terminated | self.truncated

    def to(self, device: str) -> Rollout:
        out = {}
        for k, v in self.__dict__.items():
            out[k] = v.to(device) if isinstance(v, torch.Tensor) else v
        return Rollout(**out)

    @staticmethod
    def concat_envs(parts: list[Rollout]) -> Rollout:
        """Join rollouts of several simulators along the env axis. A field some parts lack (another env group's:
        labels where no teacher is, AMP features where no prior is) is zeros (False) for their envs."""
        out = {}
        for k, v in parts[0].__dict__.items():
            if k == "extras":  # per-step extras (AMP's next-state features), [T, N, ...]
                names = {name for p in parts for name in p.extras}
                out[k] = {name: _joined([p.extras.get(name) for p in parts], parts, 1) for name in names}
            elif isinstance(v, torch.Tensor) or any(isinstance(getattr(p, k), torch.Tensor) for p in parts):
                axis = 0 if k in ("last_values", "labelled") else 2 if k == "hidden" else 1
                out[k] = _joined([getattr(p, k) for p in parts], parts, axis)
            else:
                out[k] = v
        return Rollout(**out)


def _joined(tensors: list, parts: list[Rollout], axis: int) -> torch.Tensor:
    """``tensors`` (one per part, None where a part lacks it) joined along ``axis``, zeros for the missing."""
    like = next(t for t in tensors if t is not None)
    filled = []
    for t, part in zip(tensors, parts):
        if t is None:
            shape = list(like.shape)
            shape[axis] = part.num_envs
            t = torch.zeros(shape, dtype=like.dtype)
        filled.append(t)
    return torch.cat(filled, dim=axis)
