"""Growing a reference: the next round's proposal is the last accepted reference, raised with its obstacle.

A point of the motion rises with the obstacle by as much as it stands on it:

- a foot, by the share of the old box height its sole has climbed (0 on the floor, the whole step on the top;
  a foot on its toes on the floor has climbed nothing, however high its raised heel puts the ankle);
- a hand that the motion plants on the top (an intended contact), by the whole step while it is there, easing
  in and out over HAND_RAMP_S;
- the pelvis and the rest, by the mean share of what stands: the two feet, and each hand while it is planted;
- any of those that passes close over the top (a hand reaching over the edge; within CLEAR_NEAR_M of it, over
  the box or within CLEAR_EDGE_M of its front), by the whole step, so that it keeps its clearance to the taller
  top; easing to its share by CLEAR_FAR_M above the top and CLEAR_EDGE_M before the front.

The raised targets (pelvis, ankles, hands, with the parent's pelvis and foot rotations) are solved into a joint
trajectory with the same IK as the seeds (``llp.motion.retarget``), then checked kinematically and against the
raised box. Only a physics rollout of the proposal that succeeds becomes the next reference
(``stages/reference_augmentation.py``).
"""

from __future__ import annotations

import numpy as np

from llp.motion.retarget import Retargeter
from llp.motion.scene import ObstacleBox

