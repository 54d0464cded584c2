"""An Isaac Lab articulation of a robot of ours: its USD (``llp.sim.isaaclab.robot_usd``) with the PD gains,
torque limits, armature, passive damping and default pose read from the robot's own MJCF, so both backends
simulate one robot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

ASSETS = Path(__file__).resolve().parents[1] / "assets"


@dataclass
class JointDrive:
    """One actuated joint as MuJoCo models it: a position servo on a damped joint."""

    kp: float  # N m / rad
    kv: float  # N m s / rad, the servo's (the joint's passive damping travels in the USD)
    effort: float  # N m, the actuator's force range
    armature: float  # kg m^2
    lower: float  # rad
    upper: float  # rad


def joint_drives(mjcf: Path | mujoco.MjModel) -> dict[str, JointDrive]:
    """Joint name -> its drive, for every joint a position actuator drives (of an MJCF file or a compiled model)."""
    m = mjcf if isinstance(mjcf, mujoco.MjModel) else mujoco.MjModel.from_xml_path(str(mjcf))
    drives = {}
    for a in range(m.nu):
        j = m.actuator_trnid[a, 0]
        dof = m.jnt_dofadr[j]
        name = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j)
        drives[name] = JointDrive(
            kp=float(m.actuator_gainprm[a, 0]),
            kv=float(-m.actuator_biasprm[a, 2]),
            effort=float(m.actuator_forcerange[a, 1]),
            armature=float(m.dof_armature[dof]),
            lower=float(m.jnt_range[j, 0]),
            upper=float(m.jnt_range[j, 1]),
        )
    return drives


def keyframe_pose(mjcf: Path, key: str) -> tuple[np.ndarray, dict[str, float]]:
    """The keyframe's base position [3] and joint positions by name."""
    m = mujoco.MjModel.from_xml_path(str(mjcf))
    k = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_KEY, key)
    if k < 0:
        raise ValueError(f"{mjcf.name} has no keyframe {key!r}")
    qpos = m.key_qpos[k]
    joints = {}
    for j in range(m.njnt):
        if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE:
            joints[mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j)] = float(qpos[m.jnt_qposadr[j]])
    return np.array(qpos[:3]), joints


def robot_cfg(name: str, key: str = "crouch", prim_path: str = "{ENV_REGEX_NS}/Robot",
              model: mujoco.MjModel | None = None):  # fmt: skip
    """An ``ArticulationCfg`` of robot ``name`` (``llp/sim/assets/<name>.xml`` and ``usd/<name>.usdc``); the drives
    of ``model`` where given (a model an env compiled, with its config's changes), else of the MJCF file."""
    import isaaclab.sim as sim_utils
    from isaaclab.actuators import ImplicitActuatorCfg
    from isaaclab.assets import ArticulationCfg
    from isaaclab_newton.sim.schemas import NewtonArticulationCfg

    mjcf, usd = ASSETS / f"{name}.xml", ASSETS / "usd" / f"{name}.usdc"
    if not usd.exists():
        raise FileNotFoundError(f"{usd} is missing: make it with `python -m llp.sim.isaaclab.robot_usd {name}`")
    drives = joint_drives(mjcf if model is None else model)
    base, joints = keyframe_pose(mjcf, key)
    exact = {n: f"^{n}$" for n in drives}  # joint names as exact patterns
    return ArticulationCfg(
        prim_path=prim_path,
        # no self-collision: the MJCF's robot geoms collide with the ground only (contype 1, conaffinity 0)
        spawn=sim_utils.UsdFileCfg(
            usd_path=str(usd),
            activate_contact_sensors=True,
            articulation_props=NewtonArticulationCfg(self_collision_enabled=False),
        ),
        init_state=ArticulationCfg.InitialStateCfg(
            pos=tuple(float(x) for x in base),
            joint_pos={exact[n]: q for n, q in joints.items()},
            joint_vel={".*": 0.0},
        ),
        soft_joint_pos_limit_factor=0.9,
        actuators={
            "all": ImplicitActuatorCfg(
                joint_names_expr=[".*"],
                stiffness={exact[n]: d.kp for n, d in drives.items()},
                damping={exact[n]: d.kv for n, d in drives.items()},
                joint_effort_limit={exact[n]: d.effort for n, d in drives.items()},
                armature={exact[n]: d.armature for n, d in drives.items()},
            )
        },
    )
