"""LLP stage 1: the perceptive locomotion teacher.

PPO on the locomotion terrains (rough ground, stairs up and down): the actor
reads proprioception, the velocity command and the height scan over 5 stacked
frames; the critic additionally reads privileged terms (base velocity and
height, contacts, randomised physics). Trained on the stage's Ray actor pool,
checkpointed every ``checkpoint_every`` iterations, registered as
``llp-locomotion-teacher``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llp.config.schema import check, field
from llp.config.stage import TrainingStageConfig
from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
from llp.stages.common import check_network_obs, checked_env_config, deployment_fields


def _actor() -> ActorConfig:
    return ActorConfig(obs=["policy/proprio", "policy/command", "policy/height_scan"], num_frames=5)


def _critic() -> CriticConfig:
    return CriticConfig(obs=["critic/proprio", "critic/command", "critic/height_scan", "critic/privileged"])


@dataclass(kw_only=True)
class LocomotionTeacherConfig(TrainingStageConfig):
    """Budget and learning setup of the locomotion teacher."""

    iterations: int = field(default=1500, doc="PPO iterations.")
    ppo: PPOConfig = field(default_factory=PPOConfig, doc="PPO settings.")
    actor: ActorConfig = field(default_factory=_actor, doc="Policy network (5 stacked frames, as the paper).")
    critic: CriticConfig = field(default_factory=_critic, doc="Privileged critic.")

    def validate(self, path: str) -> None:
        self.check_training(path, "iterations")
        per_actor = self.envs_per_actor * self.ppo.num_steps
        check(
            self.ppo.num_minibatches <= per_actor,
            f"{path}.ppo.num_minibatches",
            f"{self.ppo.num_minibatches} minibatches cannot split a rollout of {per_actor} steps per actor "
            f"(envs_per_actor x num_steps)",
        )
        env = checked_env_config(self.task, self.robot, self.env, path)
        produced = {group: list(terms) for group, terms in env.observations.items()}
        check_network_obs(self, self.task, produced, path)


def run(ctx, cfg: LocomotionTeacherConfig, inputs: dict[str, str]) -> dict[str, str]:
    """Train the teacher on the stage's actor pool; returns {'policy': models:/llp-locomotion-teacher/<v>}."""
    from llp.actors.pool import TrainingPool
    from llp.learn.export import example_input, export_actor
    from llp.learn.models import Actor
    from llp.learn.spec import TrainSpec

    env_cfg = checked_env_config(cfg.task, cfg.robot, cfg.env, "env")
    ctx.init_ray()
    spec = TrainSpec(
        env=env_cfg,
        envs_per_actor=cfg.envs_per_actor,
        seed=ctx.seed,
        actor=cfg.actor,
        critic=cfg.critic,
        ppo=cfg.ppo,
    )
    pool = TrainingPool(ctx.resources, spec)
    try:
        start, history = ctx.restore_checkpoint(pool)
        ctx.train(pool, cfg.iterations, cfg.checkpoint_every, ("episode/return", "episode/length"), start, history)
        actor = Actor(cfg.actor, pool.spaces["obs_dims"], pool.spaces["num_actions"])
        actor.load_state_dict(pool.actor_state())
    finally:
        pool.close()
    ctx.log_learning_curve(history)
    module, policy_spec = export_actor(actor, pool.spaces["obs_dims"], **deployment_fields(env_cfg))
    return {"policy": ctx.register_policy("policy", module, policy_spec.to_dict(), example_input(policy_spec))}
