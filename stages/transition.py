"""LLP stage 5, transition training: the merged student learns to take an approach into its skill and on.

A course group joins the merge's groups: terrain tiles with an approach area, the obstacle and the area after
it (the terrain env's ``climb`` tile: a platform at the library's heights, the goal on top). It has no expert
and no per-frame reference: PPO on velocity tracking towards the goal, the goal reward and the goal approach,
plus the phase-conditional AMP style reward (LLP): the walking prior before the trigger (recorded rollouts of
the locomotion teacher), the skill's prior over the obstacle (the library's motions of the skill), walking
again after it. The earlier groups keep training by DAgger from their experts alongside (no PPO there), so
the old behaviours are not forgotten. The actor starts from the merged student and reads no group label;
the critic reads the group's one-hot.

Evaluated in the stage on fresh trials the same for every policy: the course (the approach-to-skill entry,
``llp evaluate``'s protocol on the course tiles), the locomotion terrain, and each skill's course from the
standing start; the merged student before, the transition policy after, and a policy that does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field
from llp.config.stage import TrainingStageConfig
from llp.learn.configs import ActorConfig, AMPConfig, CriticConfig, PPOConfig
from llp.skills.groups import STUDENT_OBS, TakesSkills
from llp.skills.protocol import EvaluateConfig, course_trials_env
from llp.stages.common import check_course_tiles, checked_env_config, transition_course

CRITIC_OBS = ["critic/proprio", "critic/command", "critic/height_scan", "group/onehot"]

# Where the course's evaluations start, along the climb tile from its spawn: two of the three evaluations the
# paper's critics ask for (the third, the exit into the next behaviour, needs a course that goes on after the
# box). Offsets from the box's front (terrain.approach_length after the spawn), but the approach.
EVALUATION_STARTS = {
    "approach": None,  # approach-to-skill entry: from the spawn, walk 2.5 m to the box, climb onto it
    "walk_in": (-0.8, -0.7),  # a few steps before the skill's start: walk them, then climb
    "step_in": (-0.65, -0.55),  # one short step before the skill's start
    "edge": (-0.55, -0.35),  # the skill from a favourable start: where the skill's motion starts (0.45 m before)
}


def evaluation_start(name: str, approach_length: float) -> tuple[float, float]:
    """The ``goal_starts`` range (metres from the spawn) of the course evaluation ``name``."""
    offset = EVALUATION_STARTS[name]
    return (0.0, 0.0) if offset is None else (approach_length + offset[0], approach_length + offset[1])


def _skill_env() -> dict[str, Any]:
    from llp.skills.groups import skill_group_overrides

    env = skill_group_overrides()
    env["observations"] = {
        "policy": ["proprio", "height_scan", "command"],
        "critic": ["proprio", "command", "height_scan"],
    }
    return env


def _ppo() -> PPOConfig:
    return PPOConfig(rl_coef=1.0, dagger_coef=30.0, learning_rate=3e-5, schedule="adaptive", entropy_coef=0.0)


def _actor() -> ActorConfig:
    return ActorConfig(obs=list(STUDENT_OBS), num_frames=5, init_std=0.2)


def _critic() -> CriticConfig:
    return CriticConfig(obs=list(CRITIC_OBS))


def _amp() -> AMPConfig:
    return AMPConfig(triggers=[0.0, 1.35], style_coef=1.0, hidden_dims=[256, 128])


def _evaluation() -> EvaluateConfig:
    return EvaluateConfig(video_seconds=0.0, retries=0)


@dataclass(kw_only=True)
class TransitionConfig(TakesSkills, TrainingStageConfig):
    """The student to start from, the groups' experts and envs, the course, the priors and the budget."""

    student: str = field(default="merge", doc="Upstream stage whose 'policy' the actor starts from.")
    teacher: str = field(
        default="locomotion_teacher",
        doc="Upstream stage whose 'policy' labels the terrain group and gives the walking prior.",
    )
    task: str = field(default="locomotion", doc="Task of the terrain and course groups (conf/task/).")
    env: dict[str, Any] = field(default_factory=dict, doc="Overrides of the task for the terrain group.")
    course_env: dict[str, Any] = field(
        default_factory=transition_course,
        doc="Overrides of the task for the course group: its tiles, terms, rewards. Its obstacle (kind, depth, "
        "heights) is its first skill's, as that skill's library holds it.",
    )
    skill_env: dict[str, Any] = field(default_factory=_skill_env, doc="Overrides of the skill task (as the merge's).")
    iterations: int = field(default=500, doc="PPO (course) + DAgger (the others) iterations, the warm-up's included.")
    critic_warmup: int = field(
        default=50,
        doc="First iterations in which the actor learns by DAgger alone (no PPO on the course) while the new "
        "critic and the discriminators learn: PPO then starts from advantages of a fitted value function.",
    )
    walking_prior_steps: int = field(default=100, doc="Steps of the teacher's rollouts for the walking prior.")
    walking_prior_envs: int = field(default=64, doc="Envs of the teacher's rollouts for the walking prior.")
    course_evaluations: list[str] = field(
        default_factory=lambda: list(EVALUATION_STARTS),
        doc="Course evaluations, each on its own trials: approach (from the spawn: the entry into the skill), "
        "walk_in and step_in (0.7-0.8 and 0.55-0.65 m before the box: how far the entry reaches back), edge (the "
        "skill from its motion's start, 0.35-0.55 m before the box).",
    )
    ppo: PPOConfig = field(default_factory=_ppo, doc="PPO on the course group, DAgger on the expert groups.")
    actor: ActorConfig = field(default_factory=_actor, doc="The student (as the merge's; no group label).")
    critic: CriticConfig = field(
        default_factory=_critic, doc="The critic: the same terms in every group, and the group."
    )
    amp: AMPConfig = field(
        default_factory=_amp,
        doc="Phase-conditional AMP: walk before the trigger, the skill over the "
        "obstacle (progress 0 to 1.35 m: 0.6 m before the edge to 0.75 m onto it), walk after.",
    )
    evaluation: EvaluateConfig = field(default_factory=_evaluation, doc="Protocol of the course and terrain trials.")

    def validate(self, path: str) -> None:
        self.check_training(path, "iterations", "skill_trials", "walking_prior_steps", "walking_prior_envs")
        check(0 <= self.critic_warmup < self.iterations, f"{path}.critic_warmup", "must be in [0, iterations)")
        self.check_skills(path)
        check(self.ppo.rl_coef > 0, f"{path}.ppo.rl_coef", "the course group learns by PPO: > 0")
        check(self.ppo.dagger_coef > 0, f"{path}.ppo.dagger_coef", "the expert groups keep learning by DAgger: > 0")
        unknown = [n for n in self.course_evaluations if n not in EVALUATION_STARTS]
        check(not unknown, f"{path}.course_evaluations", f"{unknown}: choose from {list(EVALUATION_STARTS)}")
        check(len(self.amp.triggers) == 2, f"{path}.amp.triggers", "walk, skill, walk: two triggers")
        check(not any(r.startswith("group/") for r in self.actor.obs), f"{path}.actor.obs", "no group label")
        course = checked_env_config(self.task, self.robot, self.course_env, f"{path}.course_env")
        check_course_tiles(course, f"{path}.course_env")
        check(
            "amp_features" in course.observations.get("amp", []) and "progress" in course.observations.get("amp", []),
            f"{path}.course_env.observations.amp",
            "the AMP prior reads amp_features and progress",
        )
        checked_env_config(self.task, self.robot, self.env, path)


