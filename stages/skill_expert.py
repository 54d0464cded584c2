"""LLP stage 3, a single-skill expert (phase A: learning the skill from its tracking expert).

The skill policy sees what a parkour policy sees on the robot's computer: proprioception, the height scan
and a velocity command; no reference, no phase, no obstacle coordinates. It learns in the tracking env of the
skill's hardest accepted reference (the reference library of stage 2): the tracking expert, hosted frozen in
every simulator actor, labels each state the student visits (online DAgger), while PPO adds the tracking
kernels, a goal reward and the penalties of the tracking task (loss = DAgger + lambda x PPO, LLP).

The expert's actions correct the reference's next joint targets; the student's, like every parkour policy's,
offset the default pose. The env re-expresses the expert's labels (and the last action it reads) so that
both mean the same joint targets (``TrackingEnv.convert_actions``, ``teacher_obs``).

Evaluated in the stage on fresh trials from the motion's first frame (the "favorable start" of the paper's
critics): the tracking expert, the skill policy, and the default pose held under PD, on the same trials.
Success: the motion carried through and its final pose held for ``hold_s`` with the pelvis within
``success_distance`` of the reference's (on top of the box, standing).

Not built yet: phase B (generalisation over the library's obstacle range, without expert labels, starts in the
locomotion teacher's posture), the vaults (no vault seeds are authored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field
from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
from llp.stages.common import check_network_obs, tracking_deployment_fields

STUDENT_OBS = ["policy/proprio", "policy/height_scan", "policy/command"]


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


@dataclass(kw_only=True)
class SkillExpertConfig:
    """Which skill, the env around its reference, the student's networks and budget."""

    skill: str = field(default="climb_step", doc="Skill of the library entries it learns (its hardest accepted).")
    task: str = field(default="tracking", doc="Tracking task config (conf/task/), with env's overrides.")
    robot: str = field(default="lightbot0_like", doc="Robot config (conf/robot/).")
    env: dict[str, Any] = field(
        default_factory=_env,
        doc="Overrides of the tracking task: actions offset the default pose, the student's scan and command, "
        "the goal reward (validated).",
    )
    envs_per_actor: int = field(default=64, doc="Envs in each simulator actor.")
    iterations: int = field(default=1000, doc="DAgger + PPO iterations.")
    checkpoint_every: int = field(default=100, doc="Iterations between checkpoints (and metric uploads).")
    trials: int = field(default=64, doc="Evaluation trials from the first frame, per policy (the same trials).")
    retries: int = field(default=1, doc="Prefect retries of this stage (each resumes from its last checkpoint).")
    ppo: PPOConfig = field(default_factory=_ppo, doc="The learning rule: DAgger (dagger_coef) + lambda PPO (rl_coef).")
    actor: ActorConfig = field(default_factory=_actor, doc="The skill policy (no reference in its input).")
    critic: CriticConfig = field(default_factory=_critic, doc="Privileged critic (reads the reference too).")

    def validate(self, path: str) -> None:
        from llp.config.schema import ConfigError
        from llp.motion.tracking import tracking_task

        for name in ("envs_per_actor", "iterations", "checkpoint_every", "trials"):
            check(getattr(self, name) >= 1, f"{path}.{name}", "must be >= 1")
        check(self.retries >= 0, f"{path}.retries", "must be >= 0")
        check(self.ppo.dagger_coef > 0, f"{path}.ppo.dagger_coef", "phase A learns from the tracking expert: > 0")
        try:
            task = tracking_task(self.task, self.robot, self.env)
        except ConfigError as err:
            where = err.path if err.path in ("task", "robot") else f"env.{err.path}"
            raise ConfigError(f"{path}.{where}", str(err).split(": ", 1)[-1]) from None
        check(task.action_offset == "default", f"{path}.env.action_offset", "a skill policy offsets the default pose")
        produced = {g: list(t) for g, t in task.observations.items()}
        check_network_obs(self, self.task, produced, path)
        for i, ref in enumerate(self.actor.obs):
            check(
                ref.split("/", 1)[1] not in ("reference", "obstacle", "privileged"),
                f"{path}.actor.obs[{i}]",
                f"{ref!r}: the skill policy reads what the robot senses (no reference, obstacle or privileged term)",
            )


def hardest_reference(library_dir, skill: str):
    """The accepted library entry of ``skill`` with the tallest obstacle (with its motion)."""
    from pathlib import Path

    from llp.motion.library import INDEX, ReferenceLibrary

    index = next(Path(library_dir).rglob(INDEX), None)
    if index is None:
        raise ValueError(f"{library_dir}: no reference library ({INDEX}) in the input dataset")
    library = ReferenceLibrary(index.parent)
    accepted = [e for e in library.entries if e.skill == skill and e.accepted and e.round > 0]
    if not accepted:
        have = sorted({f"{e.skill} ({e.id}, {'accepted' if e.accepted else 'rejected'})" for e in library.entries})
        raise ValueError(f"the reference library has no accepted physics-tracked {skill!r} entry (it has {have})")
    best = max(accepted, key=lambda e: (e.obstacle.height, e.round))
    return library.get(best.id, with_motion=True)


