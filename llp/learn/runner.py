"""The on-policy training loop shared by every learning rule: collect, (style), update, report."""

from __future__ import annotations

import time
from collections.abc import Callable

from llp.learn.amp import AMP
from llp.learn.ppo import PPO
from llp.learn.rollout import RolloutCollector

Callback = Callable[[int, dict[str, float]], None]


def train_iteration(collector: RolloutCollector, learner: PPO, amp: AMP | None = None) -> dict[str, float]:
    """One iteration in one process (co-located mode): returns the iteration's metrics."""
    t0 = time.perf_counter()
    rollout = collector.collect()
    t1 = time.perf_counter()
    heads = rollout.rewards.shape[-1]
    extra = amp.extra_rewards(rollout, heads) if amp is not None else None
    metrics = learner.update(rollout, extra_rewards=extra)
    if amp is not None:
        metrics.update(amp.update(rollout))
        metrics["amp/style_reward"] = float(extra[..., amp.cfg.reward_group].mean() / (amp.cfg.style_coef * amp.dt))
    t2 = time.perf_counter()
    metrics.update(collector.pop_metrics())
    steps = rollout.num_steps * rollout.num_envs
    metrics["perf/collect_s"] = t1 - t0
    metrics["perf/update_s"] = t2 - t1
    metrics["perf/env_steps_per_s"] = steps / (t2 - t0)
    metrics["perf/env_steps"] = float(steps)
    return metrics


def train(
    collector: RolloutCollector,
    learner: PPO,
    iterations: int,
    *,
    amp: AMP | None = None,
    start_iteration: int = 0,
    callback: Callback | None = None,
) -> list[dict[str, float]]:
    """Run iterations ``start_iteration .. iterations-1``; returns the metrics of each."""
    history = []
    for it in range(start_iteration, iterations):
        metrics = train_iteration(collector, learner, amp)
        metrics["iteration"] = float(it)
        history.append(metrics)
        if callback is not None:
            callback(it, metrics)
    return history
