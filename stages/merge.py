"""LLP stage 4, the multi-expert merge: one height-scan student learns every behaviour from its experts.

The envs are split into groups, one per behaviour: locomotion on the terrain courses of stage 1, and one
group per skill on the skill's course (phase B's: every accepted height of the library, a standing start).
Each simulator actor hosts one group, and its expert labels every state the student visits there: the
locomotion teacher on the terrain, the skill's expert on its course (online DAgger, no PPO: LLP trains this
stage by DAgger alone). The learner joins the groups' rollouts into one update.

The student reads what every parkour policy reads (proprioception, height scan, velocity command) and
drives every joint; nothing in its input says which group an env is in. The experts need not act or sense
as it does: the locomotion teacher drives the legs only (its labels hold the other joints at the default
pose) and reads its gait clock, the skill expert reads the tracking task's proprioception; the envs convert
(``ParkourEnv.convert_actions``, ``TrackingEnv.teacher_obs``).

Evaluated in the stage, group by group on fresh trials, beside each group's expert and a policy that does
nothing (stand still, hold the default pose): the locomotion group with the evaluation protocol of ``llp
evaluate`` (the same trials for every policy), each skill group from the standing start of the skill stage's
phase B over every height.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field
from llp.learn.configs import ActorConfig, PPOConfig
from llp.motion.walking_states import WalkingStatesConfig
from llp.stages.common import checked_env_config, deployment_fields
from llp.stages.evaluate import EvaluateConfig
from llp.stages.skill_expert import course_conditions

STUDENT_OBS = ["policy/proprio", "policy/height_scan", "policy/command"]


def _skills() -> dict[str, str]:
    return {"climb_step": "skill_climb_step"}


def skill_group_overrides() -> dict[str, Any]:
    return {
        "action_offset": "default",  # as every parkour policy's: joint target = default pose + scale x action
        "proprio_layout": "locomotion",  # the terrain env's proprioception, so one student reads both groups
        "observations": {"policy": ["proprio", "height_scan", "command"], "critic": ["proprio"]},
        "start_window_s": 0.2,  # the skill stage's phase B: near the motion's start, standing
        "start_at_zero": 0.0,
        "start_posture": "default",
        **course_conditions(),  # as the skill stage's phase B: the course's friction and sideways start
    }


def _ppo() -> PPOConfig:
    return PPOConfig(rl_coef=0.0, dagger_coef=1.0, learning_rate=5e-4, schedule="fixed", num_epochs=2)


def _actor() -> ActorConfig:
    return ActorConfig(obs=list(STUDENT_OBS), num_frames=5, init_std=0.1)


def _evaluation() -> EvaluateConfig:
    return EvaluateConfig(video_seconds=0.0, retries=0)


@dataclass(kw_only=True)
class MergeConfig:
    """The experts, the groups' envs, the student and its budget."""

    teacher: str = field(default="locomotion_teacher", doc="Upstream stage whose 'policy' labels the locomotion group.")
    skills: dict[str, str] = field(
        default_factory=_skills, doc="One env group per skill: skill name (of the library) -> its expert's stage."
    )
    task: str = field(default="locomotion", doc="Task of the locomotion group (conf/task/).")
    robot: str = field(default="lightbot0_like", doc="Robot config (conf/robot/).")
    env: dict[str, Any] = field(
        default_factory=dict, doc="Overrides of the locomotion task (validated); the student drives every joint."
    )
    skill_task: str = field(default="tracking", doc="Task of the skill groups (conf/task/).")
    skill_env: dict[str, Any] = field(
        default_factory=skill_group_overrides,
        doc="Overrides of the skill task: the terrain env's proprioception, the student's terms, phase B's start.",
    )
    walking: WalkingStatesConfig = field(
        default_factory=WalkingStatesConfig,
        doc="How the teacher's walk is recorded for the skill groups' walking starts (skill_env.walking_starts).",
    )
    envs_per_actor: int = field(default=64, doc="Envs in each simulator actor (each actor hosts one group).")
    iterations: int = field(default=1000, doc="DAgger iterations.")
    checkpoint_every: int = field(default=100, doc="Iterations between checkpoints (and metric uploads).")
    skill_trials: int = field(default=64, doc="Evaluation trials per policy on each skill group's course.")
    retries: int = field(default=1, doc="Prefect retries of this stage (each resumes from its last checkpoint).")
    ppo: PPOConfig = field(default_factory=_ppo, doc="The learning rule: DAgger alone (rl_coef 0).")
    actor: ActorConfig = field(default_factory=_actor, doc="The unified student (no group label in its input).")
    evaluation: EvaluateConfig = field(
        default_factory=_evaluation, doc="Protocol of the locomotion group's evaluation (as `llp evaluate`)."
    )

    def validate(self, path: str) -> None:
        from llp.config.schema import ConfigError
        from llp.motion.tracking import tracking_task

        for name in ("envs_per_actor", "iterations", "checkpoint_every", "skill_trials"):
            check(getattr(self, name) >= 1, f"{path}.{name}", "must be >= 1")
        check(self.retries >= 0, f"{path}.retries", "must be >= 0")
        check(bool(self.skills), f"{path}.skills", "name at least one skill and its expert's stage")
        check("locomotion" not in self.skills, f"{path}.skills", "'locomotion' is the terrain group's name")
        check(self.ppo.rl_coef == 0, f"{path}.ppo.rl_coef", "the merge learns by DAgger alone (LLP): 0")
        check(self.ppo.dagger_coef > 0, f"{path}.ppo.dagger_coef", "the merge learns from its experts: > 0")
        env = checked_env_config(self.task, self.robot, self.env, path)
        produced = {g: list(t) for g, t in env.observations.items()}
        for i, ref in enumerate(self.actor.obs):
            group, _, term = ref.partition("/")
            check(term in produced.get(group, []), f"{path}.actor.obs[{i}]",
                  f"{ref!r} is not an observation of task {self.task!r} (it gives {produced})")  # fmt: skip
            check(term not in ("privileged", "gait_clock", "reference", "obstacle"), f"{path}.actor.obs[{i}]",
                  f"{ref!r}: the unified student reads what the robot senses in every group")  # fmt: skip
        try:
            task = tracking_task(self.skill_task, self.robot, self.skill_env)
        except ConfigError as err:
            where = err.path if err.path in ("task", "robot") else f"skill_env.{err.path}"
            raise ConfigError(f"{path}.{where}", str(err).split(": ", 1)[-1]) from None
        check(task.action_offset == "default", f"{path}.skill_env.action_offset",
              "the student offsets the default pose")  # fmt: skip
        self.walking.validate(f"{path}.walking")
        check(task.proprio_layout == "locomotion", f"{path}.skill_env.proprio_layout",
              "the student reads the terrain env's proprioception in every group: locomotion")  # fmt: skip
        for i, ref in enumerate(self.actor.obs):
            group, _, term = ref.partition("/")
            check(term in task.observations.get(group, []), f"{path}.actor.obs[{i}]",
                  f"{ref!r} is not given by the skill task (skill_env.observations: {task.observations})")  # fmt: skip


