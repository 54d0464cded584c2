"""Where a velocity command lies: standing, forward or backward, walking straight or sideways.

The evaluation reports tracking success by region (``llp evaluate``), and the env counts its episode ends by
region in training (``episode_ends/detail/command/<region>/...``), so both read alike: a teacher that walks
forward but falls walking backward and sideways shows it in either.
"""

from __future__ import annotations

import numpy as np

SIDEWAYS_M_S = 0.15  # a command with |vy| at least this (half the task's lateral range) walks sideways
REGIONS = ("standing", "forward", "forward, sideways", "backward", "backward, sideways")


def command_regions(vel: np.ndarray) -> np.ndarray:
    """Each (vx, vy) command's region [N] (indices into REGIONS), from commands [N, 2] in the base frame."""
    vx, vy = vel[:, 0], vel[:, 1]
    region = np.where(vx < 0.0, 3, 1) + (np.abs(vy) >= SIDEWAYS_M_S)
    return np.where((vx == 0.0) & (vy == 0.0), 0, region)


def command_region(vel) -> str:
    """One (vx, vy) command's region, by name."""
    return REGIONS[int(command_regions(np.asarray(vel, dtype=float).reshape(1, 2))[0])]


def slug(region: str) -> str:
    """A region's name in metric keys: 'backward, sideways' -> 'backward_sideways'."""
    return region.replace(", ", "_")