FEET = ("left_foot", "right_foot")
CLEARANCE = 0.002  # metres between a planted sole and its surface in a proposal (the seeds use 1 mm)
HAND_RAMP_S = 0.25  # seconds over which a hand planted on the top takes up (and gives back) the whole step
# a frame over the top rises by the whole step up to CLEAR_NEAR_M above it, by its share from CLEAR_FAR_M; the
# 45 cm step-up's hands reach 2-3 cm over the front edge as the body rolls onto the top (1.0-1.1 s): raised by
# the body's half share, they went 3.0 cm into the 50 cm box (docs/experiments/2026-12-07-climb-45-60.md)
CLEAR_NEAR_M, CLEAR_FAR_M, CLEAR_EDGE_M = 0.10, 0.20, 0.10


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
    positions: dict[str, np.ndarray], obstacle: ObstacleBox, dz: float, ankle_height: float | None = None,
    contacts: list | None = None, fps: float | None = None, soles: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Frame targets [T, 3] of a motion over ``obstacle`` moved up with a box ``dz`` taller. With
    ``ankle_height`` (ankle above a planted sole), no ankle target ends up lower than that above the floor or
    the raised top: a physics rollout's feet sink a little into what they stand on (soft contacts), and the
    next proposal should not inherit it. With ``contacts`` (and the motion's ``fps``), a frame other than a
    foot that the motion plants on the top rises by the whole step while it is there. With ``soles`` (the lowest
    point of each foot [T], by foot), a foot's climbed share is its sole's height, not its ankle's."""
    out = {k: v.copy() for k, v in positions.items()}
    shares = []
    top = obstacle.height + dz
    for foot in FEET:
        z = soles[foot] if soles is not None else positions[foot][:, 2]
        share = np.clip((z - z.min()) / obstacle.height, 0.0, 1.0)
        out[foot][:, 2] += dz * share
        if ankle_height is not None:
            x, y = positions[foot][:, 0], positions[foot][:, 1]
            over = (x >= obstacle.front_x) & (x <= obstacle.front_x + obstacle.depth)
            over &= np.abs(y - obstacle.y) <= obstacle.width / 2
            ground = np.where(over, top, 0.0) + ankle_height
            out[foot][:, 2] = np.maximum(out[foot][:, 2], ground)
        shares.append(share)
    # the body rises by the mean share of what it stands on: the two feet, and a hand while it is planted on the
    # top (there it stands on the whole step)
    planted = {k: _on_top_share(k, contacts, fps, len(shares[0])) for k in positions if k not in FEET}
    weight = sum(planted.values())
    body_share = (np.sum(shares, axis=0) + weight) / (len(shares) + weight)
    for key in positions:
        if key not in FEET:
            near = _near_top_share(positions[key], obstacle)
            out[key][:, 2] += dz * np.maximum(body_share, np.maximum(planted[key], near))
    return out


def _near_top_share(points: np.ndarray, obstacle: ObstacleBox) -> np.ndarray:
    """1 where a point [T, 3] is over the box (or within CLEAR_EDGE_M of its front) and within CLEAR_NEAR_M above
    its top, easing to 0 at CLEAR_FAR_M above it or CLEAR_EDGE_M before the front."""
    x, y, z = points[:, 0], points[:, 1], points[:, 2]
    outside = np.maximum(obstacle.front_x - x, 0.0) + np.maximum(x - obstacle.front_x - obstacle.depth, 0.0)
    outside += np.maximum(np.abs(y - obstacle.y) - obstacle.width / 2, 0.0)
    across = np.clip(1.0 - outside / CLEAR_EDGE_M, 0.0, 1.0)
    above = np.clip((CLEAR_FAR_M - (z - obstacle.height)) / (CLEAR_FAR_M - CLEAR_NEAR_M), 0.0, 1.0)
    return across * np.where(z >= obstacle.height - CLEAR_NEAR_M, above, 0.0)


def _on_top_share(frame: str, contacts: list | None, fps: float | None, num_frames: int) -> np.ndarray:
    """1 while ``frame`` is planted on the top (its intended contacts), easing to 0 over HAND_RAMP_S either side."""
    share = np.zeros(num_frames)
    if not contacts or fps is None:
        return share
    t = np.arange(num_frames) / fps
    for c in contacts:
        if c.frame == frame and c.surface == "top":
            before, after = (t - (c.start - HAND_RAMP_S)) / HAND_RAMP_S, ((c.end + HAND_RAMP_S) - t) / HAND_RAMP_S
            share = np.maximum(share, np.clip(np.minimum(before, after), 0.0, 1.0))
    return share


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


def sole_heights(solver: Retargeter, qpos: np.ndarray) -> dict[str, np.ndarray]:
    """The lowest point [T] of each foot's collision geoms (its sole, or its toes when the heel is up) along qpos."""
    import mujoco

    model, data = solver.model, mujoco.MjData(solver.model)
    geoms = {}
    for foot in FEET:
        ankle = model.body(solver.cfg.frames[foot].frame).id
        below = [b for b in range(model.nbody) if _descends(model, b, ankle)]
        geoms[foot] = [g for g in range(model.ngeom) if model.geom_contype[g] and model.geom_bodyid[g] in below]
    out = {foot: np.zeros(len(qpos)) for foot in FEET}
    for t, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        for foot in FEET:
            out[foot][t] = min(_lowest_point(model, data, g) for g in geoms[foot])
    return out


def _descends(model, body: int, ancestor: int) -> bool:
    while body > 0 and body != ancestor:
        body = model.body_parentid[body]
    return body == ancestor


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


def raise_reference(solver: Retargeter, qpos: np.ndarray, obstacle: ObstacleBox, dz: float, fps: float,
                    contacts: list | None = None, clear: bool = False):  # fmt: skip
    """The proposal of the next round: (qpos [T, nq], raised obstacle, the targets it was solved for); with the
    motion's intended ``contacts``, the hands it plants on the top rise with it; with ``clear``, the IK keeps
    the rest of the body off the raised box (``Retargeter.clear_of``)."""
    positions = solver.frame_positions(qpos)
    missing = [f for f in FEET if f not in positions]
    if missing:
        raise ValueError(f"growth needs retarget frames {missing}")
    rotations = frame_rotations(solver, qpos, ("pelvis", *FEET))
    soles = sole_heights(solver, qpos)
    targets = raised_targets(positions, obstacle, dz, ankle_height(solver) + CLEARANCE, contacts, fps, soles)
    raised = obstacle.raised(dz)
    ik = solver.clear_of(raised) if clear else solver
    return ik.solve(targets, rotations, fps), raised, targets
