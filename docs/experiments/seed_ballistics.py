"""Whether a seed's keyframe motion is one the robot's contacts can carry: the vertical force its centre of mass
asks for, frame by frame, against what its intended contacts can give. With no contact the motion must fall at
g; with only a hand on the top, the planted arm's joints must hold that force within their torque limits (static:
tau = J^T F at the forearm's tip). Usage (from the repository root):

    python docs/experiments/seed_ballistics.py speed_vault_40 [--every 5]

The seed is solved kinematically (its keyframes through the IK, no physics); nothing is written.
"""

from __future__ import annotations

import argparse

import mujoco
import numpy as np

from llp.config.files import named
from llp.config.schema import build
from llp.motion.seeds import seed_reference, seed_spec
from llp.sim.robot import RobotConfig, resolve_mjcf

ARM_JOINTS = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow")
FOREARM_TIP = np.array([0.0, 0.0, -0.145])  # the forearm capsule's far end (lightbot0_like.xml)
G = 9.81


def centre_of_mass(model: mujoco.MjModel, qpos: np.ndarray) -> np.ndarray:
    """[T, 3] whole-robot centre of mass per frame."""
    data, root = mujoco.MjData(model), model.body("pelvis").id
    out = np.zeros((len(qpos), 3))
    for i, frame in enumerate(qpos):
        data.qpos[:] = frame
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        out[i] = data.subtree_com[root]
    return out


def arm_lift(model: mujoco.MjModel, frame: np.ndarray, side: str) -> float:
    """The largest upward force (N) the ``side`` hand can push with in this pose before an arm joint reaches its
    torque limit (static)."""
    data = mujoco.MjData(model)
    data.qpos[:] = frame
    mujoco.mj_kinematics(model, data)
    mujoco.mj_comPos(model, data)
    body = model.body(f"{side}_forearm").id
    tip = data.xpos[body] + data.xmat[body].reshape(3, 3) @ FOREARM_TIP
    jacp = np.zeros((3, model.nv))
    mujoco.mj_jac(model, data, jacp, None, tip, body)
    limits = {model.joint(model.actuator_trnid[a, 0]).name: model.actuator_forcerange[a, 1] for a in range(model.nu)}
    lift = np.inf
    for joint in ARM_JOINTS:
        name = f"{side}_{joint}"
        per_newton = abs(jacp[2, model.jnt_dofadr[model.joint(name).id]])  # N m of this joint per N of lift
        if per_newton > 1e-9:
            lift = min(lift, limits[name] / per_newton)
    return float(lift)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed")
    parser.add_argument("--every", type=int, default=5)
    args = parser.parse_args()
    spec = seed_spec(args.seed)
    ref = seed_reference(spec, physics=False, log=lambda *a, **k: None)
    robot = build(RobotConfig, named("robot", spec.robot), "robot")
    model = mujoco.MjModel.from_xml_path(str(resolve_mjcf(robot.mjcf)))
    mass = model.body_subtreemass[model.body("pelvis").id]
    dt = 1.0 / spec.fps
    com = centre_of_mass(model, ref.qpos)
    acc = np.gradient(np.gradient(com[:, 2], dt), dt)
    need = mass * (G + acc)  # the vertical force the contacts must give, N
    t = np.arange(len(com)) * dt
    touching = [sorted(c.frame for c in spec.contacts if c.start <= ti <= c.end) for ti in t]
    print(f"{spec.id}: {mass:.1f} kg, weight {mass * G:.0f} N; vertical force the motion asks for, as a share of the "
          "weight (1.0: standing still), beside what its contacts can give")  # fmt: skip
    lift = np.full(len(t), np.nan)  # what the planted hands can push up with, where only hands touch
    for f in range(len(t)):
        if touching[f] and all(c.endswith("hand") for c in touching[f]):
            lift[f] = sum(arm_lift(model, ref.qpos[f], c.split("_")[0]) for c in touching[f])
    weight = mass * G
    print("t (s)  com z (m)  asks  touching                  hands can lift")
    for f in range(0, len(t), args.every):
        can = "" if np.isnan(lift[f]) else f"{lift[f] / weight:.2f}"
        print(f"{t[f]:5.2f}  {com[f, 2]:7.3f}  {need[f] / weight:5.2f}  {', '.join(touching[f]) or '-':24s}  {can}")
    print("phases (contacts unchanged): force asked as a share of the weight, mean / most")
    start = 0
    for f in range(1, len(t) + 1):
        if f == len(t) or touching[f] != touching[start]:
            ask = need[start:f] / weight
            who = ", ".join(touching[start]) or "nothing (must fall at g: asks 0)"
            line = f"  {t[start]:.2f}-{t[f - 1]:.2f} s  {who}: {ask.mean():.2f} / {ask.max():.2f}"
            if not np.isnan(lift[start]):
                over = int(np.sum(need[start:f] > lift[start:f]))
                can = np.nanmean(lift[start:f]) / weight
                line += f"; the hands can lift {can:.2f} (mean), {over} of {f - start} frames ask more"
            print(line)
            start = f


if __name__ == "__main__":
    main()