def locomotion_env(cfg: MergeConfig, teacher_spec: dict):
    """The locomotion group's env (every joint driven); raises ValueError if it lacks a term the teacher reads."""
    env_cfg = checked_env_config(cfg.task, cfg.robot, cfg.env, "env")
    _check_expert_terms("the locomotion teacher", teacher_spec, env_cfg.observations)
    return env_cfg


def skill_group_env(cfg: MergeConfig, refs: list, expert_spec: dict, skill: str, walking_states=None):
    """A skill group's env: one lane per accepted reference of the skill, the student's start and layout (and the
    teacher's recorded walk for its walking starts)."""
    from llp.motion.tracking import tracking_task
    from llp.stages.skill_expert import lanes_env

    task = tracking_task(cfg.skill_task, cfg.robot, _with_expert_terms(cfg.skill_env, expert_spec))
    env_cfg = lanes_env(task, refs, walking_states)
    _check_expert_terms(f"the {skill} expert", expert_spec, env_cfg.task.observations)
    return env_cfg


def _with_expert_terms(overrides: dict, expert_spec: dict) -> dict:
    """``overrides`` with the observation terms the expert reads added to its groups (its labels need them)."""
    import copy

    out = copy.deepcopy(overrides)
    groups = out.setdefault("observations", {})
    for ref in expert_spec.get("obs", []):
        group, _, term = ref.partition("/")
        if term not in groups.setdefault(group, []):
            groups[group].append(term)
    return out


def _check_expert_terms(who: str, spec: dict, observations: dict) -> None:
    for ref in spec.get("obs", []):
        group, _, term = ref.partition("/")
        if term not in observations.get(group, []):
            raise ValueError(f"{who} reads {ref!r}, which its group's env does not give ({dict(observations)})")


