"""A run stopped before its first stage (a SIGTERM while its servers start, or a failure while its inputs are
looked up) never stays 'running' in its ledger: `llp status` and `llp resume` would believe a driver still
works on it."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("raised, state", [(SystemExit(143), "interrupted"), (RuntimeError("no server"), "failed")])
def test_a_run_stopped_before_its_first_stage_is_not_left_running(tmp_path, monkeypatch, raised, state):
    from llp.flows import pipeline
    from llp.stages.registry import load_pipeline

    def stopped(*args, **kwargs):  # what a SIGTERM (llp.infra.processes.exit_on_sigterm) or a failure raises
        raise raised

    monkeypatch.setattr(pipeline, "_run_started", stopped)
    cfg = load_pipeline("smoke", [f"run_root={tmp_path}"])
    with pytest.raises(type(raised)):
        pipeline.run_pipeline(cfg, "early")
    book = json.loads((tmp_path / "early" / "ledger.json").read_text())
    assert book["state"] == state and book["ended"] is not None and repr(raised) == book["error"]
