"""Per-env policy memory: a frame history and/or a GRU state, reset per env on done.

A memory is what a policy carries from one step to the next. Rollouts record
the memory *before* each step, so that any stored step or window can be
replayed exactly: step-by-step evaluation and whole-sequence evaluation from the
same starting memory give identical outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Memory:
    """frames: [N, K-1, D] previous raw frames (None without stacking); fresh: [N] bool, no frame seen since reset;
    hidden: [layers, N, H] GRU state (None for feed-forward policies)."""

    frames: torch.Tensor | None = None
    fresh: torch.Tensor | None = None
    hidden: torch.Tensor | None = None

    def index(self, ids) -> Memory:
        """The memory of envs ``ids`` (hidden is indexed along its env axis, dim 1)."""
        return Memory(
            frames=None if self.frames is None else self.frames[ids],
            fresh=None if self.fresh is None else self.fresh[ids],
            hidden=None if self.hidden is None else self.hidden[:, ids],
        )

    def detach(self) -> Memory:
        return Memory(
            frames=None if self.frames is None else self.frames.detach(),
            fresh=self.fresh,
            hidden=None if self.hidden is None else self.hidden.detach(),
        )

    def clone(self) -> Memory:
        return Memory(
            frames=None if self.frames is None else self.frames.clone(),
            fresh=None if self.fresh is None else self.fresh.clone(),
            hidden=None if self.hidden is None else self.hidden.clone(),
        )

    def reset(self, done: torch.Tensor) -> Memory:
        """Memory with envs where ``done`` [N] is true cleared; other envs are untouched."""
        frames, fresh, hidden = self.frames, self.fresh, self.hidden
        if fresh is not None:
            fresh = fresh | done
        if hidden is not None:
            hidden = hidden * (~done).to(hidden.dtype)[None, :, None]
        return Memory(frames=frames, fresh=fresh, hidden=hidden)


def stack_frames(frame: torch.Tensor, memory: Memory, num_frames: int) -> tuple[torch.Tensor, Memory]:
    """Append ``frame`` [N, D] to each env's history -> stacked [N, num_frames, D] (oldest first).

    An env's first frame after a reset fills its whole history, so a fresh episode
    never sees frames of the previous one.
    """
    if num_frames == 1:
        return frame[:, None, :], memory
    history = memory.frames
    fresh = memory.fresh
    if fresh is not None:  # (always: a test of any() would read back from a GPU every step)
        filled = frame[:, None, :].expand(-1, num_frames - 1, -1)
        history = torch.where(fresh[:, None, None], filled, history)
    stacked = torch.cat([history, frame[:, None, :]], dim=1)
    new = Memory(frames=stacked[:, 1:], fresh=torch.zeros_like(fresh), hidden=memory.hidden)
    return stacked, new
