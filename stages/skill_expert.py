"""LLP stage 3, a single-skill expert: phase A learns the skill from its tracking expert, phase B generalises it.

The skill policy sees what a parkour policy sees on the robot's computer: proprioception, the height scan
and a velocity command; no reference, no phase, no obstacle coordinates. It learns in the tracking env of the
skill's hardest accepted reference (the reference library of stage 2): the tracking expert, hosted frozen in
every simulator actor, labels each state the student visits (online DAgger), while PPO adds the tracking
kernels, a goal reward and the penalties of the tracking task (loss = DAgger + lambda x PPO, LLP).

The expert's actions correct the reference's next joint targets; the student's, like every parkour policy's,
offset the default pose. The env re-expresses the expert's labels (and the last action it reads) so that
both mean the same joint targets (``TrackingEnv.convert_actions``, ``teacher_obs``).

Phase B (generalisation, LLP): PPO alone from phase A's networks, over every accepted physics-tracked reference
of the skill in the library (one lane per obstacle height, ``TrackingEnvConfig.lanes``), with the rewards of the
reference paired with each env's box and the goal reward; episodes start in the motion's first moments (no
reference-state initialisation), the body in the default standing posture of the locomotion teacher.

Evaluated in the stage on fresh trials from the motion's first frame: the "favorable start" of the paper's
critics (the hardest reference, in its first pose), and phase B's start (every lane, standing posture); the
tracking expert, the skill policy after each phase and the default pose held under PD, on the same trials.
Success: the motion carried through and its final pose held for ``hold_s`` with the pelvis within
``success_distance`` of the reference's (on top of the box, standing).

Not built yet: the vaults (no vault seeds are authored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field
from llp.config.stage import TrainingStageConfig
from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
from llp.motion.walking_states import WalkingStatesConfig
from llp.skills.groups import STUDENT_OBS, lanes_env, walking_states
from llp.skills.library import course_conditions, skill_references
from llp.skills.trials import WALK_IN_UNHELD_Z, DefaultPose, lead_in_reach, lead_in_words, success_by_lead_in
from llp.stages.common import (
    check_network_obs,
    checked_tracking_task,
    tracking_deployment_fields,
)

PHASE_A = ("hardest", "every")  # what phase A learns (SkillExpertConfig.phase_a)


def _env() -> dict[str, Any]:
    return {
        "action_offset": "default",
        "observations": {
            "policy": ["proprio", "reference", "obstacle", "height_scan", "command"],
            "critic": ["proprio", "reference", "obstacle", "privileged", "height_scan", "command"],
        },
        "rewards": {"goal": {"weight": 1.0, "std": 0.5}},
    }


def _actor() -> ActorConfig:
    return ActorConfig(obs=list(STUDENT_OBS), num_frames=5, init_std=0.5)


def _critic() -> CriticConfig:
    return CriticConfig(
        obs=["critic/proprio", "critic/reference", "critic/obstacle", "critic/privileged", "critic/height_scan"]
    )


def _ppo() -> PPOConfig:
    return PPOConfig(rl_coef=1.0, dagger_coef=1.0, learning_rate=5e-4, schedule="fixed")


def _phase_b_env() -> dict[str, Any]:
    return {"start_window_s": 0.2, "start_at_zero": 0.0, "start_posture": "default", **course_conditions()}


def _phase_b_ppo() -> PPOConfig:
    return PPOConfig(rl_coef=1.0, dagger_coef=0.0, learning_rate=1e-4, schedule="adaptive", entropy_coef=0.0)


@dataclass(kw_only=True)
class GeneralizationConfig:
    """Phase B: PPO alone over the library's heights, from phase A's networks."""

    iterations: int = field(default=0, doc="PPO iterations after phase A; 0: no phase B.")
    env: dict[str, Any] = field(
        default_factory=_phase_b_env,
        doc="Overrides of phase A's env: where episodes start and in which posture (validated).",
    )
    ppo: PPOConfig = field(default_factory=_phase_b_ppo, doc="PPO alone (dagger_coef 0: no expert labels).")
    lane_shares: list[float] = field(
        default_factory=list,
        doc="Each accepted reference's share of phase B's envs, lowest to highest, one per reference; []: equal.",
    )


@dataclass(kw_only=True)
class SkillExpertConfig(TrainingStageConfig):
    """Which skill, the env around its reference, the student's networks and budget."""

    skill: str = field(default="climb_step", doc="Skill of the library entries it learns (its hardest accepted).")
    task: str = field(default="tracking", doc="Tracking task config (conf/task/), with env's overrides.")
    env: dict[str, Any] = field(
        default_factory=_env,
        doc="Overrides of the tracking task: actions offset the default pose, the student's scan and command, "
        "the goal reward (validated).",
    )
    iterations: int = field(default=1000, doc="Phase A: DAgger + PPO iterations.")
    phase_a: str = field(
        default="hardest",
        doc="What phase A learns: 'hardest', the hardest accepted reference from the library stage's tracker; "
        "'every', every accepted physics-tracked reference, one lane each, labelled by its own round's tracker "
        "(the library entry's; the last round's tracker carried the 45 and 50 cm proposals in 0% of 32 "
        "trials, docs/experiments/2026-12-07-climb-45-60.md).",
    )
    trials: int = field(default=64, doc="Evaluation trials from the first frame, per policy (the same trials).")
    walk_in_m: float = field(
        default=0.35,
        doc="Also evaluated from standing starts up to this far behind the motion's start (phase B's env with "
        "this lead-in): how far before its box the skill can begin. 0: not evaluated.",
    )
    library: str = field(
        default="reference_augmentation",
        doc="Stage whose 'library' holds the skill's references and whose 'tracker' is its tracking expert.",
    )
    teacher: str = field(
        default="",
        doc="Upstream stage whose 'policy' (the locomotion teacher) walks for phase B's walking starts "
        "(generalization.env.walking_starts) and the walking-start evaluation; '': none.",
    )
    walking: WalkingStatesConfig = field(
        default_factory=WalkingStatesConfig, doc="How the teacher's walk is recorded (with a teacher)."
    )
    ppo: PPOConfig = field(default_factory=_ppo, doc="The learning rule: DAgger (dagger_coef) + lambda PPO (rl_coef).")
    actor: ActorConfig = field(default_factory=_actor, doc="The skill policy (no reference in its input).")
    critic: CriticConfig = field(default_factory=_critic, doc="Privileged critic (reads the reference too).")
    generalization: GeneralizationConfig = field(
        default_factory=GeneralizationConfig, doc="Phase B: PPO over every height of the skill in the library."
    )

    def validate(self, path: str) -> None:
        from llp.config.schema import merge

        self.check_training(path, "iterations", "trials")
        check(self.phase_a in PHASE_A, f"{path}.phase_a", f"{self.phase_a!r}: one of {', '.join(PHASE_A)}")
        gen = self.generalization
        check(gen.iterations >= 0, f"{path}.generalization.iterations", "must be >= 0")
        check(all(s > 0 for s in gen.lane_shares), f"{path}.generalization.lane_shares", "every share must be > 0")
        check(self.walk_in_m >= 0, f"{path}.walk_in_m", "must be >= 0")
        check(gen.ppo.dagger_coef == 0, f"{path}.generalization.ppo.dagger_coef", "phase B has no expert labels: 0")
        check(gen.ppo.rl_coef > 0, f"{path}.generalization.ppo.rl_coef", "phase B learns by PPO alone: > 0")
        check(gen.ppo.num_steps == self.ppo.num_steps, f"{path}.generalization.ppo.num_steps",
              f"must match phase A's rollout length {self.ppo.num_steps}")  # fmt: skip
        check(self.ppo.dagger_coef > 0, f"{path}.ppo.dagger_coef", "phase A learns from the tracking expert: > 0")
        task = checked_tracking_task(self.task, self.robot, self.env, path)
        check(task.action_offset == "default", f"{path}.env.action_offset", "a skill policy offsets the default pose")
        gen_task = checked_tracking_task(self.task, self.robot, merge(self.env, gen.env), path, "generalization.env")
        self.walking.validate(f"{path}.walking")
        check(task.walking_starts == 0, f"{path}.env.walking_starts", "phase A starts on its reference: 0")
        check(gen_task.walking_starts == 0 or self.teacher != "", f"{path}.generalization.env.walking_starts",
              "walking starts need a teacher stage to walk (teacher: locomotion_teacher)")  # fmt: skip
        produced = {g: list(t) for g, t in task.observations.items()}
        check_network_obs(self, self.task, produced, path)
        for i, ref in enumerate(self.actor.obs):
            check(
                ref.split("/", 1)[1] not in ("reference", "obstacle", "privileged"),
                f"{path}.actor.obs[{i}]",
                f"{ref!r}: the skill policy reads what the robot senses (no reference, obstacle or privileged term)",
            )


