"""The leg torques a step-up reference asks for once the front foot carries the body: per frame, the centre of
mass, the lowest point of each foot, and each joint's static torque in the front leg for its sole pushing up
with the robot's whole weight (tau = J^T F at that point), beside the joint's torque limit. Usage (from the
repository root):

    llp seeds climb_step_45 --out /tmp/refs
    python docs/experiments/leg_loads.py /tmp/refs/climb_step_45.r0.npz [--leg left] [--every 5]

Static only, and the leg's own weight is left out: the hip's torque is about the weight times the level
distance from the hip to the sole. Where the centre of mass is behind the sole, the robot cannot stand on that
foot alone at all: the number says what the hip would need to pull the body over it slowly.
"""

from __future__ import annotations

import mujoco
import numpy as np
from arm_loads import load, reference_parser

LEG_JOINTS = ("hip_pitch", "knee", "ankle_pitch")


def lowest_point(model: mujoco.MjModel, data: mujoco.MjData, body: int) -> np.ndarray:
    """The middle of the lowest points of the collision geoms on ``body``, those within 5 mm of the lowest: the
    sole's centre when it is flat, its toes or its heel when it is pitched."""
    points_all = []
    for g in range(model.ngeom):
        if model.geom_bodyid[g] != body or not model.geom_contype[g]:
            continue
        size, rot, pos = model.geom_size[g], data.geom_xmat[g].reshape(3, 3), data.geom_xpos[g]
        if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX:
            corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * size
            points = pos + corners @ rot.T
        else:  # sphere or capsule: the lowest point of its end spheres
            half = size[1] if model.geom_type[g] == mujoco.mjtGeom.mjGEOM_CAPSULE else 0.0
            ends = pos + np.array([[0, 0, -half], [0, 0, half]]) @ rot.T
            points = ends - np.array([0.0, 0.0, size[0]])
        points_all.append(points)
    points = np.concatenate(points_all)
    return points[points[:, 2] < points[:, 2].min() + 0.005].mean(axis=0)


def leg_loads(model: mujoco.MjModel, qpos: np.ndarray, leg: str) -> list[dict[str, float]]:
    """For each frame: the centre of mass x, each foot's lowest point (x, z), and the leg's static torques (N m)."""
    data = mujoco.MjData(model)
    weight = model.body_subtreemass[model.body("pelvis").id] * 9.81
    jacp = np.zeros((3, model.nv))
    rows = []
    for frame in qpos:
        data.qpos[:] = frame
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        row = {"com_x": float(data.subtree_com[model.body("pelvis").id][0])}
        for side in ("left", "right"):
            sole = lowest_point(model, data, model.body(f"{side}_foot").id)
            row[f"{side}_sole_x"], row[f"{side}_sole_z"] = float(sole[0]), float(sole[2])
        body = model.body(f"{leg}_foot").id
        sole = lowest_point(model, data, body)
        mujoco.mj_jac(model, data, jacp, None, sole, body)
        tau = jacp.T @ np.array([0.0, 0.0, weight])
        for joint in LEG_JOINTS:
            row[joint] = float(tau[model.jnt_dofadr[model.joint(f"{leg}_{joint}").id]])
        rows.append(row)
    return rows


def main() -> None:
    parser = reference_parser(__doc__)
    parser.add_argument("--leg", default="left", choices=("left", "right"), help="the leg that steps up first")
    args = parser.parse_args()
    model, ref, limits = load(args)
    rows = leg_loads(model, ref["qpos"], args.leg)
    lead, back = args.leg, "right" if args.leg == "left" else "left"
    names = " / ".join(f"{j} ({limits[f'{lead}_{j}']:.0f})" for j in LEG_JOINTS)
    print(f"the {lead} sole carries all {model.body_subtreemass[model.body('pelvis').id]:.1f} kg")
    print(f"t (s)  com x  {lead} sole x, z, {back} sole x, z  |  {lead} {names}, N m")
    for f in range(0, len(rows), args.every):
        row = rows[f]
        torques = " / ".join(f"{row[j]:+6.1f}" for j in LEG_JOINTS)
        soles = ", ".join(f"{row[f'{side}_sole_{axis}']:5.2f}" for side in (lead, back) for axis in "xz")
        print(f"{f / float(ref['fps']):5.2f}  {row['com_x']:5.2f}  {soles}  |  {torques}")


if __name__ == "__main__":
    main()
