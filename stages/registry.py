"""The LLP stages that exist today, in pipeline order. A stage that does not train yet is not listed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llp.config.pipeline import PipelineConfig
from llp.config.schema import build, check
from llp.stages import (
    depth_student,
    evaluate,
    evaluate_final,
    export,
    locomotion_teacher,
    merge,
    reference_augmentation,
    skill_expert,
    transition,
)


@dataclass(frozen=True)
class StageSpec:
    name: str
    config: type
    run: Callable  # run(ctx, cfg, inputs: {name: models:/ URI}) -> {output name: models:/ URI or value}
    inputs: Callable  # cfg -> {input name: "stage" (its output of the same name) or "stage.output"}
    outputs: dict[str, str]  # output name -> registered model name ("" for outputs that are not models)
    description: str
    env_groups: bool = False  # trains env groups, each on simulator actors of its own (the decoupled layout)


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
    "reference_augmentation": StageSpec(
        name="reference_augmentation",
        config=reference_augmentation.ReferenceAugmentationConfig,
        run=reference_augmentation.run,
        inputs=lambda cfg: {},
        outputs={"library": "llp-reference-library", "tracker": "llp-reference-tracker"},
        description="LLP stage 2: reference augmentation (a motion seed and its box raised round by round; each "
        "round's tracking policy must carry the motion over the taller box in physics; library with provenance).",
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
    "skill_climb_step": StageSpec(
        name="skill_climb_step",
        config=skill_expert.SkillExpertConfig,
        run=skill_expert.run,
        inputs=lambda cfg: {
            "library": "reference_augmentation",
            "tracker": "reference_augmentation",
            **({"teacher": f"{cfg.teacher}.policy"} if cfg.teacher else {}),
        },
        outputs={"policy": "llp-skill-climb-step"},
        description="LLP stage 3: the climb-and-step expert (height scan, proprioception, command). Phase A: online "
        "DAgger from the tracking expert + lambda PPO; phase B: PPO alone over every accepted height, from a "
        "standing start. Evaluated beside the expert and its phase-A self on the same trials, from two starts.",
    ),
    "merge": StageSpec(
        name="merge",
        config=merge.MergeConfig,
        run=merge.run,
        inputs=lambda cfg: {
            "teacher": f"{cfg.teacher}.policy",
            "library": "reference_augmentation",
            **{stage: f"{stage}.policy" for stage in cfg.skills.values()},
        },
        outputs={"policy": "llp-merged-student"},
        description="LLP stage 4: the multi-expert merge (one height-scan student, every joint; an env group per "
        "behaviour, each labelled online by its expert - the locomotion teacher on terrain, each skill expert on "
        "its course; DAgger alone; no group label in the actor). Evaluated per group beside the experts.",
        env_groups=True,
    ),
    "transition": StageSpec(
        name="transition",
        config=transition.TransitionConfig,
        run=transition.run,
        inputs=lambda cfg: {
            "student": f"{cfg.student}.policy",
            "teacher": f"{cfg.teacher}.policy",
            "library": "reference_augmentation",
            **{stage: f"{stage}.policy" for stage in cfg.skills.values()},
        },
        outputs={"policy": "llp-transition-policy"},
        description="LLP stage 5: transition training (from the merged student: a course group - approach, "
        "obstacle, after it - learns by PPO with a phase-conditional AMP prior, walking before the trigger and the "
        "skill's motions over it; the expert groups keep learning by DAgger; the critic reads the group, the actor "
        "does not). Evaluated on the course, the terrain and the skill's course, before and after.",
        env_groups=True,
    ),
    "depth_student": StageSpec(
        name="depth_student",
        config=depth_student.DepthStudentConfig,
        run=depth_student.run,
        inputs=lambda cfg: {"policy": cfg.teacher},
        outputs={"policy": "llp-depth-student", "distilled": "llp-depth-student-distilled"},
        description="LLP stage 6: depth student (MLP-GRU-MLP over depth, proprioception and command; online "
        "DAgger from the height-scan policy with scan reconstruction, through the camera model; then PPO "
        "fine-tuning; evaluated beside its teacher on the same trials).",
    ),
    "export": StageSpec(
        name="export",
        config=export.ExportConfig,
        run=export.run,
        inputs=lambda cfg: {"policy": cfg.policy},
        outputs={"deployable": "llp-deployable-policy"},
        description="The deployable policy: ONNX and TorchScript with the GRU state as input and output, checked "
        "against the registered policy on recorded observations, timed on one CPU thread, with its metadata.",
    ),
    "evaluate_final": StageSpec(
        name="evaluate_final",
        config=evaluate_final.FinalEvaluationConfig,
        run=evaluate_final.run,
        inputs=lambda cfg: cfg.inputs(),
        outputs={},
        description="LLP stage 7 on the final policies: the depth student's teacher (the transition policy), the "
        "depth student and the deployable files (ONNX, closed loop) beside standing still, on the same trials: "
        "terrain, the course from its approach and the climb from the skill's start at every height the library "
        "reached; the deployable checked against the student.",
    ),
}


def input_source(input_name: str, upstream: str) -> tuple[str, str]:
    """(stage, output) an input comes from: ``"stage.output"``, or ``"stage"`` for its output named as the input."""
    stage, _, output = upstream.partition(".")
    return stage, output or input_name


def stage_config(cfg: PipelineConfig, name: str):
    """The typed config of stage ``name`` of the pipeline ``cfg``."""
    return build(STAGES[name].config, cfg.stages[name], f"stages.{name}")


def check_pipeline(cfg: PipelineConfig) -> PipelineConfig:
    """Every stage exists, its config is valid, its inputs come from stages that run before it, and the physics
    backend can run here."""
    from llp.sim.backend import check_backend

    check_backend(cfg.sim.backend, cfg.sim.device, "sim")
    order = list(cfg.stages)
    for name in order:
        check(name in STAGES, f"stages.{name}", f"unknown stage; allowed values: {', '.join(STAGES)}")
        for input_name, source in STAGES[name].inputs(stage_config(cfg, name)).items():
            upstream, output = input_source(input_name, source)
            check(
                upstream in cfg.stages,
                f"stages.{name}.{input_name}",
                f"refers to stage {upstream!r}, which is not in this pipeline ({', '.join(order)})",
            )
            check(
                order.index(upstream) < order.index(name),
                f"stages.{name}",
                f"input stage {upstream!r} must come before it",
            )
            check(
                output in STAGES[upstream].outputs,
                f"stages.{name}.{input_name}",
                f"stage {upstream!r} has no output {output!r} (it has {', '.join(STAGES[upstream].outputs) or 'none'})",
            )
    return cfg


def check_layout(cfg: PipelineConfig, selected: list[str]) -> None:
    """The selected stages can run in the configured actor layout (before any work: the co-located layout would
    otherwise fail at the first stage with env groups, hours into a run)."""
    grouped = [name for name in selected if STAGES[name].env_groups]
    check(
        cfg.resources.mode == "decoupled" or not grouped,
        "resources.mode",
        f"colocated, but stages {grouped} train env groups, each on simulator actors of its own (the decoupled "
        "layout): run them with resources.mode decoupled and sim.device cpu, or stop before them (--until-stage)",
    )


def load_pipeline(profile: str = "local", sets: list[str] | None = None) -> PipelineConfig:
    """The pipeline of ``profile`` with ``--set`` overrides, every stage's config validated (no side effects)."""
    from llp.config.pipeline import load_pipeline as load_generic

    return check_pipeline(load_generic(profile, sets))