def run(ctx, cfg: MergeConfig, inputs: dict[str, str]) -> dict[str, str]:
    """DAgger from every group's expert into one student; evaluate it per group beside the experts;
    returns {'policy': models:/ URI}."""
    from llp.actors.pool import TrainingPool
    from llp.learn.spec import EnvGroup, TeacherSpec, TrainSpec
    from llp.stages.skill_expert import skill_references

    teacher = ctx.frozen_policy(inputs["teacher"])
    loco_env = locomotion_env(cfg, teacher.spec)
    library = ctx.load_dataset(inputs["library"])
    walk = skill_walking_states(ctx, cfg, inputs["teacher"])
    groups, skill_groups = [EnvGroup("locomotion", loco_env, [TeacherSpec(teacher)])], {}
    for skill, stage in cfg.skills.items():
        expert = skill_expert_policy(ctx, inputs[stage])
        refs = skill_references(library, skill)
        env_cfg = skill_group_env(cfg, refs, expert.spec, skill, walk)
        groups.append(EnvGroup(skill, env_cfg, [TeacherSpec(expert)]))
        skill_groups[skill] = (expert, env_cfg)
    skills = "; ".join(f"{s} <- {e.uri} over {[r.reference_id for r in g.references()]}"
                       for s, (e, g) in skill_groups.items())  # fmt: skip
    print(f"[llp] {ctx.stage}: {len(groups)} experts: locomotion <- {teacher.uri}; {skills}", flush=True)
    ctx.init_ray()
    spec = TrainSpec(env=loco_env, envs_per_actor=cfg.envs_per_actor, seed=ctx.seed, actor=cfg.actor, critic=None,
                     ppo=cfg.ppo, groups=groups)  # fmt: skip
    pool = TrainingPool(ctx.resources.for_groups(len(groups)), spec)
    keys = ["loss/dagger"] + [f"group/{g.name}/episode/{k}" for g in groups for k in ("length", "success_rate")]
    try:
        start, history = ctx.restore_checkpoint(pool)
        ctx.train(pool, cfg.iterations, cfg.checkpoint_every, keys, start, history)
        uri = register_student(ctx, pool, loco_env)
    finally:
        pool.close()
    panels = [("loss/dagger", "DAgger loss (all groups)")]
    panels += [(f"group/{g.name}/episode/length", f"{g.name}: mean episode length (steps)") for g in groups]
    ctx.log_learning_curve(history, panels)
    policies = {"locomotion teacher": teacher.uri, "merged student": uri, "stand still": None}
    table = {"locomotion": evaluate_locomotion(ctx, cfg.evaluation, policies)}
    for skill, (expert, env_cfg) in skill_groups.items():
        table.update(evaluate_skill_starts(ctx, cfg.skill_trials, skill, expert, env_cfg, {"merged student": uri}))
    ctx.log_json(table, "evaluation/merge.json")
    return {"policy": uri}


def skill_expert_policy(ctx, uri: str):
    """A skill stage's policy as the frozen expert of its group. A skill policy trains in the tracking task;
    versions registered before policy specs recorded their proprioception layout read the tracking one."""
    expert = ctx.frozen_policy(uri)
    if not expert.spec.get("proprio_layout"):
        expert.spec["proprio_layout"] = "tracking"
        print(f"[llp] {ctx.stage}: {uri} records no proprioception layout: it read the tracking task's", flush=True)
    return expert


def register_student(ctx, pool, env_cfg) -> str:
    """Register the pool's actor as this stage's 'policy', with the deployment fields of ``env_cfg``."""
    from llp.learn.export import example_input, export_actor
    from llp.learn.models import Actor

    dims = pool.spaces["obs_dims"]
    actor = Actor(pool.spec.actor, dims, pool.spaces["num_actions"])
    actor.load_state_dict(pool.actor_state())
    module, spec = export_actor(actor.eval(), dims, **deployment_fields(env_cfg))
    return ctx.register_policy("policy", module, spec.to_dict(), example_input(spec))


def evaluate_locomotion(ctx, protocol: EvaluateConfig, policies: dict, group: str = "locomotion") -> dict:
    """The evaluation protocol (as ``llp evaluate``) for each policy (a URI; None: standing still) on the same
    fresh trials; metrics eval/<group>/<who>/..."""
    from llp.stages.evaluate import evaluate_policy

    rows = {}
    for who, uri in policies.items():
        bar = ctx.progress(1, 0, label=f"evaluate {who} ({group})")
        policy = None if uri is None else ctx.frozen_policy(uri)
        report = evaluate_policy(policy, protocol, ctx.resources, ctx.seed, bar.trials)
        row = {k: report[k] for k in ("model", "success_rate", "fall_rate", "tracking_kernel", "trials", "outcomes",
                                      "mean_progress_m", "ends_to_goal_m")}  # fmt: skip
        row["success_by_type"] = {t: r["success_rate"] for t, r in report["by_type"].items()}
        key = f"eval/{group}/{who.replace(' ', '_')}"
        metrics = {f"{key}/{k}": float(row[k]) for k in ("success_rate", "fall_rate", "tracking_kernel",
                                                          "mean_progress_m")}  # fmt: skip
        metrics.update({f"{key}/{t}/success_rate": v for t, v in row["success_by_type"].items()})
        ctx.log_metrics(metrics, step=0)
        print(f"[llp] {ctx.stage}: {group}: {who}: {100 * row['success_rate']:.0f}% of {row['trials']} trials "
              f"succeed, {100 * row['fall_rate']:.0f}% fall", flush=True)  # fmt: skip
        rows[who] = row
    return rows


