"""What a training stage asks of the one training path, typed end to end.

A stage builds one ``TrainSpec``: the env it trains in, the networks, the
learning rule (PPO, DAgger and reconstruction coefficients live in
``PPOConfig``), the frozen teachers that label states for DAgger (each for the
envs of its tile types), the reward groups (one value head each) and the
optional phase-conditional AMP. The same spec goes, unchanged, to simulator
actors, to the learner actor and to co-located actors; nothing is re-typed from
dicts on the way.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from llp.learn.configs import ActorConfig, AMPConfig, CriticConfig, PPOConfig
from llp.motion.tracking import TrackingEnvConfig
from llp.sim.config import EnvConfig


@dataclass
class FrozenPolicy:
    """A registered policy as Ray can ship it: its torch.export program and its spec (the loaded module does
    not pickle). ``load()`` gives the rollout interface."""

    uri: str
    program: bytes
    spec: dict

    def load(self):
        from llp.learn.export import load_pt2

        return load_pt2(self.program, self.spec)


@dataclass
class TeacherSpec:
    """A frozen expert and its env group: the envs on ``tile_types`` (all envs when None)."""

    policy: FrozenPolicy
    tile_types: list[str] | None = None


@dataclass
class AMPSpec:
    """Phase-conditional AMP: config, one set of reference transitions [M, 2F] per phase, and the observation
    terms that give the features F of a state and its course progress (metres past the first trigger)."""

    cfg: AMPConfig
    references: list[torch.Tensor]
    features: str = "amp/amp_features"
    progress: str = "amp/progress"


@dataclass
class TrainSpec:
    env: EnvConfig | TrackingEnvConfig  # terrain courses, or tracking one motion reference (stage 2)
    envs_per_actor: int
    seed: int
    actor: ActorConfig
    critic: CriticConfig | None
    ppo: PPOConfig
    reward_groups: list[list[str]] | None = None  # reward term names per value head; None = one total reward
    teachers: list[TeacherSpec] = field(default_factory=list)
    amp: AMPSpec | None = None

    def __post_init__(self) -> None:
        heads = 1 if not self.reward_groups else len(self.reward_groups)
        if len(self.ppo.advantage_weights) != heads:
            raise ValueError(
                f"{heads} reward group(s) need {heads} advantage weight(s), got {self.ppo.advantage_weights}"
            )
        if self.critic is not None and self.critic.num_heads != heads:
            raise ValueError(f"{heads} reward group(s) need a critic with {heads} value heads")
        if self.ppo.dagger_coef > 0 and not self.teachers:
            raise ValueError("dagger_coef > 0 needs at least one teacher")
        known = set(self.env.terrain.tile_types) if hasattr(self.env, "terrain") else set()
        for t in self.teachers:
            unknown = [x for x in t.tile_types or [] if x not in known]
            if unknown:
                raise ValueError(f"teacher {t.policy.uri}: tile types {unknown} are not in the env ({sorted(known)})")
        if self.amp is not None and len(self.amp.references) != len(self.amp.cfg.triggers) + 1:
            raise ValueError("AMP needs one reference set per phase (len(triggers) + 1)")
