"""The one training loop (``StageContext.train``): phases in order, their hooks on entry and on resume, the
metrics they add, checkpoints every N iterations and at each phase's end, steps numbered from an offset."""

from __future__ import annotations

import pytest

from llp.flows.context import StageContext
from llp.learn.phases import Phase


class Pool:
    def __init__(self, name: str):
        self.name, self.ran = name, 0

    def iteration(self) -> dict:
        self.ran += 1
        return {"episode/return": float(self.ran), "episode/length": 10.0}


@pytest.fixture
def ctx(monkeypatch):
    monkeypatch.delenv("LLP_INJECT_FAULT", raising=False)
    c = object.__new__(StageContext)  # the loop alone: no MLflow, no run folder
    c.stage, c.extra, c.pending = "test", {}, []
    c.saved = []
    c.save_checkpoint = lambda pool, it, history: (c.saved.append((pool.name, it)), c.pending.clear())
    return c


def two_phases(calls: list):
    def begin(pool, resumed):
        calls.append((pool.name, resumed))
        return Pool("B")

    return [Phase("A", 3, metrics={"phase/b": 0.0}), Phase("B", 2, begin, {"phase/b": 1.0})]


def test_phases_run_in_order_each_with_its_hook_metrics_and_checkpoints(ctx):
    calls, history = [], []
    pool = ctx.train(Pool("A"), two_phases(calls), 2, ("episode/return",), 0, history)
    assert pool.name == "B" and pool.ran == 2 and calls == [("A", False)]  # the hook switched the pool once
    assert [s for s, _ in ctx.pending] == [] and ctx.saved == [("A", 1), ("A", 2), ("B", 3), ("B", 4)]
    assert history == [{"episode/return": v} for v in (1.0, 2.0, 3.0, 1.0, 2.0)]


def test_a_resumed_stage_enters_the_phase_it_stopped_in_as_resumed(ctx):
    calls = []
    pool = ctx.train(Pool("A"), two_phases(calls), 2, (), start=4)  # the checkpoint after iteration 3
    assert calls == [("A", True)] and pool.ran == 1 and ctx.saved == [("B", 4)]
    calls.clear()
    pool = ctx.train(Pool("A"), two_phases(calls), 2, (), start=3)  # phase A's last checkpoint: B starts afresh
    assert calls == [("A", False)] and pool.ran == 2


def test_phase_metrics_join_each_iteration_and_steps_count_from_the_offset(ctx):
    logged = []
    ctx.log_iteration = lambda metrics, step: logged.append((step, metrics.get("phase/b")))
    ctx.train(Pool("A"), two_phases([]), 10, (), offset=100)
    assert logged == [(100, 0.0), (101, 0.0), (102, 0.0), (103, 1.0), (104, 1.0)]
    assert ctx.saved == [("A", 102), ("B", 104)]
    assert ctx.train(Pool("C"), 3, 10, ()).ran == 3  # an int: one phase of that many iterations
    assert logged[-3:] == [(0, None), (1, None), (2, None)]
