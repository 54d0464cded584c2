"""The env groups of the multi-expert stages (the merge, the transition): the locomotion group, one
group per skill with one lane per reference, their experts, and the student they share.

The functions take a stage config with the fields ``task``, ``robot``, ``env``, ``skill_task``, ``skill_env``
and ``walking`` (MergeConfig, TransitionConfig)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field
from llp.motion.walking_states import WalkingStatesConfig
from llp.skills.library import DEFAULT_LIBRARY, course_conditions
from llp.stages.common import checked_env_config, deployment_fields

STUDENT_OBS = ["policy/proprio", "policy/height_scan", "policy/command"]


@dataclass(kw_only=True)
class TakesSkills:
    """The skills a multi-expert stage trains on (the merge, the transition): filled from the pipeline's
    ``skills:`` unless the stage's config names its own."""

    skills: dict[str, str] = field(
        default_factory=lambda: {"climb_step": "skill_climb_step"},
        doc="Skill name (of its library's entries) -> its expert's stage: an env group each, labelled by it.",
    )
    libraries: dict[str, str] = field(
        default_factory=dict,
        doc=f"Skill name -> the stage whose library holds its references (a skill not named: {DEFAULT_LIBRARY}).",
    )
    skill_task: str = field(default="tracking", doc="Task of the skill groups (conf/task/).")
    walking: WalkingStatesConfig = field(
        default_factory=WalkingStatesConfig,
        doc="How the teacher's walk is recorded for the skill groups' walking starts (skill_env.walking_starts).",
    )
    skill_trials: int = field(default=64, doc="Evaluation trials per policy on each skill group's course.")

    def library_of(self, skill: str) -> str:
        return self.libraries.get(skill, DEFAULT_LIBRARY)

    def skill_inputs(self) -> dict[str, str]:
        """Inputs named by their stages: each skill's expert policy and each library its references come from."""
        experts = {stage: f"{stage}.policy" for stage in self.skills.values()}
        return {**experts, **{self.library_of(s): f"{self.library_of(s)}.library" for s in self.skills}}

    def check_skills(self, path: str) -> None:
        check(bool(self.skills), f"{path}.skills", "name at least one skill and its expert's stage")
        check("locomotion" not in self.skills, f"{path}.skills", "'locomotion' is the terrain group's name")
        extra = sorted(set(self.libraries) - set(self.skills))
        check(not extra, f"{path}.libraries", f"{extra}: not skills of this stage ({', '.join(self.skills)})")


def lanes_env(task, refs: list, walking_states=None, tracked: bool = False, shares=()):
    """The tracking env of ``task`` with one lane per reference (its physics rollout over its box; ``tracked``: the
    proposal its round's tracker followed; ``shares``: each lane's share of the envs, [] equal), and the teacher's
    recorded walk for walking starts."""
    from llp.motion.tracking import Lane, TrackingEnvConfig

    lanes = [Lane(r.tracked if tracked else r.qpos, r.obstacle, r.contacts, r.id) for r in refs]
    first = lanes[0]
    return TrackingEnvConfig(task=task, qpos=first.qpos, fps=refs[0].fps, obstacle=first.obstacle,
                             contacts=first.contacts, reference_id=first.reference_id, lanes=lanes[1:],
                             lane_shares=list(shares), walking_states=walking_states)  # fmt: skip


def walking_states(ctx, teacher_uri: str | None, cfg: WalkingStatesConfig, robot: str, path: str):
    """The teacher's recorded walk (``llp.motion.walking_states``), or None without a teacher; its size and pace
    go to the stage's run as params."""
    if not teacher_uri:
        return None
    import numpy as np

    from llp.motion.walking_states import forward_speed
    from llp.stages.common import teacher_walking_states

    teacher = ctx.frozen_policy(teacher_uri)
    states = teacher_walking_states(teacher, cfg, "locomotion", robot, ctx.seed, path)
    pace = forward_speed(states)
    ctx.log_metrics({"walking_states/count": float(len(states)), "walking_states/speed_median": float(np.median(pace)),
                     "walking_states/speed_p05": float(np.percentile(pace, 5)),
                     "walking_states/speed_p95": float(np.percentile(pace, 95))}, step=0)  # fmt: skip
    print(f"[llp] {ctx.stage}: {len(states)} walking states of {teacher.uri}, forward speed "
          f"{np.percentile(pace, 5):.2f}-{np.percentile(pace, 95):.2f} m/s (5-95%)", flush=True)  # fmt: skip
    return states


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


def locomotion_env(cfg, teacher_spec: dict):
    """The locomotion group's env (every joint driven); raises ValueError if it lacks a term the teacher reads."""
    env_cfg = checked_env_config(cfg.task, cfg.robot, cfg.env, "env")
    _check_expert_terms("the locomotion teacher", teacher_spec, env_cfg.observations)
    return env_cfg


def skill_group_env(cfg, refs: list, expert_spec: dict, skill: str, walking_states=None):
    """A skill group's env: one lane per accepted reference of the skill, the student's start and layout (and the
    teacher's recorded walk for its walking starts)."""
    from llp.motion.tracking import tracking_task
    from llp.skills.groups import lanes_env

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


def skill_walking_states(ctx, cfg, teacher_uri: str):
    """The teacher's recorded walk when the skill groups start walking (skill_env.walking_starts > 0), else None."""
    from llp.motion.tracking import tracking_task
    from llp.skills.groups import walking_states

    if tracking_task(cfg.skill_task, cfg.robot, cfg.skill_env).walking_starts == 0:
        return None
    return walking_states(ctx, teacher_uri, cfg.walking, cfg.robot, "walking")
