"""The arm torques a reference asks for when the hands carry the body: per frame, each arm joint's static torque
for a hand pushing up with its share of the robot's weight (tau = J^T F at the tip of the forearm), beside the
joint's torque limit. Usage (from the repository root):

    llp seeds climb_whole_45 --out /tmp/refs
    python docs/experiments/arm_loads.py /tmp/refs/climb_whole_45.r0.npz [--share 1.0] [--every 5]

``--share``: the share of the weight on the two hands together (1.0: the feet carry nothing). Static only: lifting
the body takes more (its acceleration), and the PD arm needs a position error of torque / kp to give it.
"""

from __future__ import annotations

import argparse

import mujoco
import numpy as np

ARM_JOINTS = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow")
FOREARM_TIP = np.array([0.0, 0.0, -0.145])  # the forearm capsule's far end and its radius (lightbot0_like.xml)


def arm_loads(model: mujoco.MjModel, qpos: np.ndarray, share: float) -> list[dict[str, float]]:
    """For each frame: every arm joint's static torque (N m), keyed '<side>_<joint>'."""
    data = mujoco.MjData(model)
    weight = model.body_subtreemass[model.body("pelvis").id] * 9.81
    force = np.array([0.0, 0.0, share * weight / 2])
    jacp = np.zeros((3, model.nv))
    rows = []
    for frame in qpos:
        data.qpos[:] = frame
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        row = {}
        for side in ("left", "right"):
            body = model.body(f"{side}_forearm").id
            tip = data.xpos[body] + data.xmat[body].reshape(3, 3) @ FOREARM_TIP
            mujoco.mj_jac(model, data, jacp, None, tip, body)
            tau = jacp.T @ force
            for joint in ARM_JOINTS:
                jid = model.joint(f"{side}_{joint}").id
                row[f"{side}_{joint}"] = float(tau[model.jnt_dofadr[jid]])
                row[f"{side}_{joint}_q"] = float(frame[model.jnt_qposadr[jid]])
        rows.append(row)
    return rows


def reference_parser(doc: str) -> argparse.ArgumentParser:
    """The command line the load scripts share (this one and leg_loads.py): a reference, --every, --mjcf."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("reference", help="a reference library entry (.npz with qpos and fps)")
    parser.add_argument("--every", type=int, default=5, help="print every Nth frame")
    parser.add_argument("--mjcf", default="llp/sim/assets/lightbot0_like.xml")
    return parser


def load(args: argparse.Namespace) -> tuple[mujoco.MjModel, dict, dict[str, float]]:
    """The robot model, the reference (.npz) and each actuated joint's torque limit by joint name."""
    model = mujoco.MjModel.from_xml_path(args.mjcf)
    limits = {model.joint(model.actuator_trnid[a, 0]).name: model.actuator_forcerange[a, 1] for a in range(model.nu)}
    return model, np.load(args.reference), limits


def main() -> None:
    parser = reference_parser(__doc__)
    parser.add_argument("--share", type=float, default=1.0)
    args = parser.parse_args()
    model, ref, limits = load(args)
    rows = arm_loads(model, ref["qpos"], args.share)
    print(f"hands carry {args.share:.0%} of {model.body_subtreemass[model.body('pelvis').id]:.1f} kg; "
          f"arm torque limit {limits['left_elbow']:.0f} N m")  # fmt: skip
    print("t (s)  worst (N m)  left shoulder pitch / elbow (N m)  left elbow angle (rad)")
    for f in range(0, len(rows), args.every):
        row = rows[f]
        worst = max(abs(row[f"{s}_{j}"]) / limits[f"{s}_{j}"] for s in ("left", "right") for j in ARM_JOINTS)
        shoulder, elbow, angle = row["left_shoulder_pitch"], row["left_elbow"], row["left_elbow_q"]
        t, worst_nm = f / float(ref["fps"]), worst * limits["left_elbow"]
        print(f"{t:5.2f}  {worst_nm:5.1f}  {shoulder:+6.1f} / {elbow:+6.1f}  {angle:+.2f}")


if __name__ == "__main__":
    main()
