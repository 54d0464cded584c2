"""Vectorised rotation helpers (quaternions in MuJoCo's w, x, y, z order), for numpy arrays and torch tensors."""

from __future__ import annotations

import math

from llp.sim.xp import namespace


def yaw_and_gravity(q):
    """Heading [N] and gravity direction in the body frame [N, 3] of unit quaternions [N, 4].

    The gravity direction is the body-frame image of world -z, i.e. minus the third row of the
    rotation matrix; computed directly, without building the matrices.
    """
    xp = namespace(q)
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    yaw = xp.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    g = xp.stack([-2.0 * (x * z - w * y), -2.0 * (y * z + w * x), -1.0 + 2.0 * (x * x + y * y)], axis=1)
    return yaw, g


def yaw_quat(yaw):
    """[N] yaw angles -> [N, 4] quaternions."""
    xp = namespace(yaw)
    zero = xp.zeros_like(yaw)
    return xp.stack([xp.cos(yaw / 2), zero, zero, xp.sin(yaw / 2)], axis=-1)


def rotate_into_yaw_frame(v, yaw):
    """Express world vectors ``v`` [N, 3] in the frame rotated by ``yaw`` about z."""
    xp = namespace(v)
    c, s = xp.cos(yaw), xp.sin(yaw)
    return xp.stack([c * v[:, 0] + s * v[:, 1], -s * v[:, 0] + c * v[:, 1], v[:, 2]], axis=1)


def wrap_angle(a):
    return (a + math.pi) % (2 * math.pi) - math.pi
