"""What a training stage asks of the one training path, typed end to end.

A stage builds one ``TrainSpec``: the env it trains in, the networks, the
learning rule (PPO, DAgger and reconstruction coefficients live in
``PPOConfig``), the frozen teachers that label states for DAgger (each for the
envs of its tile types, or of its references in a tracking env), the reward groups (one value head each) and the
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
    """A registered policy as Ray can ship it: its torch.export program (or, for the deployable files, its ONNX
    file) and its spec (the loaded module does not pickle). ``load()`` gives the rollout interface."""

    uri: str
    program: bytes
    spec: dict

    def load(self):
        from llp.learn.deployable import load_program

        return load_program(self.program, self.spec)


@dataclass
class TeacherSpec:
    """A frozen expert and its env group: the envs on ``tile_types`` of a terrain env, or on the references
    ``lanes`` of a tracking env (their ids; each lane's tracker labels its own), all envs when None."""

    policy: FrozenPolicy
    tile_types: list[str] | None = None
    lanes: list[str] | None = None


@dataclass
class AMPSpec:
    """Phase-conditional AMP: config, one set of reference transitions [M, 2F] per phase, and the observation
    terms that give the features F of a state and its course progress (metres past the first trigger)."""

    cfg: AMPConfig
    references: list[torch.Tensor]
    features: str = "amp/amp_features"
    progress: str = "amp/progress"


@dataclass
class EnvGroup:
    """One env group of a multi-group stage (the merge): its env and the experts that label its envs. Each
    simulator actor hosts one group; the learner joins every group's rollouts."""

    name: str
    env: EnvConfig | TrackingEnvConfig
    teachers: list[TeacherSpec] = field(default_factory=list)
    rl: bool = True  # PPO's loss (rl_coef > 0) covers this group's envs; False: its experts' labels alone
    amp: bool = False  # the AMP prior (TrainSpec.amp) rewards and judges this group's envs (an RL group's)


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
    groups: list[EnvGroup] = field(default_factory=list)  # several envs, one per simulator actor (env: the first's)
    group: tuple[int, int] | None = None  # (index, count): the group a simulator actor hosts (set by for_actor)

    def for_actor(self, index: int, actors: int) -> TrainSpec:
        """What simulator actor ``index`` of ``actors`` hosts: group ``index mod len(groups)``'s env and experts
        (the spec itself without groups)."""
        if not self.groups:
            return self
        from dataclasses import replace

        k = index % len(self.groups)
        group = self.groups[k]
        return replace(self, env=group.env, teachers=list(group.teachers), amp=self.amp if group.amp else None,
                       groups=[], group=(k, len(self.groups)))  # fmt: skip

    def group_of(self, index: int) -> int | None:
        """The group index of simulator actor ``index`` (None without groups)."""
        return index % len(self.groups) if self.groups else None

    def rl_envs(self, envs_per_actor: int, actors: int):
        """[N] bool over the envs of ``actors`` simulator actors: which PPO's loss covers (None: all of them)."""
        return self._per_env("rl", envs_per_actor, actors)

    def amp_envs(self, envs_per_actor: int, actors: int):
        """[N] bool over the envs of ``actors`` simulator actors: which the AMP prior covers (None: all of them)."""
        return self._per_env("amp", envs_per_actor, actors) if self.amp is not None else None

    def _per_env(self, flag: str, envs_per_actor: int, actors: int):
        if not self.groups or all(getattr(g, flag) for g in self.groups):
            return None
        per_actor = [getattr(self.groups[self.group_of(k)], flag) for k in range(actors)]
        return torch.tensor([on for on in per_actor for _ in range(envs_per_actor)])

    def __post_init__(self) -> None:
        label = [r for r in self.actor.obs if r.startswith("group/")]
        if label:
            raise ValueError(f"the actor reads {label}: only a critic may know an env's group")
        if self.groups:
            names = [g.name for g in self.groups]
            if len(set(names)) != len(names):
                raise ValueError(f"env groups need distinct names, got {names}")
            if self.teachers:
                raise ValueError("with env groups, each group names its own teachers (TrainSpec.teachers stays empty)")
            if (self.amp is not None) != any(g.amp for g in self.groups):
                raise ValueError("an AMP prior needs an env group it covers (EnvGroup.amp), and such a group a prior")
            not_rl = [g.name for g in self.groups if g.amp and not g.rl]
            if not_rl:
                raise ValueError(f"env groups {not_rl}: the AMP prior's style reward needs a group that learns by RL")
            self.env = self.groups[0].env
            if self.ppo.rl_coef > 0 and not any(g.rl for g in self.groups):
                raise ValueError("rl_coef > 0 but no env group learns by RL (EnvGroup.rl)")
            if self.ppo.dagger_coef > 0 and not any(g.teachers for g in self.groups):
                raise ValueError("dagger_coef > 0 needs at least one env group with a teacher")
            for k in range(len(self.groups)):
                self.for_actor(k, len(self.groups))  # each group's env and teachers pass the single-env checks
            return
        heads = 1 if not self.reward_groups else len(self.reward_groups)
        if len(self.ppo.advantage_weights) != heads:
            raise ValueError(
                f"{heads} reward group(s) need {heads} advantage weight(s), got {self.ppo.advantage_weights}"
            )
        if self.critic is not None and self.critic.num_heads != heads:
            raise ValueError(f"{heads} reward group(s) need a critic with {heads} value heads")
        if self.ppo.dagger_coef > 0 and not self.teachers and self.group is None:  # a group may have none
            raise ValueError("dagger_coef > 0 needs at least one teacher")
        terrain = hasattr(self.env, "terrain")
        known = set(self.env.terrain.tile_types) if terrain else set()
        lanes = set() if terrain else {lane.reference_id for lane in self.env.references()}
        for t in self.teachers:
            unknown = [x for x in t.tile_types or [] if x not in known]
            if unknown:
                raise ValueError(f"teacher {t.policy.uri}: tile types {unknown} are not in the env ({sorted(known)})")
            unknown = [x for x in t.lanes or [] if x not in lanes]
            if unknown:
                where = f"the tracking env's lanes ({sorted(lanes)})" if lanes else "a terrain env (no lanes)"
                raise ValueError(f"teacher {t.policy.uri}: lanes {unknown} are not in {where}")
        if self.amp is not None and len(self.amp.references) != len(self.amp.cfg.triggers) + 1:
            raise ValueError("AMP needs one reference set per phase (len(triggers) + 1)")
