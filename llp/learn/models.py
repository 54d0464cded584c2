"""Actor and critic networks over named observation terms.

* ``Actor``: normalised observation terms -> optional frame stack -> MLP, or
  MLP -> GRU -> MLP (the paper's depth student), with a Gaussian action
  distribution (rsl_rl's ``GaussianDistribution``) and an optional decoder that
  reconstructs a target (the teacher's height scan) from the recurrent state;
  the decoder is training-only and never exported.
* ``Critic``: MLP with one value head per reward group.

Built on rsl_rl's ``MLP``, ``EmpiricalNormalization`` and
``GaussianDistribution`` modules. rsl_rl's own ``RNNModel`` puts the RNN first
(RNN -> MLP); the paper's student needs an encoder before the GRU, so the
recurrent actor is assembled here from the same parts.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from rsl_rl.modules import MLP, EmpiricalNormalization
from rsl_rl.modules.distribution import GaussianDistribution

from llp.learn.configs import ActorConfig, CriticConfig
from llp.learn.memory import Memory, stack_frames

TermRef = tuple[str, str]  # (observation group, term)


def parse_refs(refs: list[str]) -> list[TermRef]:
    return [tuple(r.split("/", 1)) for r in refs]  # type: ignore[misc]


def gather(obs: dict[str, dict[str, torch.Tensor]], refs: list[TermRef]) -> torch.Tensor:
    """Concatenate the referenced terms of a nested observation dict along the last axis."""
    try:
        return torch.cat([obs[g][t] for g, t in refs], dim=-1)
    except KeyError as err:
        available = {g: list(terms) for g, terms in obs.items()}
        raise KeyError(f"observation term {err} not provided; the env gives {available}") from None


def term_width(dims: dict[str, dict[str, int]], refs: list[TermRef]) -> int:
    try:
        return sum(dims[g][t] for g, t in refs)
    except KeyError as err:
        raise KeyError(f"observation term {err} is not produced by the env (it gives {dims})") from None


def _init_policy_head(mlp: nn.Module) -> None:
    """Orthogonal init, gain sqrt(2) in hidden layers and 0.01 in the output (initial actions near zero)."""
    linears = [m for m in mlp if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        nn.init.orthogonal_(layer.weight, gain=0.01 if i == len(linears) - 1 else 2**0.5)
        nn.init.zeros_(layer.bias)


class _Normalizer(nn.Module):
    """Running normalisation, then a clip: a term that barely varies (a scan over flat ground) would
    otherwise turn tiny deviations into huge inputs."""

    def __init__(self, dim: int, enabled: bool, clip: float = 5.0):
        super().__init__()
        self.enabled, self.clip = enabled, clip
        self.norm = EmpiricalNormalization(dim) if enabled else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return x
        return self.norm(x).clamp(-self.clip, self.clip)

    def update(self, x: torch.Tensor) -> None:
        if self.enabled:
            update_normalization(self.norm, x.reshape(-1, x.shape[-1]))


def update_normalization(norm: EmpiricalNormalization, x: torch.Tensor) -> None:
    """rsl_rl's running-statistics update of ``norm`` with a batch x [B, D], written so that nothing crosses
    between host and device (rsl_rl builds the batch count from a host integer): the same numbers, and the
    same reduction over data-parallel learners."""
    if not norm.training:
        return
    count_x = torch.full((), x.shape[0], dtype=norm.count.dtype, device=x.device)
    var_x = torch.var(x, dim=0, unbiased=False, keepdim=True)
    mean_x = torch.mean(x, dim=0, keepdim=True)
    if torch.distributed.is_initialized():  # the global mean, then the local variances around it
        local_mean_x = mean_x
        torch.distributed.all_reduce(count_x)
        mean_sum_x = mean_x * x.shape[0]
        torch.distributed.all_reduce(mean_sum_x)
        mean_x = mean_sum_x / count_x
        var_sum_x = x.shape[0] * (var_x + (local_mean_x - mean_x).square())
        torch.distributed.all_reduce(var_sum_x)
        var_x = var_sum_x / count_x
    norm.count += count_x
    rate = count_x / norm.count
    delta_mean = mean_x - norm._mean
    norm._mean += rate * delta_mean
    norm._var += rate * (var_x - norm._var + delta_mean * (mean_x - norm._mean))
    norm._std = torch.sqrt(norm._var)


class Actor(nn.Module):
    """Gaussian policy; feed-forward (optionally frame-stacked) or MLP-GRU-MLP."""

    def __init__(self, cfg: ActorConfig, obs_dims: dict[str, dict[str, int]], num_actions: int):
        super().__init__()
        self.cfg = cfg
        self.refs = parse_refs(cfg.obs)
        self.obs_dim = term_width(obs_dims, self.refs)
        self.num_actions = num_actions
        self.num_frames = cfg.num_frames
        self.is_recurrent = cfg.gru_hidden > 0
        self.normalizer = _Normalizer(self.obs_dim, cfg.normalize_obs)
        in_dim = self.obs_dim * cfg.num_frames
        if self.is_recurrent:
            if cfg.encoder_dims:
                self.encoder = MLP(
                    in_dim,
                    cfg.encoder_dims[-1],
                    cfg.encoder_dims[:-1] or [cfg.encoder_dims[-1]],
                    cfg.activation,
                    last_activation=cfg.activation,
                )
                gru_in = cfg.encoder_dims[-1]
            else:
                self.encoder = nn.Identity()
                gru_in = in_dim
            self.gru = nn.GRU(gru_in, cfg.gru_hidden, cfg.gru_layers)
            head_in = cfg.gru_hidden
        else:
            head_in = in_dim
        self.head = MLP(head_in, num_actions, cfg.hidden_dims, cfg.activation)
        _init_policy_head(self.head)
        self.distribution = GaussianDistribution(num_actions, init_std=cfg.init_std)
        self.recon_ref = parse_refs([cfg.reconstruct])[0] if cfg.reconstruct else None
        if self.recon_ref is not None:
            recon_dim = term_width(obs_dims, [self.recon_ref])
            self.decoder = MLP(cfg.gru_hidden, recon_dim, cfg.decoder_dims, cfg.activation)
        else:
            self.decoder = None

    # ------------------------------------------------------------------ memory
    def initial_memory(self, num_envs: int) -> Memory:
        """An empty memory for ``num_envs`` envs, on the device of the actor's weights."""
        frames = fresh = hidden = None
        dev = next(self.parameters()).device
        if self.num_frames > 1:
            frames = torch.zeros(num_envs, self.num_frames - 1, self.obs_dim, device=dev)
            fresh = torch.ones(num_envs, dtype=torch.bool, device=dev)
        if self.is_recurrent:
            hidden = torch.zeros(self.cfg.gru_layers, num_envs, self.cfg.gru_hidden, device=dev)
        return Memory(frames=frames, fresh=fresh, hidden=hidden)

    # ------------------------------------------------------------------ forward
    def observe(self, obs: dict) -> torch.Tensor:
        """Raw (unnormalised) input frame [N, obs_dim] from a nested observation dict."""
        return gather(obs, self.refs)

    def _features(self, frames: torch.Tensor) -> torch.Tensor:
        """Normalise a stack [B, K, D] and flatten -> [B, K*D]."""
        return self.normalizer(frames).reshape(frames.shape[0], -1)

    def step(self, frame: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, Memory, torch.Tensor | None]:
        """One step for every env: frame [N, D] -> action mean [N, A], next memory, GRU output [N, H] or None."""
        stacked, memory = stack_frames(frame, memory, self.num_frames)
        x = self._features(stacked)
        latent = None
        if self.is_recurrent:
            out, hidden = self.gru(self.encoder(x)[None], memory.hidden)
            latent = out[0]
            memory = Memory(frames=memory.frames, fresh=memory.fresh, hidden=hidden)
            x = latent
        return self.head(x), memory, latent

    def sequence(
        self, frames: torch.Tensor, memory: Memory, dones: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Replay a window: frames [T, N, D] from ``memory`` (the state before step 0), ``dones`` [T, N] marks
        steps after which the env was reset. Returns means [T, N, A] and GRU outputs [T, N, H] or None.

        Gives exactly what ``step`` gives when called T times with resets after done steps.
        """
        T = frames.shape[0]
        latents: list[torch.Tensor] = []
        if not self.is_recurrent:
            # feed-forward: only the frame history carries over; stack per step, then one batched MLP pass
            stacks = []
            for t in range(T):
                stacked, memory = stack_frames(frames[t], memory, self.num_frames)
                stacks.append(stacked)
                memory = memory.reset(dones[t])
            x = self._features(torch.cat(stacks, 0))
            return self.head(x).reshape(T, frames.shape[1], -1), None
        hidden = memory.hidden
        for t in range(T):
            stacked, memory = stack_frames(frames[t], memory, self.num_frames)
            x = self.encoder(self._features(stacked))
            out, hidden = self.gru(x[None], hidden)
            latents.append(out[0])
            hidden = hidden * (~dones[t]).to(hidden.dtype)[None, :, None]
            memory = Memory(frames=memory.frames, fresh=memory.fresh, hidden=hidden).reset(dones[t])
        latent = torch.stack(latents)
        return self.head(latent), latent

    def flat(self, stacked_frames: torch.Tensor) -> torch.Tensor:
        """Feed-forward actor on pre-stacked frames [B, K, D] -> means [B, A] (PPO minibatches)."""
        return self.head(self._features(stacked_frames))

    # ------------------------------------------------------------------ distribution helpers
    def dist(self, mean: torch.Tensor) -> GaussianDistribution:
        self.distribution.update(mean)
        return self.distribution

    @property
    def std(self) -> torch.Tensor:
        return self.distribution.std_param.clamp(*self.distribution.std_range)

    def reconstruct(self, latent: torch.Tensor) -> torch.Tensor:
        if self.decoder is None:
            raise RuntimeError("this actor has no reconstruction decoder")
        return self.decoder(latent)

    def update_normalization(self, frames: torch.Tensor) -> None:
        self.normalizer.update(frames)


class Critic(nn.Module):
    """Value function with ``num_heads`` heads (one per reward group)."""

    def __init__(self, cfg: CriticConfig, obs_dims: dict[str, dict[str, int]]):
        super().__init__()
        self.cfg = cfg
        self.refs = parse_refs(cfg.obs)
        self.obs_dim = term_width(obs_dims, self.refs)
        self.normalizer = _Normalizer(self.obs_dim, cfg.normalize_obs)
        self.mlp = MLP(self.obs_dim, cfg.num_heads, cfg.hidden_dims, cfg.activation)

    def observe(self, obs: dict) -> torch.Tensor:
        return gather(obs, self.refs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Raw critic input [..., D] -> values [..., num_heads]."""
        return self.mlp(self.normalizer(x))

    def update_normalization(self, x: torch.Tensor) -> None:
        self.normalizer.update(x)
