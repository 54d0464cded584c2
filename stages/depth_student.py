"""LLP stage 6: the depth student, the policy the robot runs.

It sees only the chest depth camera, proprioception and the velocity command (the paper's deployed inputs),
and drives every joint its teacher drives. Its teacher is the transition policy of stage 5 (any upstream
height-scan policy: ``teacher``), which walks and climbs. The envs come in the transition stage's groups: the
terrain of stage 1 and the transition course (an approach, the skill's box, the goal on top, starts spread
from the spawn to the skill's start), every env through the camera model (noise, scale, dropouts, 27-33 Hz
frames 30-60 ms late). An MLP -> GRU -> MLP policy learns by online DAgger (the student drives, the teacher
labels every state it visits) while a decoder rebuilds the teacher's height scan from the GRU state; then RL
fine-tuning: PPO over every group under the same observations, from the distilled weights and the critic
fitted during distillation. The paper: 14,000 distillation + 1,000 fine-tuning iterations.

Both the distilled and the fine-tuned student are registered, and both are evaluated with the evaluation
protocol (terrain and the course from its approach) beside their teacher, on the same fresh trials; without
fine-tuning iterations the two are the same weights, judged once (as the distilled student).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field
from llp.config.stage import TrainingStageConfig
from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
from llp.skills.library import CourseOfSkill, course_at
from llp.skills.protocol import EvaluateConfig, course_protocol
from llp.stages.common import (
    check_course_tiles,
    check_network_obs,
    checked_env_config,
    deployment_fields,
    transition_course,
)

DISTILLED_TAG = "llp.distilled_policy"  # on the stage's MLflow run: the distilled student, for a resumed stage


def _actor() -> ActorConfig:
    return ActorConfig(
        obs=["policy/proprio", "policy/command", "depth/depth"],
        encoder_dims=[256, 128],
        gru_hidden=256,
        hidden_dims=[256, 128],
        reconstruct="policy/height_scan",
        init_std=0.2,
    )


def _critic() -> CriticConfig:
    return CriticConfig(obs=["critic/proprio", "critic/command", "critic/height_scan", "critic/privileged"])


def _distill() -> PPOConfig:
    return PPOConfig(rl_coef=0.0, dagger_coef=1.0, recon_coef=1.0, num_epochs=2, learning_rate=5e-4, schedule="fixed")


def _finetune() -> PPOConfig:
    return PPOConfig(rl_coef=1.0, dagger_coef=0.0, recon_coef=1.0, learning_rate=1e-4)


def _env() -> dict[str, Any]:
    # no gait clock reward: the student reads no clock (its teacher, the transition policy, reads none either)
    return {"observations": {"depth": ["depth"]}, "camera_model": {"perfect": False},
            "rewards": {"feet_phase": {"weight": 0.0}}}  # fmt: skip


def _course_env() -> dict[str, Any]:
    course = transition_course()
    course.pop("observations")  # the task's own terms (the critic's privileged ones among them), and the depth group
    # no start curriculum (DAgger labels every state the student visits): a quarter of the episodes from the spawn
    # (the whole approach), the rest spread towards the skill's start (0.45 m before the box, 2.05 m on)
    course["randomization"] = {"goal_starts": [[0.0, 0.0], [0.0, 1.0], [1.0, 1.8], [1.8, 2.1]]}
    return course


def _evaluation() -> EvaluateConfig:
    return course_protocol({"course": [0.0, 0.0]})


@dataclass(kw_only=True)
class DepthStudentConfig(CourseOfSkill, TrainingStageConfig):
    """The student's networks, its teacher, camera and the two phases' budgets."""

    teacher: str = field(
        default="transition", doc="Upstream stage whose 'policy' labels the states (a height-scan policy)."
    )
    task: str = field(default="locomotion", doc="Task config (conf/task/); the teacher's task.")
    env: dict[str, Any] = field(
        default_factory=_env,
        doc="Overrides of the task for every group: the depth group and the camera model (validated). The terrain "
        "group is the task with these.",
    )
    course_env: dict[str, Any] = field(
        default_factory=_course_env,
        doc="Further overrides for the course group (the transition course, its starts spread over the approach); "
        "{}: no course group, the terrain only.",
    )
    envs_per_actor: int = field(default=32, doc="Envs in each simulator actor (every one renders depth).")
    distill_iterations: int = field(default=14000, doc="DAgger iterations (the paper: 14,000).")
    finetune_iterations: int = field(default=1000, doc="PPO fine-tuning iterations after them (the paper: 1,000).")
    guided_iterations: int = field(
        default=0,
        doc="The first distillation iterations run with distill.teacher_drives (DAgger's beta: that share of the "
        "episodes goes where the teacher takes them, so the student is labelled on states its own actions do not "
        "reach yet, on top of the box); the rest with the student driving alone.",
    )
    distill: PPOConfig = field(default_factory=_distill, doc="Learning rule of distillation (rl_coef 0).")
    finetune: PPOConfig = field(default_factory=_finetune, doc="Learning rule of RL fine-tuning.")
    actor: ActorConfig = field(
        default_factory=_actor, doc="MLP -> GRU -> MLP student with a scan decoder (gru_hidden 0: an MLP student)."
    )
    critic: CriticConfig = field(default_factory=_critic, doc="Privileged critic (fitted during distillation).")
    evaluation: EvaluateConfig = field(
        default_factory=_evaluation, doc="Protocol of the in-stage evaluation (teacher, distilled, fine-tuned)."
    )

    def validate(self, path: str) -> None:
        self.check_training(path, "distill_iterations")
        check(self.finetune_iterations >= 0, f"{path}.finetune_iterations", "must be >= 0 (0: no fine-tuning)")
        check(0 <= self.guided_iterations <= self.distill_iterations, f"{path}.guided_iterations",
              f"must be in [0, distill_iterations ({self.distill_iterations})]")  # fmt: skip
        check(self.guided_iterations == 0 or self.distill.teacher_drives > 0, f"{path}.distill.teacher_drives",
              "guided iterations need a teacher that drives some episodes: > 0")  # fmt: skip
        check(self.finetune.teacher_drives == 0, f"{path}.finetune.teacher_drives", "fine-tuning is RL: 0")
        check(self.distill.dagger_coef > 0, f"{path}.distill.dagger_coef", "distillation needs dagger_coef > 0")
        check(
            self.finetune.num_steps == self.distill.num_steps,
            f"{path}.finetune.num_steps",
            f"fine-tuning continues on the same simulators: keep distill.num_steps ({self.distill.num_steps})",
        )
        check(self.finetune.rl_coef > 0, f"{path}.finetune.rl_coef", "fine-tuning is RL: rl_coef must be > 0")
        for name in ("distill", "finetune"):
            check(
                getattr(self, name).recon_coef == 0 or self.actor.reconstruct is not None,
                f"{path}.{name}.recon_coef",
                "reconstruction needs actor.reconstruct (the term the decoder rebuilds)",
            )
        env = checked_env_config(self.task, self.robot, self.env, path)
        produced = {group: list(terms) for group, terms in env.observations.items()}
        check_network_obs(self, self.task, produced, path)
        if self.course_env:
            course = checked_env_config(self.task, self.robot, self.group_overrides("course"), f"{path}.course_env")
            check_course_tiles(course, f"{path}.course_env")
            check(course.observations == env.observations, f"{path}.course_env.observations",
                  "every group gives the same terms (set them in env)")  # fmt: skip
        if self.actor.reconstruct:
            group, _, term = self.actor.reconstruct.partition("/")
            check(
                term in produced.get(group, []),
                f"{path}.actor.reconstruct",
                f"{self.actor.reconstruct!r} is not an observation of task {self.task!r} (it gives {produced})",
            )

    def group_overrides(self, group: str) -> dict[str, Any]:
        """The task overrides of env group ``group`` ('terrain' or 'course')."""
        from llp.config.schema import merge

        return self.env if group == "terrain" else merge(self.env, self.course_env)

    @property
    def groups(self) -> list[str]:
        return ["terrain", "course"] if self.course_env else ["terrain"]

    def inputs(self) -> dict[str, str]:
        courses = bool(self.course_env or self.evaluation.courses)  # the library gives their obstacle
        return {"policy": self.teacher, **(self.course_input() if courses else {})}

    def at_obstacle(self, obstacle) -> DepthStudentConfig:
        """This config with its course group and its course evaluations at the library's ``obstacle`` (a
        ``SkillObstacle``; None: as written)."""
        from dataclasses import replace

        course = course_at(self.course_env, obstacle) if self.course_env else {}
        evaluation = replace(self.evaluation, course_env=course_at(self.evaluation.course_env, obstacle))
        return replace(self, course_env=course, evaluation=evaluation)


def student_env(cfg: DepthStudentConfig, teacher_spec: dict, group: str = "terrain"):
    """The training env of ``group``: the task with the stage's overrides, driving the joints the teacher drives;
    raises ValueError when the env does not give a term the teacher reads."""
    import re

    from llp.config.schema import merge

    joints = teacher_spec.get("action_joints")
    overrides = cfg.group_overrides(group)
    if joints:
        overrides = merge(overrides, {"robot": {"policy_joints": [re.escape(j) for j in joints]}})
    env_cfg = checked_env_config(cfg.task, cfg.robot, overrides, "env")
    for ref in teacher_spec["obs"]:
        group, _, term = ref.partition("/")
        if term not in env_cfg.observations.get(group, []):
            raise ValueError(
                f"the teacher reads {ref!r}, which task {cfg.task!r} with this stage's env does not give "
                f"({dict(env_cfg.observations)})"
            )
    return env_cfg


def run(ctx, cfg: DepthStudentConfig, inputs: dict[str, str]) -> dict[str, str]:
    """Distil, fine-tune, evaluate; returns {'policy': fine-tuned, 'distilled': before fine-tuning}."""
    from dataclasses import replace

    from llp.actors.pool import TrainingPool
    from llp.learn.phases import Phase
    from llp.learn.spec import EnvGroup, TeacherSpec, TrainSpec

    teacher = ctx.frozen_policy(inputs["policy"])
    cfg = cfg.at_obstacle(cfg.course_obstacle(ctx, inputs))
    envs = {group: student_env(cfg, teacher.spec, group) for group in cfg.groups}
    env_cfg = envs["terrain"]
    camera = (
        "no camera"
        if "depth" not in env_cfg.observations
        else ("every env through the " + ("perfect camera" if env_cfg.camera_model.perfect else "camera model"))
    )
    print(f"[llp] {ctx.stage}: learns from {teacher.uri} in groups {list(envs)}, {camera}", flush=True)
    ctx.init_ray()

    common = dict(envs_per_actor=cfg.envs_per_actor, seed=ctx.seed, actor=cfg.actor, critic=cfg.critic, ppo=cfg.distill)
    if len(envs) > 1:  # each simulator actor hosts one group, labelled by the same teacher
        groups = [EnvGroup(group, env, [TeacherSpec(teacher)]) for group, env in envs.items()]
        spec = TrainSpec(env=env_cfg, groups=groups, **common)
        resources = ctx.resources.for_groups(len(groups))
    else:
        spec, resources = TrainSpec(env=env_cfg, teachers=[TeacherSpec(teacher)], **common), ctx.resources
    # one pool for both phases: fine-tuning changes the learning rule only (the teacher's labels go unused)
    pool = TrainingPool(resources, spec)
    distilled_uri = None

    def finetune(pool, resumed: bool) -> None:
        nonlocal distilled_uri
        if resumed:  # the checkpoint holds fine-tuning's learning rate; the distilled student was registered
            pool.set_rule(cfg.finetune, fresh_learning_rate=False)
            distilled_uri = _recorded_distilled(ctx)
        else:
            distilled_uri = _register(ctx, "distilled", pool, env_cfg)
            pool.set_rule(cfg.finetune)

    def student_drives(pool, resumed: bool) -> None:  # the rest of distillation: DAgger's beta 0
        pool.set_rule(replace(cfg.distill, teacher_drives=0.0), fresh_learning_rate=False)

    guided, distill = {"phase/finetune": 0.0, "phase/guided": 1.0}, {"phase/finetune": 0.0, "phase/guided": 0.0}
    phases = [Phase("guided distillation", cfg.guided_iterations, metrics=guided),  # the pool's first rule
              Phase("distillation", cfg.distill_iterations - cfg.guided_iterations,
                    student_drives if cfg.distill.teacher_drives > 0 else None, distill),
              Phase("fine-tuning", cfg.finetune_iterations, finetune, {"phase/finetune": 1.0})]  # fmt: skip
    keys = ("episode/return", "episode/length", "loss/dagger", *(f"group/{g}/episode/length" for g in envs))
    try:
        start, history = ctx.restore_checkpoint(pool)
        ctx.train(pool, phases, cfg.checkpoint_every, keys, start, history)
        if distilled_uri is None and cfg.finetune_iterations and start > cfg.distill_iterations:
            distilled_uri = _recorded_distilled(ctx)  # resumed after the last iteration: registered before
        if distilled_uri is None:  # no fine-tuning: the distilled student is the stage's policy
            distilled_uri = _register(ctx, "distilled", pool, env_cfg)
        final_uri = _register(ctx, "policy", pool, env_cfg)
    finally:
        pool.close()
    ctx.log_learning_curve(history)
    judged = {"teacher": teacher.uri, "distilled": distilled_uri}
    if cfg.finetune_iterations:  # without fine-tuning the policy is the distilled student: judged once
        judged["fine-tuned"] = final_uri
    _evaluate(ctx, cfg, judged)
    return {"policy": final_uri, "distilled": distilled_uri}


def _register(ctx, output: str, pool, env_cfg) -> str:
    from llp.learn.export import example_input, export_actor
    from llp.learn.models import Actor

    dims = pool.spaces["obs_dims"]
    actor = Actor(pool.spec.actor, dims, pool.spaces["num_actions"])
    actor.load_state_dict(pool.actor_state())
    camera = {"depth_camera": _plain(env_cfg.depth_camera), "camera_model": _plain(env_cfg.camera_model)}
    module, spec = export_actor(actor, dims, camera=camera, **deployment_fields(env_cfg))
    uri = ctx.register_policy(output, module, spec.to_dict(), example_input(spec))
    if output == "distilled":
        ctx.set_tag(DISTILLED_TAG, uri)
    return uri


def _recorded_distilled(ctx) -> str:
    uri = ctx.tag(DISTILLED_TAG)
    if uri is None:
        raise RuntimeError(f"{ctx.stage}: resumed in fine-tuning, but the run records no distilled student")
    return uri


def _plain(cfg) -> dict:
    from dataclasses import asdict

    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(cfg).items()}


def _evaluate(ctx, cfg: DepthStudentConfig, policies: dict[str, str]) -> None:
    """Every policy on the same fresh trials (one seed); metrics eval/<who>/..., a table and a picture."""
    from llp.evaluation.pictures import comparison_figure
    from llp.skills.protocol import evaluate_policy

    reports = {}
    for who, uri in policies.items():
        bar = ctx.progress(1, 0, label=f"evaluate {who}")
        reports[who] = evaluate_policy(ctx.frozen_policy(uri), cfg.evaluation, ctx.resources, ctx.seed, bar.trials)
        metrics = {
            f"eval/{who}/success_rate": reports[who]["success_rate"],
            f"eval/{who}/fall_rate": reports[who]["fall_rate"],
            f"eval/{who}/tracking_kernel": reports[who]["tracking_kernel"],
        }
        for t, row in reports[who]["by_type"].items():
            metrics[f"eval/{who}/{t}/success_rate"] = row["success_rate"]
        ctx.log_metrics(metrics, step=0)
        ctx.log_json(reports[who], f"evaluation/reports/{who}.json")  # the whole report, for `llp compare`
    table = {who: {k: r[k] for k in ("model", "success_rate", "fall_rate", "tracking_kernel", "trials", "by_type")}
             for who, r in reports.items()}  # fmt: skip
    ctx.log_json(table, "evaluation/students.json")
    ctx.log_figure(comparison_figure(reports), "evaluation/students.png")
