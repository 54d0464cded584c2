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
CLEARANCE = 0.002  # metres between a planted sole and its surface in a proposal (the seeds use 1 mm)


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
    positions: dict[str, np.ndarray], obstacle: ObstacleBox, dz: float, ankle_height: float | None = None
) -> dict[str, np.ndarray]:  # fmt: skip
    """Frame targets [T, 3] of a motion over ``obstacle`` moved up with a box ``dz`` taller. With
    ``ankle_height`` (ankle above a planted sole), no ankle target ends up lower than that above the floor or
    the raised top: a physics rollout's feet sink a little into what they stand on (soft contacts), and the
    next proposal should not inherit it."""
    out = {k: v.copy() for k, v in positions.items()}
    shares = []
    top = obstacle.height + dz
    for foot in FEET:
        z = positions[foot][:, 2]
        share = np.clip((z - z.min()) / obstacle.height, 0.0, 1.0)
        out[foot][:, 2] += dz * share
        if ankle_height is not None:
            x, y = positions[foot][:, 0], positions[foot][:, 1]
            over = (x >= obstacle.front_x) & (x <= obstacle.front_x + obstacle.depth)
            over &= np.abs(y - obstacle.y) <= obstacle.width / 2
            ground = np.where(over, top, 0.0) + ankle_height
            out[foot][:, 2] = np.maximum(out[foot][:, 2], ground)
        shares.append(share)
    body_share = np.mean(shares, axis=0)
    for key in positions:
        if key not in FEET:
            out[key][:, 2] += dz * body_share
    return out


def ankle_height(solver: Retargeter) -> float:
    """Height of the ankle frame above the sole: the robot in its default pose, its lowest foot geom on z = 0."""
    import mujoco

    model, data = solver.model, mujoco.MjData(solver.model)
    data.qpos[:] = solver.default_q
    mujoco.mj_kinematics(model, data)
    frame = solver.cfg.frames[FEET[0]]
    ankle = data.body(frame.frame).xpos[2]
    geoms = [g for g in range(model.ngeom) if model.geom_contype[g] and model.geom_bodyid[g] > 0]
    # the lowest point of any collision geom: the sole (a box's lowest corner, a sphere's bottom)
    low = min(_lowest_point(model, data, g) for g in geoms)
    return float(ankle - low)


def _lowest_point(model, data, g: int) -> float:
    import mujoco

    centre, size, R = data.geom_xpos[g], model.geom_size[g], data.geom_xmat[g].reshape(3, 3)
    kind = model.geom_type[g]
    if kind == mujoco.mjtGeom.mjGEOM_BOX:
        return float(centre[2] - np.abs(R[2, :]) @ size)
    if kind == mujoco.mjtGeom.mjGEOM_SPHERE:
        return float(centre[2] - size[0])
    if kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
        return float(centre[2] - abs(R[2, 2]) * size[1] - size[0])
    return float(centre[2] - model.geom_rbound[g])


def raise_reference(solver: Retargeter, qpos: np.ndarray, obstacle: ObstacleBox, dz: float, fps: float):
    """The proposal of the next round: (qpos [T, nq], raised obstacle, the targets it was solved for)."""
    positions = solver.frame_positions(qpos)
    missing = [f for f in FEET if f not in positions]
    if missing:
        raise ValueError(f"growth needs retarget frames {missing}")
    rotations = frame_rotations(solver, qpos, ("pelvis", *FEET))
    targets = raised_targets(positions, obstacle, dz, ankle_height(solver) + CLEARANCE)
    return solver.solve(targets, rotations, fps), obstacle.raised(dz), targets
