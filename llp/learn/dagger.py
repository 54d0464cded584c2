"""Online DAgger loss: the student imitates teacher labels on the states the student visited.

The labels come from the rollout (``Rollout.teacher_actions``), so they are the
teachers' actions on student-driven data, not on a fixed dataset.

Sample weights: every sample gets weight 1/num_samples (the loss is a plain mean)
unless ``balance_groups`` is set, in which case each expert group contributes
equally however many envs it has: w_i = 1 / (G * n_g(i)) where n_g is the
number of samples of sample i's group and G the number of groups. Weights always
sum to 1; within a sample, the squared error is averaged over action dimensions.
"""

from __future__ import annotations

import torch


def sample_weights(
    groups: torch.Tensor | None,
    num_samples: int,
    balance_groups: bool,
    num_groups: int | None = None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Weights [num_samples] summing to 1 (see module doc); ``groups`` [num_samples] holds group ids from -1
    (no teacher) to ``num_groups - 2`` (None: read from ``groups``). Counted on the groups' device: given
    ``num_groups``, nothing is read back to the host."""
    if groups is None or not balance_groups:
        return torch.full((num_samples,), 1.0 / num_samples, device=device)
    slots = groups.long() + 1
    size = int(groups.max()) + 2 if num_groups is None else max(num_groups, 1)
    counts = torch.zeros(size, device=groups.device).scatter_add_(0, slots, torch.ones_like(slots, dtype=torch.float32))
    present = (counts > 0).sum().to(torch.float32)
    return 1.0 / (present * counts[slots])


def dagger_loss(student_mean: torch.Tensor, teacher_action: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_i w_i * mean_a (mu_student - a_teacher)^2; inputs [B, A], weights [B]."""
    per_sample = ((student_mean - teacher_action) ** 2).mean(dim=-1)
    return (per_sample * weights).sum()
