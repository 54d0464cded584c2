"""Where a tracking env's training episodes start along the motion: anywhere with equal chance (reference-state
initialisation), or more often a little before where episodes have been falling.

The adaptive rule is BeyondMimic's (Liao et al. 2025, section III-F), as mjlab's tracking command ships it
(``sampling_mode="adaptive"``):

- the motion is cut into bins of ``bin_s`` seconds;
- every policy step, the number of episodes that fell in each bin is folded into a moving average (rate
  ``alpha``);
- a bin's weight is its own average plus its next ``kernel - 1`` bins', each ``decay`` times the one before
  (a start a little before where others fell);
- the weights are normalised and mixed with a uniform share, so no part of the motion goes unpractised.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llp.config.schema import check, field


@dataclass(kw_only=True)
class AdaptiveStarts:
    """Adaptive start sampling; ``bin_s`` 0 keeps uniform starts."""

    bin_s: float = field(default=0.0, doc="Bin length along the motion, s; 0: uniform starts (mjlab's bins: 1 s).")
    alpha: float = field(default=0.001, doc="Moving-average rate of each bin's falls, per policy step (mjlab: 0.001).")
    kernel: int = field(default=1, doc="Bins a fall weighs on: its own and the kernel - 1 before it (mjlab: 1).")
    decay: float = field(default=0.8, doc="Kernel weight per bin further from the fall (mjlab's lambda: 0.8).")
    uniform: float = field(default=0.1, doc="Share of the start probability spread evenly (mjlab: 0.1).")

    def validate(self, path: str) -> None:
        p = f"{path}." if path else ""
        check(self.bin_s >= 0, f"{p}bin_s", "must be >= 0 (0: uniform starts)")
        check(0 < self.alpha <= 1, f"{p}alpha", "must be in (0, 1]")
        check(self.kernel >= 1, f"{p}kernel", "must be >= 1")
        check(0 < self.decay <= 1, f"{p}decay", "must be in (0, 1]")
        check(0 <= self.uniform <= 1, f"{p}uniform", "must be in [0, 1]")


class StartSampler:
    """Start frames for each lane's motion; ``record`` the falls of every step when adaptive."""

    def __init__(self, cfg: AdaptiveStarts, motion_frames: np.ndarray, dt: float):
        self.cfg = cfg
        self.adaptive = cfg.bin_s > 0
        self.frames = np.asarray(motion_frames, dtype=np.int64)  # [L] frames of each lane's motion
        span = self.frames * dt / (cfg.bin_s if self.adaptive else 1.0)
        self.bins = np.maximum(1, np.ceil(span - 1e-9)).astype(np.int64)  # [L] bins of each lane's motion
        self.falls = np.zeros((len(self.frames), int(self.bins.max())))  # [L, B] each bin's average falls a step

    def _bin(self, lane: np.ndarray, frame: np.ndarray) -> np.ndarray:
        return np.minimum(frame * self.bins[lane] // np.maximum(self.frames[lane], 1), self.bins[lane] - 1)

    def record(self, lane: np.ndarray, frame: np.ndarray, fell: np.ndarray) -> None:
        """Fold this step's falls (envs' lanes and frames, and whether each fell) into the bins' averages."""
        if not self.adaptive:
            return
        counts = np.zeros_like(self.falls)
        np.add.at(counts, (lane[fell], self._bin(lane[fell], frame[fell])), 1.0)
        self.falls = self.cfg.alpha * counts + (1 - self.cfg.alpha) * self.falls

    def probabilities(self, lane: int) -> np.ndarray:
        """The chance of starting in each bin of ``lane``'s motion."""
        b, cfg = int(self.bins[lane]), self.cfg
        falls = self.falls[lane, :b]
        ahead = np.concatenate([falls, np.full(cfg.kernel - 1, falls[-1])])  # the last bin repeats past the end
        weights = sum(cfg.decay**j * ahead[j : j + b] for j in range(cfg.kernel))
        if weights.sum() <= 0:
            return np.full(b, 1.0 / b)
        return (1 - cfg.uniform) * weights / weights.sum() + cfg.uniform / b

    def draw(self, lane: np.ndarray, last: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A start frame in [0, last) for each env (its lane, and the last frame it may start at)."""
        if not self.adaptive:
            return np.floor(rng.uniform(size=len(lane)) * np.maximum(last, 1)).astype(np.int64)
        start = np.zeros(len(lane), dtype=np.int64)
        for ln in np.unique(lane):
            envs = np.flatnonzero(lane == ln)
            b = int(self.bins[ln])
            picked = rng.choice(b, size=len(envs), p=self.probabilities(int(ln)))
            where = (picked + rng.uniform(size=len(envs))) / b * np.maximum(last[envs], 1)
            start[envs] = np.floor(where).astype(np.int64)
        return start
