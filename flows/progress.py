"""A progress bar for long work: count, rate, what the metrics say, time left (one line, redrawn on terminals)."""

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

    def update(self, iteration: int, metrics: dict[str, float], unit: str = "") -> None:
        done = iteration + 1
        frac = done / max(self.total, 1)
        filled = int(self.width * frac)
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.perf_counter() - self.t0
        rate = (done - self.start) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else 0.0
        parts = [f"{self.label} [{bar}] {done}/{self.total}{unit}"]
        if "perf/env_steps_per_s" in metrics:
            parts.append(f"{metrics['perf/env_steps_per_s']:7.0f} env-steps/s")
        for key, name, fmt in (("episode/return", "return", "8.2f"), ("episode/length", "ep-len", "6.1f")):
            value = metrics.get(key)
            if value is not None and value == value:
                parts.append(f"{name} {value:{fmt}}")
        parts.append(f"eta {eta:5.0f}s")
        line = "  ".join(parts)
        now = time.perf_counter()
        if self.tty:
            self.stream.write("\r" + line)
            if done >= self.total:
                self.stream.write("\n")
        elif done >= self.total or now - self._last_print > 10.0 or done == self.start + 1:
            self.stream.write(line + "\n")
            self._last_print = now
        self.stream.flush()

    def trials(self, done: int, total: int) -> None:
        """Progress callback for evaluations: ``done`` of ``total`` trials finished."""
        self.total = total
        self.update(done - 1, {}, unit=" trials")