def run(ctx, cfg: TransitionConfig, inputs: dict[str, str]) -> dict[str, str]:
    """PPO with AMP on the course, DAgger on the expert groups, from the merged student; evaluate before and
    after on the same trials; returns {'policy': models:/ URI}."""

    from dataclasses import replace

    from llp.actors.pool import TrainingPool
    from llp.learn.phases import Phase
    from llp.learn.spec import AMPSpec, EnvGroup, TeacherSpec, TrainSpec
    from llp.motion.library import accepted_obstacle
    from llp.skills.groups import (
        locomotion_env,
        register_student,
        skill_expert_policy,
        skill_group_env,
        skill_walking_states,
    )
    from llp.skills.library import course_at, skill_references

    student = ctx.frozen_policy(inputs["student"])
    weights = _student_weights(cfg, student)  # before anything expensive: the actor must be the student's shape
    teacher = ctx.frozen_policy(inputs["teacher"])
    loco_env = locomotion_env(cfg, teacher.spec)
    libraries = {stage: ctx.load_dataset(inputs[stage]) for stage in {cfg.library_of(s) for s in cfg.skills}}
    first = next(iter(cfg.skills))  # the course's obstacle: the first skill's, at every height its library reached
    obstacle = accepted_obstacle(libraries[cfg.library_of(first)], first)
    course_overrides = course_at(cfg.course_env, obstacle)
    course_env = checked_env_config(cfg.task, cfg.robot, course_overrides, "course_env")
    groups = [EnvGroup("locomotion", loco_env, [TeacherSpec(teacher)], rl=False)]
    skill_refs, skill_groups = [], {}
    walk = skill_walking_states(ctx, cfg, inputs["teacher"])
    for skill, stage in cfg.skills.items():
        expert = skill_expert_policy(ctx, inputs[stage])
        refs = skill_references(libraries[cfg.library_of(skill)], skill)
        skill_refs += refs
        env_cfg = skill_group_env(cfg, refs, expert.spec, skill, walk)
        groups.append(EnvGroup(skill, env_cfg, [TeacherSpec(expert)], rl=False))
        skill_groups[skill] = (expert, env_cfg)
    groups.append(EnvGroup("course", course_env, rl=True, amp=True))
    walk, climb = _priors(ctx, cfg, teacher, skill_refs)
    print(
        f"[llp] {ctx.stage}: from {student.uri}; course group ({first}: {obstacle.kind} at {list(obstacle.heights)} m) "
        "learns by PPO + AMP "
        f"(walking prior: {len(walk)} "
        f"transitions of {teacher.uri}; skill prior: {len(climb)} of {[r.id for r in skill_refs]}); "
        f"{[g.name for g in groups if not g.rl]} by DAgger",
        flush=True,
    )
    ctx.init_ray()
    spec = TrainSpec(
        env=loco_env,
        envs_per_actor=cfg.envs_per_actor,
        seed=ctx.seed,
        actor=cfg.actor,
        critic=cfg.critic,
        ppo=cfg.ppo,
        amp=AMPSpec(cfg.amp, [walk, climb, walk]),
        groups=groups,
    )
    pool = TrainingPool(ctx.resources.for_groups(len(groups)), spec)
    keys = (
        ["loss/dagger", "amp/style_reward"]
        + [f"group/{g.name}/episode/{k}" for g in groups for k in ("length", "success_rate")]
        + ["group/course/episode/start_step"]
    )

    def warm_up(pool, resumed: bool) -> None:  # the actor by DAgger alone while the critic and discriminators fit
        pool.set_rule(replace(cfg.ppo, rl_coef=0.0, schedule="fixed"), fresh_learning_rate=not resumed)

    def course_ppo(pool, resumed: bool) -> None:  # resumed: the pool's rule is this one, its rate the checkpoint's
        if not resumed:
            pool.set_rule(cfg.ppo, fresh_learning_rate=True)
            print(f"[llp] {ctx.stage}: critic warmed up ({cfg.critic_warmup} iterations); PPO on the course from "
                  "here", flush=True)  # fmt: skip

    phases = [Phase("critic warm-up", cfg.critic_warmup, warm_up),
              Phase("course PPO", cfg.iterations - cfg.critic_warmup, course_ppo)]  # fmt: skip
    try:
        start, history = ctx.restore_checkpoint(pool)
        if start == 0:  # the merged student's network and normaliser; its action noise is this stage's
            missing = pool.load_actor(weights)
            print(f"[llp] {ctx.stage}: the actor starts from {student.uri} (its own: {missing})", flush=True)
        ctx.train(pool, phases, cfg.checkpoint_every, keys, start, history)
        uri = register_student(ctx, pool, loco_env)
    finally:
        pool.close()
    ctx.log_learning_curve(
        history,
        [
            ("group/course/episode/success_rate", "course: goal reached (training)"),
            ("group/course/episode/start_step", "course: start curriculum step (0: the skill's start)"),
            ("amp/style_reward", "AMP style reward (course)"),
            ("loss/dagger", "DAgger loss (expert groups)"),
        ],
    )
    from llp.skills.trials import evaluate_locomotion, evaluate_skill_starts

    students = {"merged student": student.uri, "transition policy": uri}
    table = {}
    for name in cfg.course_evaluations:
        start = evaluation_start(name, course_env.terrain.approach_length)
        env = course_trials_env(course_overrides, start)
        course = replace(cfg.evaluation, task=cfg.task, robot=cfg.robot, traverse_types=[], env=env)
        group = f"course/{name}"
        table[group] = evaluate_locomotion(ctx, course, {**students, "stand still": None}, group=group)
    table["locomotion"] = evaluate_locomotion(ctx, cfg.evaluation, {**students, "stand still": None})
    for skill, (expert, env_cfg) in skill_groups.items():
        table.update(evaluate_skill_starts(ctx, cfg.skill_trials, skill, expert, env_cfg, students))
    ctx.log_json(table, "evaluation/transition.json")
    return {"policy": uri}


