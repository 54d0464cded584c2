"""A progress bar for long work: count, rates, what the metrics say, time left (one line, redrawn on terminals).

Rates and the time left are measured from the end of the first update on, so start-up (actors, compilation,
the first rollout) does not skew them. Return and episode length are running averages over finished episodes;
until one has finished, the line says so instead of showing nan.
"""

from __future__ import annotations

import math
import sys
import time


class ProgressBar:
    def __init__(
        self, label: str, total: int, start: int = 0, stream=None, width: int = 24, smoothing: float = 0.1, clock=None
    ):
        self.label, self.total, self.start = label, total, start
        self.clock = clock or time.perf_counter
        self.stream = stream or sys.stderr
        self.width = width
        self.smoothing = smoothing
        self.t0 = self.clock()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._last_print = 0.0
        self._warm: tuple[float, int] | None = None  # (time, count) at the end of the first update
        self._env_rate: float | None = None
        self._episode: dict[str, float] = {}

    def rates(self, done: int) -> tuple[float | None, float | None]:
        """(items per second, seconds left) since warm-up; None before there is a measurement."""
        now = self.clock()
        if self._warm is None:
            self._warm = (now, done)
            return None, None
        seconds, count = now - self._warm[0], done - self._warm[1]
        if seconds <= 0 or count <= 0:
            return None, None
        rate = count / seconds
        return rate, (self.total - done) / rate

    def _average(self, key: str, value: float | None) -> float | None:
        if value is not None and math.isfinite(value):
            old = self._episode.get(key)
            self._episode[key] = value if old is None else old + self.smoothing * (value - old)
        return self._episode.get(key)

    def update(self, iteration: int, metrics: dict[str, float], unit: str = "") -> None:
        done = iteration + 1
        frac = done / max(self.total, 1)
        filled = int(self.width * frac)
        bar = "#" * filled + "-" * (self.width - filled)
        rate, eta = self.rates(done)
        parts = [f"{self.label} [{bar}] {done}/{self.total}{unit}"]
        steps = metrics.get("perf/env_steps_per_s")
        if steps is not None and rate is not None:  # the first iteration's rate is start-up, not throughput
            self._env_rate = steps if self._env_rate is None else self._env_rate + 0.2 * (steps - self._env_rate)
        if rate is None:
            parts.append("warming up")
        else:
            parts.append(f"{rate:6.2f} {'it' if not unit else unit.strip()}/s")
            if self._env_rate is not None:
                parts.append(f"{self._env_rate:7.0f} env-steps/s")
        ret = self._average("return", metrics.get("episode/return"))
        length = self._average("length", metrics.get("episode/length"))
        if ret is not None:
            parts.append(f"return {ret:8.2f}  ep-len {length:6.1f}")
        elif "episode/return" in metrics or "perf/env_steps_per_s" in metrics:
            parts.append("no episode has ended yet")
        parts.append(f"eta {eta:5.0f}s" if eta is not None else "eta -")
        line = "  ".join(parts)
        now = self.clock()
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")
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
