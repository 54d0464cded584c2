"""What the deployed depth camera does to the ray-cast images: noise, scale, dropouts, its own frame rate and a
processing latency, so that the policy often reads a stale frame (the paper: 27-33 Hz frames, 30-60 ms late,
a 50 Hz policy).

Per env and episode the camera draws its frame rate, a start phase and a depth scale. A frame is captured at
the first policy tick at or after its capture time (the simulator's state exists only at ticks), corrupted,
and becomes readable ``latency`` later; at each tick the policy reads the newest frame that has arrived, so
frames repeat. Block dropouts (rectangles read as far) start at random and persist for several frames.
``perfect: true`` turns all of it off: every tick reads an exact frame of that tick (for diagnosis).
Evaluation stress settings add delay, hold each delivered frame for extra ticks, or cut the feed for a
contiguous window of ticks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llp.config.schema import check, field


@dataclass(kw_only=True)
class CameraModelConfig:
    perfect: bool = field(default=True, doc="An exact frame at every tick (no noise, delay or repeats).")
    noise_base: float = field(default=0.005, doc="Depth noise std at 0 m, metres (std = base + slope x depth).")
    noise_slope: float = field(default=0.02, doc="Growth of the noise std per metre of depth.")
    scale: float = field(default=0.05, doc="Per-episode depth scale drawn in [1 - scale, 1 + scale].")
    dropout_start: float = field(default=0.05, doc="Chance per captured frame that a new dropout block starts.")
    dropout_size: tuple[float, float] = field(default=(0.1, 0.3), doc="Block side as a share of the image side.")
    dropout_frames: tuple[int, int] = field(default=(2, 6), doc="Frames a dropout block persists (inclusive).")
    frame_rate: tuple[float, float] = field(default=(27.0, 33.0), doc="Camera frame rate, Hz, drawn per episode.")
    latency_s: tuple[float, float] = field(default=(0.03, 0.06), doc="Processing latency, s, drawn per frame.")
    extra_delay_s: float = field(default=0.0, doc="Stress: added to every frame's latency.")
    hold_ticks: int = field(default=0, doc="Stress: each delivered frame is shown for this many extra ticks.")
    missing_ticks: int = field(default=0, doc="Stress: one window per episode of this many ticks with no frame.")

    def validate(self, path: str) -> None:
        check(self.noise_base >= 0 and self.noise_slope >= 0, f"{path}.noise_base", "noise must be >= 0")
        check(0 <= self.scale < 1, f"{path}.scale", "must be in [0, 1)")
        check(0 <= self.dropout_start <= 1, f"{path}.dropout_start", "must be in [0, 1]")
        check(0 < self.dropout_size[0] <= self.dropout_size[1] <= 1, f"{path}.dropout_size", "needs 0 < lo <= hi <= 1")
        check(1 <= self.dropout_frames[0] <= self.dropout_frames[1], f"{path}.dropout_frames", "needs 1 <= lo <= hi")
        check(0 < self.frame_rate[0] <= self.frame_rate[1], f"{path}.frame_rate", "needs 0 < lo <= hi")
        check(0 <= self.latency_s[0] <= self.latency_s[1], f"{path}.latency_s", "needs 0 <= lo <= hi")
        for name in ("extra_delay_s", "hold_ticks", "missing_ticks"):
            check(getattr(self, name) >= 0, f"{path}.{name}", "must be >= 0")


class CameraModel:
    """The camera of ``num_envs`` envs over images of ``shape`` (H, W), read at policy ticks of ``dt`` seconds."""

    def __init__(self, cfg: CameraModelConfig, num_envs: int, shape: tuple[int, int], dt: float, far: float,
                 seed: int = 0):  # fmt: skip
        self.cfg, self.n, self.shape, self.dt, self.far = cfg, num_envs, shape, dt, far
        self.rng = np.random.default_rng(seed)
        n = num_envs
        self.image = np.full((n, *shape), far)  # what the policy reads now
        self.fresh = np.zeros(n, dtype=bool)  # a new frame arrived at this tick
        self.age = np.zeros(n)  # seconds since the frame being read was captured
        self.tick = np.zeros(n, dtype=np.int64)
        self.depth_scale = np.ones(n)
        self.period = np.zeros(n)
        self.next_capture = np.zeros(n)
        self.captured_at = np.zeros(n)
        self.pending: list[list[tuple[float, float, np.ndarray]]] = [[] for _ in range(n)]  # (arrives, taken, image)
        self.blocks: list[list[list[int]]] = [[] for _ in range(n)]  # [row0, row1, col0, col1, frames left]
        self.hold_until = np.zeros(n, dtype=np.int64)
        self.missing = np.zeros((n, 2), dtype=np.int64)  # [first, end) ticks without frames
        self.frames_captured = np.zeros(n, dtype=np.int64)

    def reset(self, ids: np.ndarray, render: Callable[[np.ndarray], np.ndarray], episode_ticks: int = 1000) -> None:
        """New episodes for envs ``ids``: draw the rate, phase and scale; the first frame is read at once."""
        cfg, rng, k = self.cfg, self.rng, len(ids)
        if k == 0:
            return
        self.tick[ids] = 0
        self.period[ids] = 1.0 / rng.uniform(*cfg.frame_rate, size=k)
        self.next_capture[ids] = rng.uniform(0, 1, size=k) * self.period[ids]
        self.depth_scale[ids] = rng.uniform(1 - cfg.scale, 1 + cfg.scale, size=k)
        self.hold_until[ids] = 0
        start = rng.integers(1, max(episode_ticks - cfg.missing_ticks, 2), size=k)
        self.missing[ids] = np.stack([start, start + cfg.missing_ticks], axis=1) if cfg.missing_ticks else 0
        for env in ids:
            self.pending[env] = []
            self.blocks[env] = []
        first = render(ids)
        self.image[ids] = first if cfg.perfect else self._corrupt(ids, first)
        self.fresh[ids] = True
        self.age[ids] = 0.0
        self.captured_at[ids] = 0.0

    def step(self, render: Callable[[np.ndarray], np.ndarray]) -> None:
        """One policy tick for every env: capture where a frame is due (``render(ids)`` gives [k, H, W] metres
        at this tick's state), deliver what has arrived."""
        cfg = self.cfg
        self.tick += 1
        now = self.tick * self.dt  # [n] seconds into each env's episode
        if cfg.perfect:
            self.image[:] = render(np.arange(self.n))
            self.fresh[:] = True
            self.age[:] = 0.0
            return
        due = np.nonzero(self.next_capture <= now + 1e-9)[0]
        if len(due):
            frames = self._corrupt(due, render(due))
            latency = self.rng.uniform(*cfg.latency_s, size=len(due)) + cfg.extra_delay_s
            for j, env in enumerate(due):
                self.pending[env].append((now[env] + latency[j], now[env], frames[j]))
            while True:  # a rate above the tick rate captures once per tick
                late = self.next_capture <= now + 1e-9
                if not late.any():
                    break
                self.next_capture[late] += self.period[late]
        self.fresh[:] = False
        for env in range(self.n):
            if not self.pending[env]:
                continue
            first, end = self.missing[env]
            if first <= self.tick[env] < end or self.tick[env] < self.hold_until[env]:
                continue
            arrived = [p for p in self.pending[env] if p[0] <= now[env] + 1e-9]
            if not arrived:
                continue
            newest = arrived[-1]
            self.pending[env] = [p for p in self.pending[env] if p[0] > now[env] + 1e-9]
            self.image[env] = newest[2]
            self.captured_at[env] = newest[1]
            self.fresh[env] = True
            self.hold_until[env] = self.tick[env] + 1 + cfg.hold_ticks
        self.age[:] = now - self.captured_at

    def _corrupt(self, ids: np.ndarray, frames: np.ndarray) -> np.ndarray:
        """Scale, noise (std base + slope x depth) and dropout blocks (read as far) on frames [k, H, W]."""
        cfg, rng = self.cfg, self.rng
        out = frames * self.depth_scale[ids, None, None]
        out = out + rng.standard_normal(out.shape) * (cfg.noise_base + cfg.noise_slope * out)
        out = np.clip(out, 0.0, self.far)
        H, W = self.shape
        for j, env in enumerate(ids):
            self.frames_captured[env] += 1
            if rng.uniform() < cfg.dropout_start:
                h = max(1, int(round(H * rng.uniform(*cfg.dropout_size))))
                w = max(1, int(round(W * rng.uniform(*cfg.dropout_size))))
                r0, c0 = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
                frames_left = int(rng.integers(cfg.dropout_frames[0], cfg.dropout_frames[1] + 1))
                self.blocks[env].append([r0, r0 + h, c0, c0 + w, frames_left])
            for block in self.blocks[env]:
                out[j, block[0] : block[1], block[2] : block[3]] = self.far
                block[4] -= 1
            self.blocks[env] = [b for b in self.blocks[env] if b[4] > 0]
        return out
