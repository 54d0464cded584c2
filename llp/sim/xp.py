"""One array vocabulary over numpy and torch, so that task code (reward terms) is written once.

The CPU env computes in numpy, float64, on the host; the device env (``llp.sim.device_env``) in torch, float32,
on the device that holds the simulation. ``namespace(x)`` gives the functions a term needs, with numpy's
signatures, for whichever kind ``x`` is. On numpy arrays they are numpy's own functions, so the CPU env's
numbers do not change.
"""

from __future__ import annotations

import math

import numpy as np
import torch


class NumpyOps:
    pi = math.pi
    exp, abs, sin, cos, sqrt, arctan2 = np.exp, np.abs, np.sin, np.cos, np.sqrt, np.arctan2
    minimum, maximum, clip, where = np.minimum, np.maximum, np.clip, np.where

    @staticmethod
    def sum(x, axis=None):
        return np.sum(x, axis=axis)

    @staticmethod
    def stack(xs, axis):
        return np.stack(xs, axis=axis)

    @staticmethod
    def zeros_like(x):
        return np.zeros_like(x)

    @staticmethod
    def amax(x, axis):
        return np.max(x, axis=axis)

    @staticmethod
    def amin(x, axis):
        return np.min(x, axis=axis)

    @staticmethod
    def norm(x, axis):
        return np.linalg.norm(x, axis=axis)

    @staticmethod
    def as_float(x):
        return x.astype(np.float64)

    @staticmethod
    def ones_rows(like):
        """Ones, one per row of ``like``."""
        return np.ones(like.shape[0])

    @staticmethod
    def asarray(values, like):
        return np.asarray(values)


class TorchOps:
    pi = math.pi
    exp, abs, sin, cos, sqrt, arctan2 = torch.exp, torch.abs, torch.sin, torch.cos, torch.sqrt, torch.atan2

    @staticmethod
    def minimum(a, b):
        return torch.clamp(a, max=b) if not isinstance(b, torch.Tensor) else torch.minimum(a, b)

    @staticmethod
    def maximum(a, b):
        return torch.clamp(a, min=b) if not isinstance(b, torch.Tensor) else torch.maximum(a, b)

    @staticmethod
    def clip(x, lo, hi):
        return torch.clamp(x, lo, hi)

    @staticmethod
    def where(c, a, b):
        return torch.where(c, a, b)

    @staticmethod
    def sum(x, axis=None):
        return torch.sum(x) if axis is None else torch.sum(x, dim=axis)

    @staticmethod
    def stack(xs, axis):
        return torch.stack(xs, dim=axis)

    @staticmethod
    def zeros_like(x):
        return torch.zeros_like(x)

    @staticmethod
    def amax(x, axis):
        return torch.amax(x, dim=axis)

    @staticmethod
    def amin(x, axis):
        return torch.amin(x, dim=axis)

    @staticmethod
    def norm(x, axis):
        return torch.linalg.vector_norm(x, dim=axis)

    @staticmethod
    def as_float(x):
        return x.to(torch.get_default_dtype())

    @staticmethod
    def ones_rows(like):
        return torch.ones(like.shape[0], device=like.device)

    @staticmethod
    def asarray(values, like):
        return torch.as_tensor(np.asarray(values), device=like.device)


def namespace(x) -> type[NumpyOps] | type[TorchOps]:
    """The ops for arrays like ``x``: torch tensors (any device) or numpy arrays."""
    return TorchOps if isinstance(x, torch.Tensor) else NumpyOps