def skill_env(cfg: SkillExpertConfig, ref, tracker_spec: dict | None = None):
    """The training env around ``ref``: the motion its tracker was trained on (the round's raised proposal; the
    tracker does not follow its own rollout kept as the entry's motion); with ``tracker_spec``, checks that it
    gives every term the expert reads."""
    from llp.motion.tracking import TrackingEnvConfig, tracking_task

    if ref.tracked is None:
        raise ValueError(
            f"reference {ref.id} does not record the motion its tracker was trained on (a library "
            "grown before that was recorded: grow it again with the reference_augmentation stage)"
        )
    task = tracking_task(cfg.task, cfg.robot, cfg.env)
    env_cfg = TrackingEnvConfig(task=task, qpos=ref.tracked, fps=ref.fps, obstacle=ref.obstacle,
                                contacts=ref.contacts, reference_id=ref.id)  # fmt: skip
    for obs_ref in (tracker_spec or {}).get("obs", []):
        group, _, term = obs_ref.partition("/")
        if term not in task.observations.get(group, []):
            raise ValueError(f"the tracking expert reads {obs_ref!r}, which this stage's env does not give "
                             f"({task.observations})")  # fmt: skip
    return env_cfg


def run(ctx, cfg: SkillExpertConfig, inputs: dict[str, str]) -> dict[str, str]:
    """DAgger + PPO from the tracking expert; evaluate beside it; returns {'policy': models:/ URI}."""
    from dataclasses import replace

    from llp.actors.pool import TrainingPool
    from llp.learn.models import Actor
    from llp.learn.spec import TeacherSpec, TrainSpec

    ref = hardest_reference(ctx.load_dataset(inputs["library"]), cfg.skill)
    tracker = ctx.frozen_policy(inputs["tracker"])
    env_cfg = skill_env(cfg, ref, tracker.spec)
    print(f"[llp] {ctx.stage}: learning {ref.id} ({100 * ref.obstacle.height:.1f} cm {ref.obstacle.kind}) from "
          f"{tracker.uri}", flush=True)  # fmt: skip
    ctx.init_ray()
    spec = TrainSpec(env=env_cfg, envs_per_actor=cfg.envs_per_actor, seed=ctx.seed, actor=cfg.actor,
                     critic=cfg.critic, ppo=cfg.ppo, teachers=[TeacherSpec(tracker)])  # fmt: skip
    pool = TrainingPool(ctx.resources, spec)
    try:
        start, history = ctx.restore_checkpoint(pool)
        progress = ctx.progress(cfg.iterations, start)
        for it in range(start, cfg.iterations):
            metrics = pool.iteration()
            history.append({k: metrics[k] for k in ("episode/return", "episode/length", "loss/dagger") if k in metrics})
            ctx.log_iteration(metrics, step=it)
            progress.update(it, metrics)
            if (it + 1) % cfg.checkpoint_every == 0 or it + 1 == cfg.iterations:
                ctx.save_checkpoint(pool, it, history)
            ctx.fault_point(it, pool)
        actor = Actor(cfg.actor, pool.spaces["obs_dims"], pool.spaces["num_actions"])
        actor.load_state_dict(pool.actor_state())
        dims = pool.spaces["obs_dims"]
    finally:
        pool.close()
    ctx.log_learning_curve(history)
    uri = _register(ctx, actor, dims, env_cfg)
    offset = tracker.spec.get("action_offset", "default")  # the expert runs in its own action terms
    tracker_env = replace(env_cfg, task=replace(env_cfg.task, action_offset=offset))
    _evaluate(ctx, cfg, {"tracking expert": (tracker.uri, tracker_env), "skill policy": (uri, env_cfg),
                         "default pose": (None, env_cfg)})  # fmt: skip
    return {"policy": uri}


def _register(ctx, actor, dims, env_cfg) -> str:
    from llp.learn.export import example_input, export_actor

    module, spec = export_actor(actor, dims, **tracking_deployment_fields(env_cfg.task))
    return ctx.register_policy("policy", module, spec.to_dict(), example_input(spec))


class _Still:
    """The default pose held under PD: actions of 0 in an env whose actions offset the default pose."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions

    def initial_memory(self, n: int):
        return n

    def observe(self, obs):
        return obs

    def step(self, obs, memory):
        import torch

        return torch.zeros(memory, self.num_actions), memory, None


def _evaluate(ctx, cfg: SkillExpertConfig, policies: dict) -> None:
    """Each policy on the same ``cfg.trials`` fresh trials from the first frame; metrics eval/<who>/..., a table."""
    from llp.stages.reference_augmentation import run_trials

    table = {}
    for who, (uri, env_cfg) in policies.items():
        if uri is None:
            from llp.motion.tracking_env import TrackingEnv

            actor = _Still(TrackingEnv(env_cfg, 1).num_actions)
        else:
            actor = ctx.frozen_policy(uri).load()
        trials = run_trials(env_cfg, actor, cfg.trials, seed=ctx.seed + 104729)
        n = len(trials)
        row = {
            "model": uri or "baseline:default-pose",
            "trials": n,
            "success_rate": sum(t["success"] for t in trials) / n,
            "fall_rate": sum(t["fell"] for t in trials) / n,
            "mean_frames": sum(t["frames"] for t in trials) / n,
            "tracking_error_m": sum(t["tracking_error_m"] for t in trials) / n,
        }
        table[who] = row
        key = who.replace(" ", "_")
        ctx.log_metrics({f"eval/{key}/{k}": float(v) for k, v in row.items() if k not in ("model", "trials")}, step=0)
        print(f"[llp] {ctx.stage}: {who}: {100 * row['success_rate']:.0f}% of {n} trials succeed, "
              f"{100 * row['fall_rate']:.0f}% fall", flush=True)  # fmt: skip
    ctx.log_json(table, "evaluation/skill.json")
