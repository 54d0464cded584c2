"""Vectorised rotation helpers (quaternions in MuJoCo's w, x, y, z order)."""

from __future__ import annotations

import numpy as np


def yaw_and_gravity(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Heading [N] and gravity direction in the body frame [N, 3] of unit quaternions [N, 4].

    The gravity direction is the body-frame image of world -z, i.e. minus the third row of the
    rotation matrix; computed directly, without building the matrices.
    """
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    yaw = np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    g = np.empty((q.shape[0], 3))
    g[:, 0] = -2.0 * (x * z - w * y)
    g[:, 1] = -2.0 * (y * z + w * x)
    g[:, 2] = -1.0 + 2.0 * (x * x + y * y)
    return yaw, g


def yaw_quat(yaw: np.ndarray) -> np.ndarray:
    """[N] yaw angles -> [N, 4] quaternions."""
    return np.stack([np.cos(yaw / 2), np.zeros_like(yaw), np.zeros_like(yaw), np.sin(yaw / 2)], axis=-1)


def rotate_into_yaw_frame(v: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """Express world vectors ``v`` [N, 3] in the frame rotated by ``yaw`` about z."""
    c, s = np.cos(yaw), np.sin(yaw)
    out = np.empty_like(v)
    out[:, 0] = c * v[:, 0] + s * v[:, 1]
    out[:, 1] = -s * v[:, 0] + c * v[:, 1]
    out[:, 2] = v[:, 2]
    return out


def wrap_angle(a: np.ndarray) -> np.ndarray:
    return (a + np.pi) % (2 * np.pi) - np.pi
