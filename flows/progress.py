"""A progress bar for long stages: iteration, env-steps/s, mean reward (one line, redrawn on terminals)."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    def __init__(self, label: str, total: int, start: int = 0, stream=None, width: int = 24):
        self.label, self.total, self.start = label, total, start
        self.stream = stream or sys.stderr
        self.width = width
        self.t0 = time.perf_counter()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_print = 0.0

    def update(self, iteration: int, metrics: dict[str, float]) -> None:
        done = iteration + 1
        frac = done / max(self.total, 1)
        filled = int(self.width * frac)
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.perf_counter() - self.t0
        rate = (done - self.start) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else 0.0
        sps = metrics.get("perf/env_steps_per_s", 0.0)
        ret = metrics.get("episode/return", float("nan"))
        length = metrics.get("episode/length", float("nan"))
        line = (
            f"{self.label} [{bar}] {done}/{self.total}  {sps:7.0f} env-steps/s  "
            f"return {ret:8.2f}  ep-len {length:6.1f}  eta {eta:5.0f}s"
        )
        now = time.perf_counter()
        if self.tty:
            self.stream.write("\r" + line)
            if done >= self.total:
                self.stream.write("\n")
        elif done >= self.total or now - self._last_print > 10.0 or done == self.start + 1:
            self.stream.write(line + "\n")
            self._last_print = now
        self.stream.flush()
