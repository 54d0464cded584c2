"""The progress line: rates after warm-up, episode averages instead of nan."""

from __future__ import annotations

import io

from llp.flows.progress import ProgressBar


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rates_start_after_the_first_iteration_and_episodes_are_running_averages():
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("teacher", 11, stream=out, clock=clock)
    clock.now = 30.0  # start-up: actors, the first rollout
    bar.update(0, {"perf/env_steps_per_s": 50.0, "episode/return": float("nan"), "episode/length": float("nan")})
    first = out.getvalue().splitlines()[-1]
    assert "warming up" in first and "no episode has ended yet" in first and "eta -" in first
    assert "nan" not in first and "50 env-steps/s" not in first  # the start-up rate is not throughput
    for i in range(1, 11):  # then 2 s per iteration
        clock.now += 2.0
        metrics = {"perf/env_steps_per_s": 4000.0}
        if i == 5:
            metrics.update({"episode/return": 10.0, "episode/length": 100.0})
        if i == 6:
            metrics.update({"episode/return": 20.0, "episode/length": 200.0})
        bar.update(i, metrics)
    last = out.getvalue().splitlines()[-1]
    assert "11/11" in last and "0.50 it/s" in last and "4000 env-steps/s" in last
    assert "return    11.00  ep-len  110.0" in last  # 10, then 10% of the way to 20
    assert "eta     0s" in last


def test_trials_show_trials_per_second():
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar("evaluate", 1, stream=out, clock=clock)
    bar.trials(4, 20)
    clock.now = 4.0
    bar.trials(20, 20)
    last = out.getvalue().splitlines()[-1]
    assert "20/20 trials" in last and "4.00 trials/s" in last