def skill_walking_states(ctx, cfg: MergeConfig, teacher_uri: str):
    """The teacher's recorded walk when the skill groups start walking (skill_env.walking_starts > 0), else None."""
    from llp.motion.tracking import tracking_task
    from llp.stages.skill_expert import walking_states

    if tracking_task(cfg.skill_task, cfg.robot, cfg.skill_env).walking_starts == 0:
        return None
    return walking_states(ctx, teacher_uri, cfg.walking, cfg.robot, "walking")


def evaluate_skill_starts(ctx, trials: int, skill: str, expert, env_cfg, students: dict[str, str]) -> dict:
    """``evaluate_skill`` from the standing start ({skill: rows}) and, where the group also starts walking, from
    the walking start, heights not held to the reference's clock ({"<skill> walking start": rows}, metrics
    eval/<skill>_walking_start/...), and where its walking starts lead in, from up to ``walking_lead_in_m``
    behind it ({"<skill> walking lead-in": rows}, with the success per band of that distance)."""
    from dataclasses import replace

    from llp.stages.skill_expert import WALK_IN_UNHELD_Z

    def starting(share: float, lead_in: float = 0.0):  # walking ones keep their own timing (as the skill stage's)
        unheld = replace(env_cfg.task.terminations, walking_unheld_z=WALK_IN_UNHELD_Z if share else None)
        task = replace(env_cfg.task, walking_starts=share, walking_lead_in_m=lead_in, terminations=unheld)
        return replace(env_cfg, task=task)

    table = {skill: evaluate_skill(ctx, trials, skill, expert, starting(0.0), students)}
    if env_cfg.walking_states is not None:
        starts = {"walking start": starting(1.0)}
        if env_cfg.task.walking_lead_in_m > 0:
            starts["walking lead-in"] = starting(1.0, env_cfg.task.walking_lead_in_m)
        for start, env in starts.items():
            name = f"{skill} {start}"
            table[name] = evaluate_skill(ctx, trials, skill, expert, env, students, label=name.replace(" ", "_"))
    return table


def evaluate_skill(ctx, trials: int, skill: str, expert, env_cfg, students: dict[str, str], label: str = "") -> dict:
    """The skill's course from ``env_cfg``'s start, every height: its expert (in its own proprioception), each
    student (name -> URI) and the default pose, on the same trials; metrics eval/<label or skill>/<who>/..."""
    from dataclasses import replace

    from llp.stages.reference_augmentation import run_trials
    from llp.stages.skill_expert import DefaultPose, lead_in_reach, lead_in_words, success_by_lead_in

    own = replace(env_cfg, task=replace(env_cfg.task, proprio_layout=expert.spec["proprio_layout"]))
    policies = {f"{skill} expert": (expert.load(), own, expert.uri)}
    policies.update({who: (ctx.frozen_policy(uri).load(), env_cfg, uri) for who, uri in students.items()})
    policies["default pose"] = (None, env_cfg, "baseline:default-pose")
    rows = {}
    for who, (actor, env, model) in policies.items():
        if actor is None:
            from llp.motion.tracking_env import TrackingEnv

            actor = DefaultPose(TrackingEnv(env, 1).num_actions)
        records = run_trials(env, actor, trials, seed=ctx.seed + 104729)
        n = len(records)
        row = {"model": model, "trials": n, "success_rate": sum(t["success"] for t in records) / n,
               "fall_rate": sum(t["fell"] for t in records) / n}  # fmt: skip
        by_band = success_by_lead_in(records, lead_in_reach(env.task))
        if by_band:
            row["success_by_lead_in"] = by_band
        row["success_by_reference"] = {
            ref: sum(t["success"] for t in records if t["reference_id"] == ref) / max(1, sum(t["reference_id"] == ref
                                                                                          for t in records))
            for ref in sorted({t["reference_id"] for t in records})
        }  # fmt: skip
        key = f"eval/{label or skill}/{who.replace(' ', '_')}"
        ctx.log_metrics({f"{key}/success_rate": row["success_rate"], f"{key}/fall_rate": row["fall_rate"]}, step=0)
        print(f"[llp] {ctx.stage}: {label or skill}: {who}: {100 * row['success_rate']:.0f}% of {n} trials succeed, "
              f"{100 * row['fall_rate']:.0f}% fall{lead_in_words(by_band)}", flush=True)  # fmt: skip
        rows[who] = row
    return rows