def skill_env(cfg: SkillExpertConfig, refs: list, tracker_specs: list[dict] = ()):
    """Phase A's training env: one lane per reference in ``refs`` (one, or every height), each the motion its
    tracker was trained on (the round's raised proposal; a tracker does not follow its own rollout kept as the
    entry's motion); checks that it gives every term each tracker (``tracker_specs``) reads."""
    from llp.motion.tracking import tracking_task

    untracked = [ref.id for ref in refs if ref.tracked is None]
    if untracked:
        raise ValueError(
            f"references {untracked} do not record the motion their tracker was trained on (a library "
            "grown before that was recorded: grow it again with the reference_augmentation stage)"
        )
    task = tracking_task(cfg.task, cfg.robot, cfg.env)
    env_cfg = lanes_env(task, refs, tracked=True)
    for spec in tracker_specs:
        for obs_ref in spec.get("obs", []):
            group, _, term = obs_ref.partition("/")
            if term not in task.observations.get(group, []):
                raise ValueError(f"the tracking expert reads {obs_ref!r}, which this stage's env does not give "
                                 f"({task.observations})")  # fmt: skip
    return env_cfg


def phase_a_teachers(ctx, cfg: SkillExpertConfig, refs: list, tracker_uri: str) -> tuple[list, list]:
    """(references, frozen trackers) phase A learns: the hardest reference and the stage's tracker, or every
    reference, each with its own round's tracker (``Reference.tracker``)."""
    if cfg.phase_a == "hardest":
        return refs[-1:], [ctx.frozen_policy(tracker_uri)]
    missing = [ref.id for ref in refs if not ref.tracker]
    if missing:
        raise ValueError(
            f"phase_a 'every' routes each reference's own tracker, and the library records none for {missing} "
            "(grown before trackers were registered per round: grow it again, or set phase_a: hardest)"
        )
    return refs, [ctx.frozen_policy(ref.tracker) for ref in refs]


