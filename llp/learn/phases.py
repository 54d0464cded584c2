"""A stage's training, as phases: each with its budget and what changes when it begins.

One loop runs every stage (``StageContext.train``, the runner's job in rsl_rl); a stage only lists its phases:
the skill expert's DAgger then its generalisation, the depth student's distillation then its fine-tuning, the
transition's critic warm-up then PPO on the course, a reference round's tracker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Phase:
    """One phase of a stage's training loop. The loop is the context's (``StageContext.train``); a stage only
    says what each phase changes: ``begin(pool, resumed)`` runs when the phase starts, or when a resumed stage
    goes on inside it (``resumed`` true), and returns the pool to go on with (a new env means a new pool) or
    None to keep it; ``metrics`` join every iteration's metrics (``phase/finetune: 1.0``)."""

    name: str
    iterations: int
    begin: Callable[[Any, bool], Any] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
