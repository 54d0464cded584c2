"""Generalised advantage estimation that tells time-outs from terminations.

At a time-out (``truncated``) the episode was cut off, not ended: the target
bootstraps from V of the final state (``final_values``), which the rollout
evaluated before the env reset. At a termination nothing follows: no bootstrap.
Either way the advantage recursion stops at the episode boundary.
"""

from __future__ import annotations

import torch


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    last_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and value targets.

    Args:
        rewards: [T, N, H] rewards per step (H = reward groups / value heads).
        values: [T, N, H] V(s_t) from the rollout.
        last_values: [N, H] V of the observation after the last step.
        terminated: [T, N] bool, the episode failed at step t.
        truncated: [T, N] bool, the episode was cut off at step t.
        final_values: [T, N, H] V of the final state at steps where ``truncated``; ignored elsewhere.

    Returns:
        advantages [T, N, H], returns (value targets) [T, N, H].
    """
    T = rewards.shape[0]
    term = terminated.to(rewards.dtype)[..., None]
    trunc = truncated.to(rewards.dtype)[..., None]
    done = torch.clamp(term + trunc, max=1.0)
    advantages = torch.zeros_like(rewards)
    next_adv = torch.zeros_like(last_values)
    for t in reversed(range(T)):
        following = last_values if t == T - 1 else values[t + 1]
        # next-state value: the next observation's (same episode), the final state's (time-out), or none (failure)
        next_value = (1.0 - done[t]) * following + trunc[t] * final_values[t]
        delta = rewards[t] + gamma * next_value - values[t]
        next_adv = delta + gamma * lam * (1.0 - done[t]) * next_adv
        advantages[t] = next_adv
    return advantages, advantages + values


def combine_advantages(
    advantages: torch.Tensor, weights: torch.Tensor, normalize: bool = True, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """One advantage per sample from per-group advantages [..., H].

    Each group's advantages are normalised separately (zero mean, unit std over
    the batch) so that a group with large raw rewards does not drown the others,
    then combined as sum_h weights[h] * A_h. With a single group this is the usual
    PPO advantage normalisation.
    """
    # mask [N]: the envs whose advantages count (the statistics are theirs; weighted, not selected, so that no
    # count is read back from a GPU)
    if normalize:
        if mask is None:
            flat = advantages.reshape(-1, advantages.shape[-1])
            mean, std = flat.mean(dim=0), flat.std(dim=0)
        else:
            w = mask.to(advantages.dtype)[None, :, None].expand_as(advantages)
            n = w.sum(dim=(0, 1))
            mean = (advantages * w).sum(dim=(0, 1)) / n.clamp_min(1.0)
            std = (((advantages - mean) ** 2 * w).sum(dim=(0, 1)) / (n - 1).clamp_min(1.0)).sqrt()
        advantages = (advantages - mean) / (std + 1e-8)
    return (advantages * weights).sum(dim=-1)