def generalization_env(cfg: SkillExpertConfig, refs: list, walking_states=None):
    """Phase B's env: one lane per reference (their physics rollouts, each over its box), phase B's starts."""
    from llp.config.schema import merge
    from llp.motion.tracking import tracking_task

    task = tracking_task(cfg.task, cfg.robot, merge(cfg.env, cfg.generalization.env))
    return lanes_env(task, refs, walking_states, shares=check_lane_shares(cfg, refs))


def check_lane_shares(cfg: SkillExpertConfig, refs: list) -> list[float]:
    """Phase B's lane shares, one per reference (refused by name otherwise, before any training)."""
    shares = cfg.generalization.lane_shares
    if shares and len(shares) != len(refs):
        raise ValueError(f"generalization.lane_shares {shares} needs one share per accepted reference, lowest to "
                         f"highest: the library has {len(refs)} ({', '.join(r.id for r in refs)})")  # fmt: skip
    return shares


def run(ctx, cfg: SkillExpertConfig, inputs: dict[str, str]) -> dict[str, str]:
    """Phase A (DAgger + PPO from the tracking expert), then phase B (PPO over the library's heights); evaluate
    beside the expert; returns {'policy': models:/ URI}."""
    from dataclasses import replace

    from llp.actors.pool import TrainingPool
    from llp.learn.phases import Phase
    from llp.learn.spec import TeacherSpec, TrainSpec

    refs = skill_references(ctx.load_dataset(inputs["library"]), cfg.skill)
    check_lane_shares(cfg, refs)
    taught, trackers = phase_a_teachers(ctx, cfg, refs, inputs["tracker"])
    tracker = trackers[-1]  # the hardest reference's: evaluated as "tracking expert" on it
    env_cfg = skill_env(cfg, taught, [t.spec for t in trackers])
    walk = walking_states(ctx, inputs.get("teacher"), cfg.walking, cfg.robot, "walking")
    gen_cfg = generalization_env(cfg, refs, walk)
    a_iters, total = cfg.iterations, cfg.iterations + cfg.generalization.iterations
    learns = ", ".join(f"{r.id} ({100 * r.obstacle.height:.1f} cm {r.obstacle.kind}) from {t.uri}"
                       for r, t in zip(taught, trackers, strict=True))  # fmt: skip
    print(f"[llp] {ctx.stage}: phase A learns {learns}; phase B: {cfg.generalization.iterations} iterations over "
          f"{[r.id for r in refs]}", flush=True)  # fmt: skip
    ctx.init_ray()
    teachers = [TeacherSpec(t, lanes=[r.id]) for r, t in zip(taught, trackers, strict=True)]
    spec = TrainSpec(env=env_cfg, envs_per_actor=cfg.envs_per_actor, seed=ctx.seed, actor=cfg.actor,
                     critic=cfg.critic, ppo=cfg.ppo, teachers=teachers)  # fmt: skip
    held = {"pool": TrainingPool(ctx.resources, spec)}  # the pool in use (phase B switches it), closed at the end
    phase_a = None  # phase A's actor, evaluated after the stage (None when resumed past it)

    def to_phase_b(pool, resumed: bool):  # its env, no expert, PPO alone
        nonlocal phase_a
        if not resumed:
            phase_a = _actor(cfg, pool)
        held["pool"] = _switch_to_phase_b(ctx, cfg, pool, gen_cfg, start if resumed else a_iters, history,
                                          fresh_rate=not resumed)  # fmt: skip
        return held["pool"]

    phases = [Phase("A: DAgger from the tracking expert", a_iters, metrics={"phase/generalization": 0.0}),
              Phase("B: generalization", total - a_iters, to_phase_b, {"phase/generalization": 1.0})]  # fmt: skip
    try:
        start, history = ctx.restore_checkpoint(held["pool"])
        pool = ctx.train(held["pool"], phases, cfg.checkpoint_every, ("episode/return", "episode/length",
                         "loss/dagger"), start, history)  # fmt: skip
        actor, dims = _actor(cfg, pool), pool.spaces["obs_dims"]
    finally:
        held["pool"].close()
    ctx.log_learning_curve(history)
    uri = _register(ctx, actor, dims, env_cfg)
    favorable = skill_env(cfg, refs[-1:])  # the hardest reference in its first pose, whatever phase A learnt
    offset = tracker.spec.get("action_offset", "default")  # the expert runs in its own action terms
    expert = (tracker.uri, replace(favorable, task=replace(favorable.task, action_offset=offset)))
    still = (None, favorable)
    policies = {"tracking expert": expert, "skill policy": (uri, favorable), "default pose": still}
    if cfg.generalization.iterations:
        if phase_a is not None:
            policies["after phase A"] = (phase_a, favorable)
        else:  # resumed after the switch: phase A's networks are in no checkpoint of this run any more
            print(f"[llp] {ctx.stage}: resumed in phase B; phase A's policy is not evaluated", flush=True)
    _evaluate(ctx, cfg, policies, "favorable start")
    if cfg.generalization.iterations:
        starts = phase_b_starts(cfg, replace(gen_cfg, lane_shares=[]), walk)  # every height alike
        for protocol, env_b in starts.items():
            expert_b = (tracker.uri, replace(env_b, task=replace(env_b.task, action_offset=offset)))
            at_b = {k: (v[0], env_b) for k, v in policies.items() if k != "tracking expert"}
            _evaluate(ctx, cfg, {"tracking expert": expert_b, **at_b}, protocol)
    return {"policy": uri}


