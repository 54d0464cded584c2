"""The kinds of LLP stage that exist today, and how a pipeline's stages map onto them. A stage that does not
train yet is not listed.

A pipeline stage is ``stages.<name>`` in the config; its kind is its ``kind:`` entry, or its name. A skill is
data: two stages (one of kind ``reference_augmentation`` growing its library, one of kind ``skill_expert``) and
its line under the pipeline's ``skills:``, which the merge and the transition take (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from llp.config.pipeline import PipelineConfig
from llp.config.schema import build, check
from llp.skills.library import CourseOfSkill
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
    outputs: dict[str, str]  # output name -> registered model name; "{stage}": the stage's name, with hyphens
    description: str
    env_groups: bool = False  # trains env groups, each on simulator actors of its own (the decoupled layout)
    backends: tuple[str, ...] = ("mujoco", "warp")  # the sim.backend values its simulators run on


STAGES: dict[str, StageSpec] = {
    "locomotion_teacher": StageSpec(
        name="locomotion_teacher",
        config=locomotion_teacher.LocomotionTeacherConfig,
        run=locomotion_teacher.run,
        inputs=lambda cfg: {},
        outputs={"policy": "llp-locomotion-teacher"},
        description="LLP stage 1: perceptive locomotion teacher (PPO; height scan, proprioception, velocity "
        "command; privileged critic).",
        backends=("mujoco", "warp", "isaaclab"),
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
    "skill_expert": StageSpec(
        name="skill_expert",
        config=skill_expert.SkillExpertConfig,
        run=skill_expert.run,
        inputs=lambda cfg: {
            "library": f"{cfg.library}.library",
            "tracker": f"{cfg.library}.tracker",
            **({"teacher": f"{cfg.teacher}.policy"} if cfg.teacher else {}),
        },
        outputs={"policy": "llp-{stage}"},
        description="LLP stage 3: a skill expert (height scan, proprioception, command), e.g. climb-and-step. Phase "
        "A: online DAgger from the skill's tracking expert + lambda PPO; phase B: PPO alone over every accepted "
        "height, from a standing start. Evaluated beside the expert and its phase-A self on the same trials.",
    ),
    "merge": StageSpec(
        name="merge",
        config=merge.MergeConfig,
        run=merge.run,
        inputs=lambda cfg: {"teacher": f"{cfg.teacher}.policy", **cfg.skill_inputs()},
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
            **cfg.skill_inputs(),
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
        inputs=lambda cfg: cfg.inputs(),
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


# a stage named as a kind before kinds existed
LEGACY_KINDS = {"skill_climb_step": "skill_expert"}
# the stages that train on every declared skill: they get the pipeline's `skills:` unless they name their own
TAKES_SKILLS = ("merge", "transition")


def stage_kind(cfg: PipelineConfig, name: str) -> str:
    """The kind of pipeline stage ``name``: its ``kind:`` entry, or its name."""
    entry = cfg.stages.get(name) or {}
    return str(entry.get("kind", LEGACY_KINDS.get(name, name)))


def stage_spec(cfg: PipelineConfig, name: str) -> StageSpec:
    """The registry entry of pipeline stage ``name``, named after it, with its models' names."""
    kind = stage_kind(cfg, name)
    spec = STAGES[kind]
    return replace(spec, name=name, outputs={k: model_name(name, kind, k, v) for k, v in spec.outputs.items()})


def model_name(stage: str, kind: str, output: str, template: str) -> str:
    """The registered model of a stage's output: the kind's name for it ("{stage}" filled in); a second stage of a
    kind whose names are fixed (e.g. a second reference library) gets ``llp-<stage>-<output>``."""
    hyphens = stage.replace("_", "-")
    if "{stage}" in template:
        return template.format(stage=hyphens)
    return template if stage == kind or LEGACY_KINDS.get(stage) == kind else f"llp-{hyphens}-{output}"


def stage_config(cfg: PipelineConfig, name: str):
    """The typed config of stage ``name`` of the pipeline ``cfg``."""
    entry = {k: v for k, v in cfg.stages[name].items() if k != "kind"}
    return build(STAGES[stage_kind(cfg, name)].config, entry, f"stages.{name}")


