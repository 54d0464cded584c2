"""Training checkpoints: everything needed to continue a run where it stopped.

A checkpoint holds the actor and critic (their running normalisers are buffers
inside them), the optimiser, the adaptive learning rate, AMP discriminators,
the iteration counter, the learning curve so far and the RNG states (torch,
numpy, Python). Restoring it and continuing samples from the same distribution
as an uninterrupted run would have.
"""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT_VERSION = 1


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_checkpoint(
    path: str | Path, learner, iteration: int, *, amp=None, history: list | None = None, extra: dict | None = None
) -> Path:
    """Write a checkpoint atomically (a crash mid-write never leaves a truncated file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "format": FORMAT_VERSION,
        "iteration": iteration,
        "actor": learner.actor.state_dict(),
        "critic": None if learner.critic is None else learner.critic.state_dict(),
        "optimizer": learner.optimizer.state_dict(),
        "learning_rate": learner.learning_rate,
        "amp": None if amp is None else amp.state_dict(),
        "history": history or [],
        "rng": rng_state(),
        "extra": extra or {},
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(state, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def check_checkpoint(path: str | Path) -> str | None:
    """None if ``path`` reads as a checkpoint of this format, else why not (a corrupted or foreign file): checked
    where the file is, before any learner is handed it."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 (whatever a damaged file makes the unpickler raise)
        return f"{type(err).__name__}: {str(err)[:200]}"
    if not isinstance(state, dict) or state.get("format") != FORMAT_VERSION or "iteration" not in state:
        return f"not a checkpoint of format {FORMAT_VERSION}"
    return None


def load_checkpoint(path: str | Path, learner, *, amp=None, restore_rng: bool = True) -> dict:
    """Restore ``learner`` (and ``amp``) from ``path``; returns the checkpoint dict (iteration, history, extra)."""
    state = torch.load(path, map_location="cpu", weights_only=False)  # then onto the learner's device
    if state.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported checkpoint format {state.get('format')!r}")
    learner.actor.load_state_dict(state["actor"])
    if learner.critic is not None and state["critic"] is not None:
        learner.critic.load_state_dict(state["critic"])
    learner.optimizer.load_state_dict(state["optimizer"])
    learner.learning_rate = state["learning_rate"]  # (and every parameter group reads the learner's rate again)
    if amp is not None and state["amp"] is not None:
        amp.load_state_dict(state["amp"])
    if restore_rng:
        set_rng_state(state["rng"])
    return state