def phase_b_starts(cfg: SkillExpertConfig, gen_cfg, walk) -> dict:
    """Phase B's evaluation starts, protocol name -> env: standing on the motion's start; standing up to
    ``walk_in_m`` behind it (the clock waiting); with the teacher's walk (``walk``), walking in at it and, when
    phase B leads walking starts in, from that band behind it. Each sets every start option it does not use
    to off, so none inherits phase B's."""
    from dataclasses import replace

    standing = replace(gen_cfg.task, lead_in_m=0.0, walking_starts=0.0, walking_lead_in_m=0.0)
    starts = {"standing start": replace(gen_cfg, task=standing)}
    if cfg.walk_in_m > 0:  # and up to walk_in_m behind the motion's start, drawn from the whole range; a policy
        # that walks in keeps its own timing, so heights are not held to the reference's clock: the trial ends
        # on a tip-over or the hold, and succeeds as every trial does (the pelvis at the reference's end); the
        # clock waits for the pelvis (lead_in_speed 0) whatever phase B trained with
        loose = replace(gen_cfg.task.terminations, anchor_z=WALK_IN_UNHELD_Z, end_body_z=WALK_IN_UNHELD_Z)
        walk_in = replace(gen_cfg.task, lead_in_m=cfg.walk_in_m, lead_in_levels=0, lead_in_speed=0.0,
                          walking_starts=0.0, walking_lead_in_m=0.0, terminations=loose)  # fmt: skip
        starts["walk-in start"] = replace(gen_cfg, task=walk_in)
    if walk is not None:  # mid-stride at the motion's start, the teacher's pace: the course's handoff; a robot
        # that arrives walking keeps its own timing, so as the walk-in its heights are not held to the clock
        unheld = replace(gen_cfg.task.terminations, walking_unheld_z=WALK_IN_UNHELD_Z)
        walking = replace(gen_cfg.task, lead_in_m=0.0, walking_starts=1.0, walking_lead_in_m=0.0,
                          terminations=unheld)  # fmt: skip
        starts["walking start"] = replace(gen_cfg, task=walking)
        if gen_cfg.task.walking_lead_in_m > 0:  # and from the band behind it that phase B walks in from, as
            # the course's robot arrives (success per third of the distance in the table and the log)
            band = replace(walking, walking_lead_in_m=gen_cfg.task.walking_lead_in_m)
            starts["walking lead-in"] = replace(gen_cfg, task=band)
    return starts


