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
from llp.config.stage import TrainingStageConfig
from llp.learn.configs import ActorConfig, PPOConfig
from llp.skills.groups import (
    STUDENT_OBS,
    TakesSkills,
    locomotion_env,
    register_student,
    skill_expert_policy,
    skill_group_env,
    skill_group_overrides,
    skill_walking_states,
)
from llp.skills.protocol import EvaluateConfig
from llp.skills.trials import evaluate_locomotion, evaluate_skill_starts
from llp.stages.common import checked_env_config, checked_tracking_task


def _ppo() -> PPOConfig:
    return PPOConfig(rl_coef=0.0, dagger_coef=1.0, learning_rate=5e-4, schedule="fixed", num_epochs=2)


def _actor() -> ActorConfig:
    return ActorConfig(obs=list(STUDENT_OBS), num_frames=5, init_std=0.1)


def _evaluation() -> EvaluateConfig:
    return EvaluateConfig(video_seconds=0.0, retries=0)


@dataclass(kw_only=True)
class MergeConfig(TakesSkills, TrainingStageConfig):
    """The experts, the groups' envs, the student and its budget."""

    teacher: str = field(default="locomotion_teacher", doc="Upstream stage whose 'policy' labels the locomotion group.")
    task: str = field(default="locomotion", doc="Task of the locomotion group (conf/task/).")
    env: dict[str, Any] = field(
        default_factory=dict, doc="Overrides of the locomotion task (validated); the student drives every joint."
    )
    skill_env: dict[str, Any] = field(
        default_factory=skill_group_overrides,
        doc="Overrides of the skill task: the terrain env's proprioception, the student's terms, phase B's start.",
    )
    iterations: int = field(default=1000, doc="DAgger iterations.")
    ppo: PPOConfig = field(default_factory=_ppo, doc="The learning rule: DAgger alone (rl_coef 0).")
    actor: ActorConfig = field(default_factory=_actor, doc="The unified student (no group label in its input).")
    evaluation: EvaluateConfig = field(
        default_factory=_evaluation, doc="Protocol of the locomotion group's evaluation (as `llp evaluate`)."
    )

    def validate(self, path: str) -> None:
        self.check_training(path, "iterations", "skill_trials")
        self.check_skills(path)
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
        task = checked_tracking_task(self.skill_task, self.robot, self.skill_env, path, "skill_env")
        check(task.action_offset == "default", f"{path}.skill_env.action_offset",
              "the student offsets the default pose")  # fmt: skip
        self.walking.validate(f"{path}.walking")
        check(task.proprio_layout == "locomotion", f"{path}.skill_env.proprio_layout",
              "the student reads the terrain env's proprioception in every group: locomotion")  # fmt: skip
        for i, ref in enumerate(self.actor.obs):
            group, _, term = ref.partition("/")
            check(term in task.observations.get(group, []), f"{path}.actor.obs[{i}]",
                  f"{ref!r} is not given by the skill task (skill_env.observations: {task.observations})")  # fmt: skip


def run(ctx, cfg: MergeConfig, inputs: dict[str, str]) -> dict[str, str]:
    """DAgger from every group's expert into one student; evaluate it per group beside the experts;
    returns {'policy': models:/ URI}."""
    from llp.actors.pool import TrainingPool
    from llp.learn.spec import EnvGroup, TeacherSpec, TrainSpec
    from llp.skills.library import skill_references

    teacher = ctx.frozen_policy(inputs["teacher"])
    loco_env = locomotion_env(cfg, teacher.spec)
    libraries = {stage: ctx.load_dataset(inputs[stage]) for stage in {cfg.library_of(s) for s in cfg.skills}}
    walk = skill_walking_states(ctx, cfg, inputs["teacher"])
    groups, skill_groups = [EnvGroup("locomotion", loco_env, [TeacherSpec(teacher)])], {}
    for skill, stage in cfg.skills.items():
        expert = skill_expert_policy(ctx, inputs[stage])
        refs = skill_references(libraries[cfg.library_of(skill)], skill)
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
