"""The LLP stages that exist today, in pipeline order. A stage that does not train yet is not listed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llp.stages import evaluate, locomotion_teacher


@dataclass(frozen=True)
class StageSpec:
    name: str
    config: type
    run: Callable  # run(ctx, cfg, inputs: {name: models:/ URI}) -> {output name: models:/ URI or value}
    inputs: Callable  # cfg -> {input name: upstream stage}; the input is that stage's output of the same name
    outputs: dict[str, str]  # output name -> registered model name ("" for outputs that are not models)
    description: str


STAGES: dict[str, StageSpec] = {
    "locomotion_teacher": StageSpec(
        name="locomotion_teacher",
        config=locomotion_teacher.LocomotionTeacherConfig,
        run=locomotion_teacher.run,
        inputs=lambda cfg: {},
        outputs={"policy": "llp-locomotion-teacher"},
        description="LLP stage 1: perceptive locomotion teacher (PPO; height scan, proprioception, velocity "
        "command; privileged critic).",
    ),
    "evaluate": StageSpec(
        name="evaluate",
        config=evaluate.EvaluateConfig,
        run=evaluate.run,
        inputs=lambda cfg: {"policy": cfg.policy},
        outputs={},
        description="LLP stage 7 (for the stages that exist): roll out a registered policy on every terrain type "
        "and level; fall rate, velocity tracking and terrain tables, as metrics and pictures.",
    ),
}