def _actor(cfg: SkillExpertConfig, pool):
    """The pool's current student as a local module (eval mode)."""
    from llp.learn.models import Actor

    actor = Actor(cfg.actor, pool.spaces["obs_dims"], pool.spaces["num_actions"])
    actor.load_state_dict(pool.actor_state())
    return actor.eval()


def _switch_to_phase_b(ctx, cfg: SkillExpertConfig, pool, gen_cfg, it: int, history: list, fresh_rate: bool):
    """A pool over phase B's env with no expert, holding ``pool``'s whole training state, under phase B's rule
    (a fresh learning rate at the switch; a resumed phase B keeps its checkpoint's)."""
    from dataclasses import replace

    from llp.actors.pool import TrainingPool

    handover = ctx.checkpoint_dir() / "phase-switch.pt"
    pool.save(str(handover), it - 1, history)
    pool.close()
    new = TrainingPool(ctx.resources, replace(pool.spec, env=gen_cfg, teachers=[], ppo=cfg.generalization.ppo))
    new.load(str(handover))  # networks, normalisers, optimiser (and, resumed, phase B's learning rate)
    if fresh_rate:
        new.set_rule(cfg.generalization.ppo, fresh_learning_rate=True)
    print(f"[llp] {ctx.stage}: phase B from iteration {it}: PPO alone over {gen_cfg.task.start_posture} starts "
          f"on {1 + len(gen_cfg.lanes)} references", flush=True)  # fmt: skip
    return new


