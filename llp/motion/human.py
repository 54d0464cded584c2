"""Human motion as world-frame 3D joint trajectories in the SMPL body's 24-joint order.

This is what video motion recovery (GVHMR and the like) gives after forward kinematics of the body model:
a trajectory per joint, no rotations needed. Files are ``.npz`` with

* ``joints``: float array [T, 24, 3], metres, in the order of ``SMPL_JOINTS``;
* ``fps``: frames per second;
* ``up_axis``: ``"z"`` or ``"y"`` (SMPL's own convention is y up).

Loaded motions are z up, x forward as recorded, and can be resampled to the robot's control rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SMPL_JOINTS = (
    "pelvis", "left_hip", "right_hip", "spine1", "left_knee", "right_knee", "spine2", "left_ankle",
    "right_ankle", "spine3", "left_foot", "right_foot", "neck", "left_collar", "right_collar", "head",
    "left_shoulder", "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hand",
    "right_hand",
)  # fmt: skip


class MotionFileError(ValueError):
    """A motion file that cannot be used, with the reason."""

    def __init__(self, path: str | Path, reason: str):
        super().__init__(f"{path}: {reason}")


@dataclass
class HumanMotion:
    """Joint positions [T, 24, 3] (z up, metres) at ``fps``; ``source`` says where they came from."""

    joints: np.ndarray
    fps: float
    source: str = ""

    @property
    def num_frames(self) -> int:
        return self.joints.shape[0]

    @property
    def duration(self) -> float:
        return (self.num_frames - 1) / self.fps

    def joint(self, name: str) -> np.ndarray:
        """Trajectory [T, 3] of one SMPL joint by name."""
        return self.joints[:, SMPL_JOINTS.index(name)]

    def leg_length(self) -> float:
        """Hip to knee to ankle, averaged over both legs and all frames: the length retargeting scales by."""
        total = 0.0
        for side in ("left", "right"):
            hip, knee, ankle = (self.joint(f"{side}_{j}") for j in ("hip", "knee", "ankle"))
            total += np.linalg.norm(knee - hip, axis=1).mean() + np.linalg.norm(ankle - knee, axis=1).mean()
        return float(total / 2)


def to_z_up(points: np.ndarray, up_axis: str) -> np.ndarray:
    """Points [..., 3] with ``up_axis`` up, as z-up points: y up maps (x, y, z) to (x, -z, y), a rotation."""
    if up_axis == "z":
        return points.copy()
    if up_axis == "y":
        return np.stack([points[..., 0], -points[..., 2], points[..., 1]], axis=-1)
    raise ValueError(f"up_axis must be 'y' or 'z', got {up_axis!r}")


def load_human_motion(path: str | Path, fps: float | None = None, up_axis: str | None = None) -> HumanMotion:
    """Read an SMPL-order joint trajectory file; ``fps`` and ``up_axis`` override what the file says."""
    path = Path(path)
    if not path.is_file():
        raise MotionFileError(path, "no such file")
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same clear message
        raise MotionFileError(path, f"not a readable .npz file ({exc})") from exc
    if "joints" not in data:
        raise MotionFileError(path, f"needs an array 'joints' [T, 24, 3]; it has {sorted(data.files)}")
    joints = np.asarray(data["joints"], dtype=np.float64)
    if joints.ndim != 3 or joints.shape[1:] != (len(SMPL_JOINTS), 3) or joints.shape[0] < 2:
        raise MotionFileError(path, f"'joints' must be [T >= 2, 24, 3] in SMPL order, got {list(joints.shape)}")
    if not np.isfinite(joints).all():
        raise MotionFileError(path, "'joints' holds NaN or infinite values")
    if fps is None:
        if "fps" not in data:
            raise MotionFileError(path, "no 'fps' in the file: give the frame rate")
        fps = float(data["fps"])
    if not fps > 0:
        raise MotionFileError(path, f"fps must be positive, got {fps}")
    if up_axis is None:
        up_axis = str(data["up_axis"]) if "up_axis" in data else "y"  # SMPL's own convention
    if up_axis not in ("y", "z"):
        raise MotionFileError(path, f"up_axis must be 'y' or 'z', got {up_axis!r}")
    return HumanMotion(to_z_up(joints, up_axis), fps, source=str(path))


def resample(motion: HumanMotion, fps: float) -> HumanMotion:
    """The motion at ``fps`` over the same duration, linearly interpolated."""
    t_old = np.arange(motion.num_frames) / motion.fps
    n_new = int(np.floor(motion.duration * fps + 1e-9)) + 1
    t_new = np.arange(n_new) / fps
    flat = motion.joints.reshape(motion.num_frames, -1)
    out = np.stack([np.interp(t_new, t_old, flat[:, k]) for k in range(flat.shape[1])], axis=1)
    return HumanMotion(out.reshape(n_new, *motion.joints.shape[1:]), fps, motion.source)
