"""Adversarial motion prior with phase-conditional discriminators.

Each phase of a course has its own discriminator over state transitions
(features of s_t and s_{t+1}): before the trigger a walking prior, after it a
skill prior. An env's phase comes from its progress along its course (the env
provides the signed distance past the course's trigger point), with a hard or a
smooth hand-off between neighbouring phases. The style reward enters the
environment reward before GAE, so it changes advantages like any other reward.

Discriminator loss: binary cross-entropy (style reward softplus(logit) = -log(1 - D))
or least squares (targets +1 / -1, style reward max(0, 1 - (d - 1)^2 / 4)); both
with a zero-centred gradient penalty on reference samples, (w / 2) E ||grad D||^2.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from rsl_rl.modules import MLP, EmpiricalNormalization

from llp.learn.configs import AMPConfig
from llp.learn.host import read_back
from llp.learn.models import update_normalization


class Discriminator(nn.Module):
    """D(s, s') -> logit, with running input normalisation."""

    def __init__(self, feature_dim: int, hidden_dims: list[int], normalize: bool = True):
        super().__init__()
        self.normalizer = EmpiricalNormalization(2 * feature_dim) if normalize else nn.Identity()
        self.mlp = MLP(2 * feature_dim, 1, hidden_dims, "relu")

    def forward(self, transitions: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.normalizer(transitions))[..., 0]


def gradient_penalty(disc: nn.Module, reference: torch.Tensor, weight: float) -> torch.Tensor:
    """Zero-centred penalty (weight / 2) * E ||d logit / d x||^2 on reference transitions [B, 2F]."""
    x = reference.detach().requires_grad_(True)
    logits = disc(x)
    (grad,) = torch.autograd.grad(logits.sum(), x, create_graph=True)
    return 0.5 * weight * grad.pow(2).sum(dim=-1).mean()


def phase_weights(progress: torch.Tensor, triggers, hand_off: str, width: float) -> torch.Tensor:
    """Weight of each phase for each sample: progress [...] -> [..., len(triggers) + 1], rows sum to 1.
    ``triggers``: a list, or a tensor on ``progress``'s device."""
    if len(triggers) == 0:
        return torch.ones(*progress.shape, 1, device=progress.device)
    if hand_off == "hard":
        t = triggers.to(progress.dtype) if torch.is_tensor(triggers) else torch.tensor(triggers, dtype=progress.dtype)
        idx = torch.bucketize(progress, t, right=True)  # at a trigger exactly, the later phase
        phases = torch.arange(len(triggers) + 1, device=progress.device)
        return (idx[..., None] == phases).to(progress.dtype)  # (one_hot would check the indices on the host)
    # smooth: phase k is "past trigger k-1 and not past trigger k", each step a logistic
    past = [torch.sigmoid((progress - t) / width) for t in triggers]
    weights = []
    for k in range(len(triggers) + 1):
        w = torch.ones_like(progress)
        if k > 0:
            w = w * past[k - 1]
        if k < len(triggers):
            w = w * (1 - past[k])
        weights.append(w)
    w = torch.stack(weights, dim=-1)
    return w / w.sum(dim=-1, keepdim=True)


class AMP:
    """Discriminators (one per phase), style rewards and discriminator training."""

    def __init__(
        self,
        cfg: AMPConfig,
        feature_dim: int,
        references: list[torch.Tensor],
        dt: float,
        envs: torch.Tensor | None = None,
    ):
        """``references``: one tensor of reference transitions [M, 2F] per phase; ``envs`` [N] bool: the envs it
        rewards and judges (None: all; the others' features are ignored)."""
        if len(references) != len(cfg.triggers) + 1:
            raise ValueError(
                f"{len(cfg.triggers)} triggers need {len(cfg.triggers) + 1} reference sets, got {len(references)}"
            )
        self.cfg, self.dt, self.envs = cfg, dt, envs
        self.references = references
        self.discriminators = nn.ModuleList([Discriminator(feature_dim, cfg.hidden_dims) for _ in references])
        self.optimizer = torch.optim.Adam(self.discriminators.parameters(), lr=cfg.learning_rate, fused=True)
        self.triggers = torch.tensor(cfg.triggers, dtype=torch.float32)
        self.env_index = None if envs is None else torch.nonzero(envs)[:, 0]  # (indexing by it reads nothing back)
        for d, ref in zip(self.discriminators, references):
            d.normalizer.update(ref)

    def to(self, device: str | torch.device) -> AMP:
        """Discriminators, references and the covered envs on ``device`` (before any update)."""
        self.discriminators.to(device)
        self.references = [r.to(device) for r in self.references]
        self.triggers = self.triggers.to(device)
        self.envs = None if self.envs is None else self.envs.to(device)
        self.env_index = None if self.env_index is None else self.env_index.to(device)
        return self

    def _phase_weights(self, progress: torch.Tensor) -> torch.Tensor:
        return phase_weights(progress, self.triggers, self.cfg.hand_off, self.cfg.smooth_width)

    def _style(self, logits: torch.Tensor) -> torch.Tensor:
        if self.cfg.loss == "bce":
            return F.softplus(logits)
        return torch.clamp(1 - 0.25 * (logits - 1) ** 2, min=0.0)

    @torch.no_grad()
    def style_reward(self, obs: torch.Tensor, next_obs: torch.Tensor, progress: torch.Tensor) -> torch.Tensor:
        """Style reward per transition: obs, next_obs [..., F], progress [...] -> [...] (phase-weighted)."""
        x = torch.cat([obs, next_obs], dim=-1)
        w = self._phase_weights(progress)
        rewards = torch.stack([self._style(d(x)) for d in self.discriminators], dim=-1)
        return (w * rewards).sum(dim=-1)

    def extra_rewards(self, rollout, num_groups: int) -> torch.Tensor:
        """[T, N, H] rewards to add before GAE: style_coef * dt * style in the configured reward group."""
        style = self.style_reward(rollout.amp_obs, rollout.extras["amp_next"], rollout.amp_phase)
        if self.envs is not None:
            style = style * self.envs[None, :].to(style.dtype)
        extra = torch.zeros(*style.shape, num_groups, device=style.device)
        extra[..., self.cfg.reward_group] = self.cfg.style_coef * self.dt * style
        return extra

    def update(self, rollout) -> dict[str, float]:
        """Train each phase's discriminator: reference transitions vs. the policy's, for its phase. Reads the
        phases' sample counts back to the host once; the metrics once at the end."""
        obs, nxt, progress = rollout.amp_obs, rollout.extras["amp_next"], rollout.amp_phase
        if self.env_index is not None:  # the policy's transitions in the envs it covers only
            e = self.env_index
            obs, nxt, progress = obs[:, e], nxt[:, e], progress[:, e]
        policy = torch.cat([obs, nxt], dim=-1).reshape(-1, 2 * obs.shape[-1])
        w = self._phase_weights(progress)
        phase = w.reshape(-1, w.shape[-1]).argmax(dim=-1)
        phases = torch.arange(len(self.references), device=phase.device)
        counts = (phase[:, None] == phases).sum(dim=0).cpu().tolist()  # (bincount would find its size on the host)
        # the samples grouped by phase, shuffled within each: phase k's are order[start_k : start_k + count_k]
        order = torch.argsort(phase.to(policy.dtype) + torch.rand(len(phase), device=policy.device))
        values: dict[str, torch.Tensor] = {}
        start = 0
        for k, (disc, ref) in enumerate(zip(self.discriminators, self.references)):
            samples = policy[order[start : start + counts[k]]]
            start += counts[k]
            if counts[k] == 0:
                continue
            if isinstance(disc.normalizer, EmpiricalNormalization):
                update_normalization(disc.normalizer, samples)
            mb = max(1, counts[k] // self.cfg.num_minibatches)
            for j in range(self.cfg.num_minibatches):
                pol = samples[j * mb : (j + 1) * mb]
                if len(pol) == 0:
                    continue
                refb = ref[torch.randint(len(ref), (len(pol),), device=ref.device)]
                d_ref, d_pol = disc(refb), disc(pol)
                if self.cfg.loss == "bce":
                    loss = F.binary_cross_entropy_with_logits(
                        d_ref, torch.ones_like(d_ref)
                    ) + F.binary_cross_entropy_with_logits(d_pol, torch.zeros_like(d_pol))
                else:
                    loss = ((d_ref - 1) ** 2).mean() + ((d_pol + 1) ** 2).mean()
                gp = gradient_penalty(disc, refb, self.cfg.gradient_penalty)
                self.optimizer.zero_grad()
                (loss + gp).backward()
                self.optimizer.step()
                values[f"amp/phase{k}_loss"] = loss.detach()
                values[f"amp/phase{k}_grad_penalty"] = gp.detach()
                values[f"amp/phase{k}_d_ref"] = d_ref.detach().mean()
                values[f"amp/phase{k}_d_policy"] = d_pol.detach().mean()
        return read_back(values)

    def state_dict(self) -> dict:
        return {"discriminators": self.discriminators.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.discriminators.load_state_dict(state["discriminators"])
        self.optimizer.load_state_dict(state["optimizer"])
