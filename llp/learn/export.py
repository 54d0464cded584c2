"""Deployable policies: an inference module without training parts, plus the spec needed to feed it.

The exported module maps the stacked raw observation frames [B, K*D] to action
means [B, A] (normalisation inside; no sampling, no critic, no reconstruction
decoder). ``PolicySpec`` says which observation terms, in which order, how many
frames, and what the actions mean. ``LoadedPolicy`` wraps any such module back
into the interface rollouts use (frame history per env), so a registered
teacher can label states or be evaluated.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from llp.learn.memory import Memory, stack_frames
from llp.learn.models import Actor, gather, parse_refs


@dataclass
class PolicySpec:
    obs: list[str]  # 'group/term' in concatenation order
    obs_dim: int  # width of one frame
    num_frames: int
    num_actions: int
    recurrent: bool = False
    robot: str = ""
    action_scale: float = 0.25
    policy_dt: float = 0.02
    default_joint_pos: list[float] | None = None  # every actuated joint, in actuator order
    action_joints: list[str] | None = None  # the joints the actions drive, in action order (None: all)

    def to_dict(self) -> dict:
        return asdict(self)


class DeployableMLP(nn.Module):
    """Normalise each frame, flatten the stack, MLP -> action mean."""

    def __init__(self, actor: Actor):
        super().__init__()
        if actor.is_recurrent:
            raise ValueError("exporting recurrent policies is not supported yet (it comes with the depth student)")
        self.num_frames, self.obs_dim = actor.num_frames, actor.obs_dim
        self.normalizer = copy.deepcopy(actor.normalizer)
        self.head = copy.deepcopy(actor.head)

    def forward(self, stacked: torch.Tensor) -> torch.Tensor:
        frames = stacked.reshape(stacked.shape[0], self.num_frames, self.obs_dim)
        return self.head(self.normalizer(frames).reshape(stacked.shape[0], -1))


def export_actor(actor: Actor, **spec_fields) -> tuple[nn.Module, PolicySpec]:
    module = DeployableMLP(actor).eval()
    spec = PolicySpec(
        obs=list(actor.cfg.obs),
        obs_dim=actor.obs_dim,
        num_frames=actor.num_frames,
        num_actions=actor.num_actions,
        recurrent=actor.is_recurrent,
        **spec_fields,
    )
    return module, spec


class LoadedPolicy:
    """A deployable module behind the rollout interface: ``observe``, ``initial_memory``, ``step``."""

    is_recurrent = False

    def __init__(self, module: nn.Module, spec: PolicySpec):
        self.module, self.spec = module, spec
        self.refs = parse_refs(spec.obs)
        self.num_frames, self.obs_dim, self.num_actions = spec.num_frames, spec.obs_dim, spec.num_actions

    def observe(self, obs: dict) -> torch.Tensor:
        return gather(obs, self.refs)

    def initial_memory(self, num_envs: int) -> Memory:
        if self.num_frames == 1:
            return Memory()
        return Memory(
            frames=torch.zeros(num_envs, self.num_frames - 1, self.obs_dim),
            fresh=torch.ones(num_envs, dtype=torch.bool),
        )

    @torch.no_grad()
    def step(self, frame: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, Memory, None]:
        stacked, memory = stack_frames(frame, memory, self.num_frames)
        return self.module(stacked.reshape(stacked.shape[0], -1)), memory, None


def load_pt2(program: bytes, spec: dict) -> LoadedPolicy:
    """A policy from the bytes of its torch.export program and its spec (see ``flows.tracking.download_policy``)."""
    import io

    module = torch.export.load(io.BytesIO(program)).module()
    return LoadedPolicy(module, PolicySpec(**spec))
