"""Retargeting: world-frame targets for a few body frames, solved into robot joint trajectories with ``mink``.

The same solver serves human motion (SMPL joints, scaled by the ratio of leg lengths, as GMR does) and the
project's authored seeds (pelvis, hand and foot waypoints placed around the obstacle). Per frame, weighted
frame tasks pull the pelvis, feet and hands to their targets, a posture task keeps the rest near the
default pose, and the robot's joint limits and a joint-speed limit bound every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llp.config.schema import check, field
from llp.motion.human import SMPL_JOINTS, HumanMotion

# growth's IK keeps the legs, body and upper arms at least CLEARANCE_M off the box, acting within DETECTION_M of it
CLEARANCE_M, DETECTION_M = 0.0, 0.03


@dataclass(kw_only=True)
class FrameTarget:
    """One robot frame that follows a target."""

    frame: str = field(doc="MuJoCo body or site name.")
    type: str = field(default="body", doc="body or site.")
    position_cost: float = field(doc="Weight of the position error, per metre.")
    orientation_cost: float = field(default=0.0, doc="Weight of the orientation error, per radian.")
    smpl_joint: str | None = field(default=None, doc="The SMPL joint this frame follows in human motion.")

    def validate(self, path: str) -> None:
        check(self.type in ("body", "site"), f"{path}.type", "must be body or site")
        check(self.position_cost >= 0 and self.orientation_cost >= 0, f"{path}.position_cost", "costs must be >= 0")
        check(self.smpl_joint is None or self.smpl_joint in SMPL_JOINTS, f"{path}.smpl_joint",
              f"must be one of the SMPL joints: {', '.join(SMPL_JOINTS)}")  # fmt: skip


@dataclass(kw_only=True)
class RetargetConfig:
    """How motion is retargeted to one robot and checked against its obstacle (conf/retarget/<robot>.yaml)."""

    robot: str = field(doc="conf/robot/<name>.yaml")
    frames: dict[str, FrameTarget] = field(doc="Targets by key: pelvis, left_foot, right_foot, left_hand, right_hand.")
    leg: list[str] = field(doc="Two bodies whose distance at the zero pose is the robot's leg length (hip, ankle).")
    contact_frames: dict[str, str] = field(doc="Contact frame (a key of frames) -> the robot body that touches.")
    posture_cost: float = field(default=0.05, doc="Weight pulling every joint towards the default pose.")
    joint_speed_limit: float = field(default=10.0, doc="Largest joint speed a reference may ask for, rad/s.")
    iterations: int = field(default=4, doc="IK steps per frame (each over 1/iterations of the frame time).")
    damping: float = field(default=1e-3, doc="Levenberg-Marquardt damping of the IK steps.")
    penetration_limit: float = field(default=0.01, doc="Deepest allowed robot-scene penetration, metres.")
    contact_tolerance: float = field(default=0.02, doc="Intended contacts: farthest allowed median distance, m.")

    def validate(self, path: str) -> None:
        check("pelvis" in self.frames, f"{path}.frames", "needs a pelvis target")
        check(len(self.leg) == 2, f"{path}.leg", "needs two bodies: hip and ankle")
        missing = [f for f in self.contact_frames if f not in self.frames]
        check(not missing, f"{path}.contact_frames", f"{missing} are not keys of frames")
        check(self.joint_speed_limit > 0 and self.iterations >= 1, f"{path}.iterations", "must be positive")


def retarget_config(robot: str = "lightbot0_like") -> RetargetConfig:
    from llp.config.files import named
    from llp.config.schema import build

    return build(RetargetConfig, named("retarget", robot), "retarget")


def yaw_rotation(yaw: np.ndarray) -> np.ndarray:
    """Rotations about z [T, 3, 3] for yaw angles [T]."""
    c, s = np.cos(yaw), np.sin(yaw)
    R = np.zeros((len(yaw), 3, 3))
    R[:, 0, 0], R[:, 0, 1], R[:, 1, 0], R[:, 1, 1], R[:, 2, 2] = c, -s, s, c, 1.0
    return R


def pitch_yaw_rotation(pitch: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """R = Rz(yaw) Ry(pitch) [T, 3, 3]: positive pitch leans the body forward."""
    c, s = np.cos(pitch), np.sin(pitch)
    Ry = np.zeros((len(pitch), 3, 3))
    Ry[:, 0, 0], Ry[:, 0, 2], Ry[:, 1, 1], Ry[:, 2, 0], Ry[:, 2, 2] = c, s, 1.0, -s, c
    return yaw_rotation(yaw) @ Ry


class Retargeter:
    """Solves frame targets into joint trajectories for one robot."""

    def __init__(self, cfg: RetargetConfig, robot_cfg, obstacle=None):
        import mink
        import mujoco

        from llp.sim.robot import load_robot_spec

        self.cfg, self.robot_cfg = cfg, robot_cfg
        spec = load_robot_spec(robot_cfg)
        if obstacle is not None:
            from llp.motion.scene import add_obstacle

            add_obstacle(spec, obstacle, floor=False)
        self.model = model = spec.compile()
        self.configuration = mink.Configuration(model)
        self.default_q = model.key(robot_cfg.keyframe).qpos.copy() if robot_cfg.keyframe else model.qpos0.copy()
        self.tasks = {
            key: mink.FrameTask(t.frame, t.type, position_cost=t.position_cost, orientation_cost=t.orientation_cost)
            for key, t in cfg.frames.items()
        }
        self.posture = mink.PostureTask(model, cost=cfg.posture_cost)
        self.posture.set_target(self.default_q)
        hinges = [model.joint(j).name for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
        self.limits = [
            mink.ConfigurationLimit(model),
            mink.VelocityLimit(model, {name: cfg.joint_speed_limit for name in hinges}),
        ]
        if obstacle is not None:  # what may not touch the box: every collision geom but the contact frames' bodies
            self.limits.append(mink.CollisionAvoidanceLimit(model, [(self._clear_geoms(), ["obstacle"])],
                                                            minimum_distance_from_collisions=CLEARANCE_M,
                                                            collision_detection_distance=DETECTION_M))  # fmt: skip
        data = mujoco.MjData(model)
        mujoco.mj_kinematics(model, data)  # the zero pose: straight legs
        hip, ankle = (data.body(b).xpos.copy() for b in cfg.leg)
        self.leg_length = float(np.linalg.norm(hip - ankle))

    def clear_of(self, obstacle) -> Retargeter:
        """The same IK, keeping every body but the contact frames' (feet and hands) off ``obstacle``: mink's
        collision-avoidance limit (a bound on the speed towards it within DETECTION_M)."""
        return Retargeter(self.cfg, self.robot_cfg, obstacle)

    def _clear_geoms(self) -> list[int]:
        from llp.sim.robot import ROBOT_COLLISION_GROUP

        model = self.model
        touching = {model.body(b).id for b in self.cfg.contact_frames.values()}
        out = []
        for g in range(model.ngeom):
            body = int(model.geom_bodyid[g])
            chain = set()
            while body > 0:
                chain.add(body)
                body = int(model.body_parentid[body])
            if model.geom_group[g] == ROBOT_COLLISION_GROUP and not chain & touching:
                out.append(g)
        return out

    def solve(self, positions: dict[str, np.ndarray], rotations: dict[str, np.ndarray], fps: float) -> np.ndarray:
        """Joint trajectory qpos [T, nq] following target ``positions`` [T, 3] and ``rotations`` [T, 3, 3]
        by frame key (a key without a rotation keeps the frame's yaw-only default: level)."""
        import mink

        unknown = sorted(set(positions) - set(self.tasks))
        check(not unknown, "retarget.frames", f"targets {unknown} have no frame task")
        num_frames = len(positions["pelvis"])
        q = self.default_q.copy()
        q[:3] = positions["pelvis"][0]
        q[3:7] = _quat_from_matrix(rotations["pelvis"][0]) if "pelvis" in rotations else q[3:7]
        self.configuration.update(q)
        dt = 1.0 / fps / self.cfg.iterations
        tasks = [self.tasks[k] for k in positions] + [self.posture]
        out = np.zeros((num_frames, self.model.nq))
        for t in range(num_frames):
            for key, pos in positions.items():
                R = rotations[key][t] if key in rotations else np.eye(3)
                self.tasks[key].set_target(mink.SE3.from_rotation_and_translation(mink.SO3.from_matrix(R), pos[t]))
            for _ in range(self.cfg.iterations):
                v = mink.solve_ik(self.configuration, tasks, dt, "daqp", damping=self.cfg.damping, limits=self.limits)
                self.configuration.integrate_inplace(v, dt)
            out[t] = self.configuration.q
        return out

    def frame_positions(self, qpos: np.ndarray, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        """World positions [T, 3] of the target frames along a joint trajectory."""
        import mujoco

        data = mujoco.MjData(self.model)
        keys = list(self.cfg.frames) if keys is None else keys
        out = {k: np.zeros((len(qpos), 3)) for k in keys}
        for t, q in enumerate(qpos):
            data.qpos[:] = q
            mujoco.mj_kinematics(self.model, data)
            for k in keys:
                f = self.cfg.frames[k]
                out[k][t] = (data.site(f.frame) if f.type == "site" else data.body(f.frame)).xpos
        return out


def _quat_from_matrix(R: np.ndarray) -> np.ndarray:
    import mujoco

    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, np.ascontiguousarray(R).reshape(-1))
    return quat


def human_targets(motion: HumanMotion, cfg: RetargetConfig, robot_leg_length: float) -> tuple[dict, dict]:
    """Scaled targets of a human motion: positions by frame key, scaled by the robot's leg length over the
    human's about the pelvis's ground point at the first frame (GMR's height scaling), and level rotations
    that face where the hips face (pelvis and feet)."""
    scale = robot_leg_length / motion.leg_length()
    origin = motion.joint("pelvis")[0] * np.array([1.0, 1.0, 0.0])
    positions = {
        key: origin + scale * (motion.joint(t.smpl_joint) - origin)
        for key, t in cfg.frames.items()
        if t.smpl_joint is not None
    }
    across = motion.joint("left_hip") - motion.joint("right_hip")
    yaw = np.arctan2(across[:, 1], across[:, 0]) - np.pi / 2  # the hips' left points +y when facing +x
    level = yaw_rotation(yaw)
    rotations = {key: level for key in positions if key == "pelvis" or key.endswith("_foot")}
    return positions, rotations


def retarget_human(motion: HumanMotion, cfg: RetargetConfig, robot_cfg) -> tuple[np.ndarray, dict, Retargeter]:
    """(qpos [T, nq] at the motion's frame rate, the scaled targets, the solver) of a human motion."""
    solver = Retargeter(cfg, robot_cfg)
    positions, rotations = human_targets(motion, cfg, solver.leg_length)
    return solver.solve(positions, rotations, motion.fps), positions, solver