def _register(ctx, actor, dims, env_cfg) -> str:
    from llp.learn.export import example_input, export_actor

    module, spec = export_actor(actor, dims, **tracking_deployment_fields(env_cfg.task))
    return ctx.register_policy("policy", module, spec.to_dict(), example_input(spec))


def _evaluate(ctx, cfg: SkillExpertConfig, policies: dict, protocol: str) -> None:
    """Each policy (a URI, a local actor, or None: the default pose) on the same ``cfg.trials`` fresh trials from
    the first frame, spread over the env's lanes; metrics eval/<who>/... for the favorable start (the hardest
    reference in its first pose), eval/standing_start/<who>/... for phase B's start on the motion's start,
    eval/walk-in_start/<who>/... from up to ``walk_in_m`` behind it, eval/walking_start/... and
    eval/walking_lead-in/... walking in at it and from up to ``walking_lead_in_m`` behind it; a table per
    protocol with each lane's success and, for starts behind the motion's, the success per band of distance."""
    from llp.motion.tracking_env import TrackingEnv
    from llp.skills.trials import run_trials

    table = {}
    prefix = "eval/" if protocol == "favorable start" else f"eval/{protocol.replace(' ', '_')}/"
    for who, (model, env_cfg) in policies.items():
        if model is None:
            actor = DefaultPose(TrackingEnv(env_cfg, 1).num_actions)
        elif isinstance(model, str):
            actor = ctx.frozen_policy(model).load()
        else:
            actor = model
        trials = run_trials(env_cfg, actor, cfg.trials, seed=ctx.seed + 104729)
        n = len(trials)
        row = {
            "model": model if isinstance(model, str) else ("baseline:default-pose" if model is None else "phase A"),
            "trials": n,
            "success_rate": sum(t["success"] for t in trials) / n,
            "fall_rate": sum(t["fell"] for t in trials) / n,
            "mean_frames": sum(t["frames"] for t in trials) / n,
            "tracking_error_m": sum(t["tracking_error_m"] for t in trials) / n,
        }
        by_band = success_by_lead_in(trials, lead_in_reach(env_cfg.task))
        if by_band:
            row["success_by_lead_in"] = by_band
        lanes = sorted({t["reference_id"] for t in trials})
        if len(lanes) > 1:
            row["success_by_reference"] = {
                ref: sum(t["success"] for t in trials if t["reference_id"] == ref)
                / sum(t["reference_id"] == ref for t in trials)
                for ref in lanes
            }
        table[who] = row
        key = prefix + who.replace(" ", "_")
        numbers = {k: v for k, v in row.items() if isinstance(v, float | int) and k != "trials"}
        ctx.log_metrics({f"{key}/{k}": float(v) for k, v in numbers.items()}, step=0)
        print(f"[llp] {ctx.stage}: {protocol}: {who}: {100 * row['success_rate']:.0f}% of {n} trials succeed, "
              f"{100 * row['fall_rate']:.0f}% fall{lead_in_words(by_band)}", flush=True)  # fmt: skip
    ctx.log_json(table, f"evaluation/skill_{protocol.replace(' ', '_')}.json")