def _student_weights(cfg: TransitionConfig, student) -> dict:
    """The registered student's network weights, checked against this stage's actor config (a clear error,
    not a failed load in a Ray actor after the priors are recorded)."""
    import io

    import torch

    from llp.learn.models import Actor

    spec = student.spec
    if list(cfg.actor.obs) != list(spec["obs"]) or cfg.actor.num_frames != spec["num_frames"]:
        raise ValueError(f"actor.obs {cfg.actor.obs} x {cfg.actor.num_frames} frames must be the student's: "
                         f"{spec['obs']} x {spec['num_frames']} ({student.uri})")  # fmt: skip
    dims: dict = {}
    for ref, width in spec.get("obs_layout") or []:
        group, term = ref.split("/")
        dims.setdefault(group, {})[term] = width
    mine = Actor(cfg.actor, dims, spec["num_actions"]).state_dict()
    weights = torch.export.load(io.BytesIO(student.program)).state_dict
    wrong = [k for k, v in weights.items() if k not in mine or tuple(mine[k].shape) != tuple(v.shape)]
    if wrong:
        layers = [tuple(v.shape) for k, v in weights.items() if k.startswith("head.") and k.endswith("weight")]
        raise ValueError(f"{student.uri}'s network (layers {layers}) does not fit actor.hidden_dims "
                         f"{cfg.actor.hidden_dims}: set stages.transition.actor to the student's")  # fmt: skip
    return dict(weights)


def _priors(ctx, cfg: TransitionConfig, teacher, skill_refs: list):
    """(walking prior, skill prior) reference transitions [M, 2F]: the teacher's own rollouts on flat ground in
    its own action space, and the library's motions of the skills."""
    import re

    import torch

    from llp.config.schema import merge
    from llp.motion.amp_data import motion_transitions, policy_transitions
    from llp.sim.env import ParkourEnv

    joints = teacher.spec.get("action_joints")
    overrides = {
        "terrain": {"tile_types": ["flat"], "num_levels": 1},
        "observations": {"amp": ["amp_features"]},
        "commands": {"standing_fraction": 0.0},
    }
    if joints:
        overrides["robot"] = {"policy_joints": [re.escape(j) for j in joints]}
    env_cfg = checked_env_config(cfg.task, cfg.robot, merge(cfg.env, overrides), "env")
    env = ParkourEnv(env_cfg, cfg.walking_prior_envs, seed=ctx.seed)
    walk = policy_transitions(env, teacher.load(), cfg.walking_prior_steps)
    robot = env.cfg.robot
    climb = torch.cat([motion_transitions(r, robot) for r in skill_refs])
    return walk, climb
