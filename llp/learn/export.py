"""Deployable policies: an inference module without training parts, plus the spec needed to feed it.

The exported module maps the stacked raw observation frames [B, K*D] to action
means [B, A] (normalisation inside; no sampling, no critic, no reconstruction
decoder). A recurrent policy carries its GRU state in the same tensor: input
[B, K*D + L*H] (frames, then the state of each of its L layers), output
[B, A + L*H] (actions, then the next state), so one registered program serves
both kinds. ``PolicySpec`` says which observation terms, in which order, how
many frames, what the actions mean and, for deployment, the PD gains and the
camera. ``LoadedPolicy`` wraps any such module back into the interface rollouts
use (frame history and GRU state per env), so a registered policy can label
states or be evaluated.
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
    gru_layers: int = 0  # recurrent policies: GRU layers L and hidden size H of the state they carry
    gru_hidden: int = 0
    obs_layout: list[list] | None = None  # [['group/term', width], ...]: where each term sits in a frame
    pd_gains: dict | None = None  # {'kp': [...], 'kd': [...]} per actuated joint, actuator order
    camera: dict | None = None  # the depth camera it reads: resolution, field of view, clip, camera model
    # joint target = offset + action_scale x action, where the offset is the default pose ('default') or, for a
    # motion tracker, the reference's next joint positions ('reference')
    action_offset: str = "default"
    # order and scale of the proprioception's first blocks (llp.sim.proprio); None: recorded before layouts were
    proprio_layout: str | None = None
    # what the program bytes are: 'pt2' (a registered torch.export program) or 'onnx' (the deployable file, run
    # with onnxruntime; its spec comes from the deployable's policy.json)
    format: str = "pt2"

    def to_dict(self) -> dict:
        return asdict(self)


class DeployableMLP(nn.Module):
    """Normalise each frame, flatten the stack, MLP -> action mean."""

    def __init__(self, actor: Actor):
        super().__init__()
        if actor.is_recurrent:
            raise ValueError("a recurrent actor exports as DeployableGRU")
        self.num_frames, self.obs_dim = actor.num_frames, actor.obs_dim
        self.normalizer = copy.deepcopy(actor.normalizer)
        self.head = copy.deepcopy(actor.head)

    def forward(self, stacked: torch.Tensor) -> torch.Tensor:
        frames = stacked.reshape(stacked.shape[0], self.num_frames, self.obs_dim)
        return self.head(self.normalizer(frames).reshape(stacked.shape[0], -1))


class DeployableGRU(nn.Module):
    """MLP -> GRU -> MLP with its state in the tensor: [B, K*D + L*H] -> [B, A + L*H]. The reconstruction
    decoder is a training aid and is left out."""

    def __init__(self, actor: Actor):
        super().__init__()
        if not actor.is_recurrent:
            raise ValueError("a feed-forward actor exports as DeployableMLP")
        self.num_frames, self.obs_dim = actor.num_frames, actor.obs_dim
        self.layers, self.hidden = actor.cfg.gru_layers, actor.cfg.gru_hidden
        self.normalizer = copy.deepcopy(actor.normalizer)
        self.encoder = copy.deepcopy(actor.encoder)
        self.gru = copy.deepcopy(actor.gru)
        self.head = copy.deepcopy(actor.head)

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        b, width = packed.shape[0], self.num_frames * self.obs_dim
        frames = packed[:, :width].reshape(b, self.num_frames, self.obs_dim)
        state = packed[:, width:].reshape(b, self.layers, self.hidden).transpose(0, 1).contiguous()
        out, state = self.gru(self.encoder(self.normalizer(frames).reshape(b, -1))[None], state)
        return torch.cat([self.head(out[0]), state.transpose(0, 1).reshape(b, -1)], dim=1)


def export_actor(actor: Actor, obs_dims: dict | None = None, **spec_fields) -> tuple[nn.Module, PolicySpec]:
    """The actor's inference module and spec; ``obs_dims`` ({group: {term: width}}) adds the frame layout."""
    module = (DeployableGRU(actor) if actor.is_recurrent else DeployableMLP(actor)).eval()
    layout = None
    if obs_dims is not None:
        layout = [[ref, obs_dims[ref.split("/")[0]][ref.split("/")[1]]] for ref in actor.cfg.obs]
    spec = PolicySpec(
        obs=list(actor.cfg.obs),
        obs_dim=actor.obs_dim,
        num_frames=actor.num_frames,
        num_actions=actor.num_actions,
        recurrent=actor.is_recurrent,
        gru_layers=actor.cfg.gru_layers if actor.is_recurrent else 0,
        gru_hidden=actor.cfg.gru_hidden if actor.is_recurrent else 0,
        obs_layout=layout,
        **spec_fields,
    )
    return module, spec


def example_input(spec: PolicySpec, batch: int = 2):
    """A zero input of the module's width (a batch of 2 keeps the batch dimension dynamic when exported)."""
    import numpy as np

    width = spec.num_frames * spec.obs_dim + spec.gru_layers * spec.gru_hidden
    return np.zeros((batch, width), dtype=np.float32)


def fresh_memory(spec: PolicySpec, num_envs: int) -> Memory:
    """What a policy of ``spec`` carries at the start of an episode: no frames seen, a zero GRU state."""
    hidden = torch.zeros(spec.gru_layers, num_envs, spec.gru_hidden) if spec.recurrent else None
    if spec.num_frames == 1:
        return Memory(hidden=hidden)
    return Memory(
        frames=torch.zeros(num_envs, spec.num_frames - 1, spec.obs_dim),
        fresh=torch.ones(num_envs, dtype=torch.bool),
        hidden=hidden,
    )


class LoadedPolicy:
    """A deployable module behind the rollout interface: ``observe``, ``initial_memory``, ``step``."""

    def __init__(self, module: nn.Module, spec: PolicySpec):
        self.module, self.spec = module, spec
        self.refs = parse_refs(spec.obs)
        self.num_frames, self.obs_dim, self.num_actions = spec.num_frames, spec.obs_dim, spec.num_actions
        self.is_recurrent = spec.recurrent

    def observe(self, obs: dict) -> torch.Tensor:
        return gather(obs, self.refs)

    def initial_memory(self, num_envs: int) -> Memory:
        return fresh_memory(self.spec, num_envs)

    @torch.no_grad()
    def step(self, frame: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, Memory, None]:
        stacked, memory = stack_frames(frame, memory, self.num_frames)
        x = stacked.reshape(stacked.shape[0], -1)
        if not self.is_recurrent:
            return self.module(x), memory, None
        n = x.shape[0]
        y = self.module(torch.cat([x, memory.hidden.transpose(0, 1).reshape(n, -1)], dim=1))
        hidden = y[:, self.num_actions :].reshape(n, self.spec.gru_layers, self.spec.gru_hidden).transpose(0, 1)
        return y[:, : self.num_actions], Memory(frames=memory.frames, fresh=memory.fresh, hidden=hidden), None


def load_pt2(program: bytes, spec: dict) -> LoadedPolicy:
    """A policy from the bytes of its torch.export program and its spec (see ``flows.tracking.download_policy``)."""
    import io

    module = torch.export.load(io.BytesIO(program)).module()
    return LoadedPolicy(module, PolicySpec(**spec))
