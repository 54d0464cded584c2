"""Data-parallel learning: several learner processes train one policy through torch.distributed.

Every learner holds the same networks and learns from its own share of the rollout. After each backward
pass the gradients are averaged across learners by one all-reduce (NCCL between GPUs, Gloo on CPUs).
Whatever steers an update is agreed on: the KL that adapts the learning rate, and whether an update left
a NaN. So every copy takes the same step and the copies stay identical. rsl_rl's running normalisers
reduce their own statistics when a process group exists.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def init(rank: int, world_size: int, address: str, backend: str, timeout_s: float = 600.0) -> None:
    """Join the learners' process group at ``address`` (``tcp://HOST:PORT`` of rank 0)."""
    dist.init_process_group(
        backend, init_method=address, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s)
    )


def average_gradients(parameters) -> None:
    """Replace each gradient by its mean over the learners (one flat all-reduce)."""
    if not active():
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def mean(value: float) -> float:
    """The mean of a scalar over the learners."""
    if not active():
        return value
    t = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t) / dist.get_world_size()


def mean_tensor(value: torch.Tensor) -> torch.Tensor:
    """The mean of a tensor over the learners, on its own device (no read back to the host)."""
    if not active():
        return value
    t = value.detach().clone()
    dist.all_reduce(t)
    return t / dist.get_world_size()


def any_true(flag: bool, device: str | torch.device = "cpu") -> bool:
    """True on every learner if it is true on one (``device``: where the process group's backend reduces)."""
    if not active():
        return flag
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