def expand_skills(cfg: PipelineConfig) -> PipelineConfig:
    """The merge and the transition take every skill of the pipeline's ``skills:`` (its expert's stage and the
    stage whose library holds its references), unless their own config names skills; a stage with a course (the
    depth student, the final evaluation) takes the first skill's obstacle at its library's heights. Then the
    stages are put in an order where every input comes from a stage before it (the config's order, each stage
    moved only behind what it reads): a skill's stages may be declared anywhere, e.g. at the end of a profile."""
    for name, entry in cfg.stages.items():
        if stage_kind(cfg, name) in TAKES_SKILLS and cfg.skills and "skills" not in entry:
            entry["skills"] = {skill: d["expert"] for skill, d in cfg.skills.items()}
            entry.setdefault("libraries", {skill: d["references"] for skill, d in cfg.skills.items()})
        kind = stage_kind(cfg, name)
        if kind in STAGES and issubclass(STAGES[kind].config, CourseOfSkill) and cfg.skills and "skill" not in entry:
            first = next(iter(cfg.skills))  # a course's obstacle: the first skill's, at its library's heights
            entry["skill"] = first
            entry.setdefault("library", cfg.skills[first]["references"])
    cfg.stages = {name: cfg.stages[name] for name in _dependency_order(cfg)}
    return cfg


def _dependency_order(cfg: PipelineConfig) -> list[str]:
    """The stages in config order, each one moved behind the stages it reads (a stable topological order); a
    cycle is a ConfigError naming its stages."""
    declared = list(cfg.stages)
    reads = {}
    for name in declared:
        kind = stage_kind(cfg, name)
        check(kind in STAGES, f"stages.{name}",
              f"unknown stage kind {kind!r}; allowed values: {', '.join(STAGES)} (a stage named otherwise says "
              "which it is with `kind:`)")  # fmt: skip
        sources = STAGES[kind].inputs(stage_config(cfg, name)).values()
        reads[name] = [input_source("", src)[0] for src in sources if input_source("", src)[0] in cfg.stages]
    order: list[str] = []
    while len(order) < len(declared):
        ready = [n for n in declared if n not in order and all(u in order for u in reads[n] if u != n)]
        check(bool(ready), "stages", "its stages read each other in a circle: "
              + ", ".join(n for n in declared if n not in order))  # fmt: skip
        order.append(ready[0])
    return order


def check_pipeline(cfg: PipelineConfig) -> PipelineConfig:
    """Every stage exists, its config is valid, its inputs come from stages of this pipeline (which run before
    it), no two stages register one model, and the physics backend can run here."""
    from llp.sim.backend import check_backend

    check_backend(cfg.sim.backend, cfg.sim.device, "sim")
    cfg.check_gpu_layout()
    for skill, decl in cfg.skills.items():
        for role, stage in decl.items():
            check(stage in cfg.stages, f"skills.{skill}.{role}",
                  f"refers to stage {stage!r}, which is not in this pipeline ({', '.join(cfg.stages)})")  # fmt: skip
    expand_skills(cfg)
    order = list(cfg.stages)
    registered: dict[str, str] = {}
    for name in order:
        spec = stage_spec(cfg, name)
        for input_name, source in spec.inputs(stage_config(cfg, name)).items():
            upstream, output = input_source(input_name, source)
            check(
                upstream in cfg.stages,
                f"stages.{name}.{input_name}",
                f"refers to stage {upstream!r}, which is not in this pipeline ({', '.join(order)})",
            )
            outputs = stage_spec(cfg, upstream).outputs
            check(
                output in outputs,
                f"stages.{name}.{input_name}",
                f"stage {upstream!r} has no output {output!r} (it has {', '.join(outputs) or 'none'})",
            )
        for output, model in spec.outputs.items():
            check(model not in registered, f"stages.{name}",
                  f"its {output} would be registered as {model}, as stage {registered.get(model)!r}'s")  # fmt: skip
            registered[model] = name
    return cfg


def check_layout(cfg: PipelineConfig, selected: list[str]) -> None:
    """The selected stages can run in the configured actor layout and on the configured backend (before any work:
    they would otherwise fail at the first such stage, hours into a run)."""
    elsewhere = [name for name in selected if cfg.sim.backend not in stage_spec(cfg, name).backends]
    able = [name for name in cfg.stages if cfg.sim.backend in stage_spec(cfg, name).backends]
    check(
        not elsewhere,
        "sim.backend",
        f"{cfg.sim.backend}, but stages {elsewhere} do not run on it yet (only {able} do; docs/isaaclab.md): stop "
        f"before them (--until-stage), or run them on mujoco or warp",
    )
    grouped = [name for name in selected if stage_spec(cfg, name).env_groups]
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
