"""What crosses from the learner's device back to the host: metrics, read in one transfer."""

from __future__ import annotations

import torch


def read_back(values: dict[str, torch.Tensor]) -> dict[str, float]:
    """Tensors (on any one device) -> floats, in one read back to the host."""
    if not values:
        return {}
    flat = torch.stack([v.detach().reshape(()).to(torch.float64) for v in values.values()]).cpu().tolist()
    return dict(zip(values, flat))
