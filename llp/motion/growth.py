"""Growing a reference: the next round's proposal is the last accepted reference, raised with its obstacle.

A point of the motion rises with the obstacle by as much as it stands on it: a foot by the share of the old
box height it has climbed (0 on the floor, the whole step on the top), the pelvis and the hands by the mean
of the two feet's shares. The raised targets (pelvis, ankles, hands, with the parent's pelvis and foot
rotations) are solved into a joint trajectory with the same IK as the seeds (``llp.motion.retarget``), then
checked kinematically and against the raised box. Only a physics rollout of the proposal that succeeds
becomes the next reference (``stages/reference_augmentation.py``).
"""

from __future__ import annotations

import numpy as np

from llp.motion.retarget import Retargeter
from llp.motion.scene import ObstacleBox

FEET = ("left_foot", "right_foot")


def frame_rotations(solver: Retargeter, qpos: np.ndarray, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """World rotations [T, 3, 3] of body frames ``keys`` (retarget frame keys) along ``qpos``."""
    import mujoco

    data = mujoco.MjData(solver.model)
    out = {k: np.zeros((len(qpos), 3, 3)) for k in keys}
    for t, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_kinematics(solver.model, data)
        for k in keys:
            out[k][t] = data.body(solver.cfg.frames[k].frame).xmat.reshape(3, 3)
    return out


def raised_targets(
    positions: dict[str, np.ndarray], obstacle: ObstacleBox, dz: float
) -> dict[str, np.ndarray]:  # fmt: skip
    """Frame targets [T, 3] of a motion over ``obstacle`` moved up with a box ``dz`` taller."""
    out = {k: v.copy() for k, v in positions.items()}
    shares = []
    for foot in FEET:
        z = positions[foot][:, 2]
        share = np.clip((z - z.min()) / obstacle.height, 0.0, 1.0)
        out[foot][:, 2] += dz * share
        shares.append(share)
    body_share = np.mean(shares, axis=0)
    for key in positions:
        if key not in FEET:
            out[key][:, 2] += dz * body_share
    return out


def raise_reference(solver: Retargeter, qpos: np.ndarray, obstacle: ObstacleBox, dz: float, fps: float):
    """The proposal of the next round: (qpos [T, nq], raised obstacle, the targets it was solved for)."""
    positions = solver.frame_positions(qpos)
    missing = [f for f in FEET if f not in positions]
    if missing:
        raise ValueError(f"growth needs retarget frames {missing}")
    rotations = frame_rotations(solver, qpos, ("pelvis", *FEET))
    targets = raised_targets(positions, obstacle, dz)
    return solver.solve(targets, rotations, fps), obstacle.raised(dz), targets
