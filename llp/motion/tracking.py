"""Physics tracking of a motion reference paired with its obstacle: the task's config and the reference's
kinematics as the tracking env reads them.

The recipe is BeyondMimic's as mjlab ships it (``mjlab/tasks/tracking/tracking_env_cfg.py``): exponential
kernels on the anchor (pelvis) position and orientation in the world, body positions relative to the anchor,
body velocities; penalties on the action rate and the joint limits; an episode ends when the anchor or an
end body drifts 0.25 m in height from the reference or the body tilts 0.8 away from it. The anchor is in the
scene's frame (the reference's x = 0 is the motion start, the box sits ``front_x`` ahead), so tracking it
also places the robot relative to the obstacle; intended contacts are rewarded at their reference positions
(LLP's scene anchoring). Where this differs from mjlab, the config file says why (conf/task/tracking.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import numpy as np

from llp.config.schema import check, field
from llp.motion.scene import Contact, ObstacleBox
from llp.motion.start_sampling import AdaptiveStarts
from llp.sim.backend import check_backend, sim_defaults
from llp.sim.robot import RobotConfig
from llp.sim.sensors import HeightScanConfig

TRACKING_REWARDS = {  # name -> kind; each documented in llp/motion/tracking_env.py
    "anchor_pos": "reward",
    "anchor_ori": "reward",
    "body_pos": "reward",
    "body_lin_vel": "reward",
    "anchor_ang_vel": "reward",
    "contact_pos": "reward",
    "goal": "reward",
    "action_rate": "penalty",
    "joint_limit": "penalty",
}
TRACKING_OBSERVATIONS = (
    "proprio",  # gravity and angular velocity (in proprio_layout), joint positions and velocities, last action
    "reference",  # next reference frame: joint targets, joint speeds, anchor offset and tilt, phase
    "obstacle",  # box front and back face ahead of the pelvis, lateral offset, height
    "privileged",  # base velocity, pelvis height, body position errors
    "height_scan",  # the locomotion task's scan grid over the floor and the box (skill experts read it)
    "command",  # forward speed of the motion (its mean), lateral 0, yaw rate 0: a skill expert's velocity command
)


@dataclass(kw_only=True)
class TrackingTerm:
    weight: float = field(doc="Weight; rewards need >= 0, penalties <= 0.")
    std: float | None = field(default=None, doc="Width of the exponential kernel exp(-error / std^2).")


@dataclass(kw_only=True)
class TrackingTerminations:
    anchor_z: float = field(default=0.25, doc="Pelvis height error that ends the episode, m (mjlab: 0.25).")
    tilt: float = field(default=0.8, doc="Difference of projected gravity vectors that ends it (mjlab: 0.8).")
    end_body_z: float = field(default=0.25, doc="Height error of a foot or hand that ends it, m (mjlab: 0.25).")
    walking_unheld_z: float | None = field(
        default=None,
        doc="In episodes that start walking (walking_starts): the pelvis and foot or hand height error that ends "
        "them, m. A walking robot reaches the box on its own timing, not the reference's clock; the skill stage's "
        "walk-in evaluation tolerates 1.0. None: anchor_z and end_body_z as every episode.",
    )
    body_contact: bool = field(
        default=False,
        doc="A contact of the robot's termination_bodies (its pelvis and torso) with anything, the floor or a box, "
        "ends the episode, as it ends a course trial in the terrain env (a fall there). False: mjlab's tracking, "
        "which has no such end.",
    )
    contact_threshold: float = field(default=1.0, doc="Net contact force on such a body that ends it, N.")
    max_tilt: float | None = field(
        default=None,
        doc="The course's tilt rule: the base tilted from upright beyond this ends the episode, whatever the "
        "reference does (the terrain env's max_tilt, 1.0 rad). None: off (tilt compares with the reference).",
    )
    min_base_height: float | None = field(
        default=None,
        doc="The course's height rule: the pelvis closer than this to the ground under it (the floor, or the box's "
        "top where the pelvis is over the box) ends the episode (the terrain env's min_base_height, 0.18 m). "
        "None: off.",
    )


@dataclass(kw_only=True)
class TrackingTaskConfig:
    """Tracking one reference with its obstacle."""

    robot: RobotConfig = field(doc="The robot (conf/robot/).")
    physics_dt: float = field(default=0.005, doc="Physics step, s.")
    decimation: int = field(default=4, doc="Physics steps per policy step; the reference's fps must match.")
    solver_iterations: int = field(default=6, doc="MuJoCo constraint solver iterations.")
    action_offset: str = field(default="reference", doc="Joint targets are reference or default + scale x action.")
    action_scale: float = field(default=0.25, doc="Radians per unit action.")
    action_clip: float = field(default=10.0, doc="Actions are clipped to +-action_clip.")
    tracked_bodies: list[str] = field(doc="Bodies whose positions and velocities are tracked.")
    end_bodies: list[str] = field(doc="Feet and hands: a height error of one of them ends the episode.")
    contact_frames: dict[str, str] = field(doc="Contact frame (as the references name them) -> robot body.")
    rewards: dict[str, TrackingTerm] = field(doc=f"Terms by name: {', '.join(TRACKING_REWARDS)}.")
    terminations: TrackingTerminations = field(default_factory=TrackingTerminations, doc="Episode ends.")
    start_at_zero: float = field(default=0.1, doc="Share of training episodes that start at the first frame.")
    adaptive_starts: AdaptiveStarts = field(
        default_factory=AdaptiveStarts,
        doc="The other training episodes' start frames: uniform, or more often before where episodes fall "
        "(BeyondMimic's adaptive sampling; llp/motion/start_sampling.py).",
    )
    start_velocity_share: float = field(
        default=1.0,
        doc="Training episodes start with this share of their start frame's velocities (1: reference-state "
        "initialisation, mjlab's; less makes the policy build the motion's momentum itself).",
    )
    init_joint_noise: float = field(default=0.05, doc="Uniform noise on the start joint positions, rad.")
    init_root_noise: float = field(default=0.02, doc="Uniform noise on the start pelvis position (x, y), m.")
    friction: tuple[float, float] | None = field(
        default=None,
        doc="Robot-ground friction drawn per env at every reset (trials too), as the locomotion task's "
        "randomization.friction; null: the model's own.",
    )
    lateral_m: float = field(
        default=0.0,
        doc="Each episode (training and trial) starts up to this far to either side of its start frame, drawn "
        "uniformly, m, and its reference moves sideways with it (the box is wider than the motion): the course's "
        "sideways spawn offset (the locomotion task's spawn_jitter x 0.5 on a goal tile: 0.15 m). 0: on the reference.",
    )
    start_window_s: float | None = field(
        default=None,
        doc="Training episodes start in the motion's first start_window_s seconds; None: anywhere along it "
        "(reference-state initialisation).",
    )
    start_posture: str = field(
        default="reference",
        doc="Joints at an episode's start: the reference frame's (reference) or the default pose, the locomotion "
        "teacher's standing posture (default).",
    )
    walking_starts: float = field(
        default=0.0,
        doc="Share of episodes (training and trial) that start mid-stride in a recorded walking state of the "
        "locomotion teacher (TrackingEnvConfig.walking_states) at the start frame's spot and heading, instead of "
        "in start_posture: the handoff the skill meets on the transition course. 0: none.",
    )
    walking_lead_in_m: float = field(
        default=0.0,
        doc="Walking starts begin up to this far behind their start frame, drawn uniformly, m (training and trial), "
        "the reference's clock waiting as for lead_in_m: the band before a skill's start where the box is in the "
        "scan. 0: at the start frame.",
    )
    lead_in_m: float = field(
        default=0.0,
        doc="Each episode (training and trial) starts up to this far behind its start frame, drawn uniformly, m; "
        "the reference's clock waits at that frame until the pelvis reaches it (within lead_in_tolerance_m) or "
        "lead_in_timeout_s passes. 0: episodes start on the reference.",
    )
    lead_in_levels: int = field(
        default=0,
        doc="A start curriculum over the lead-in (training only): each env at level k of lead_in_levels draws up "
        "to lead_in_m x k / lead_in_levels, one level up after a success, one down otherwise; it starts at 0. "
        "0: every episode draws from the whole range (as trials do).",
    )
    lead_in_speed: float = field(
        default=0.0,
        doc="How the reference waits during a lead-in. 0: held at its start frame until the pelvis arrives. > 0: its "
        "start frame walks in from where the episode began, moved forward at this speed (m/s), so that robot and "
        "reference arrive together; the clock starts when it arrives.",
    )
    lead_in_tolerance_m: float = field(default=0.05, doc="The clock starts this close behind the start frame, m.")
    lead_in_timeout_s: float = field(default=3.0, doc="The clock starts after this long at the latest, s.")
    hold_s: float = field(default=1.0, doc="Seconds the final pose is held after the motion: success needs it.")
    success_distance: float = field(default=0.15, doc="Success: pelvis within this of the final reference, m.")
    observations: dict[str, list[str]] = field(doc=f"Groups -> terms: {', '.join(TRACKING_OBSERVATIONS)}.")
    proprio_layout: str = field(
        default="tracking",
        doc="Order and scale of the proprioception's first blocks (llp.sim.proprio): tracking (the trackers') or "
        "locomotion (the terrain env's).",
    )
    height_scan: HeightScanConfig = field(
        default_factory=HeightScanConfig, doc="Scan grid of the height_scan term (the locomotion task's default)."
    )
    backend: str = field(default="mujoco", doc="Physics engine: mujoco or warp (as the terrain env's).")
    device: str = field(default="cpu", doc="Where the warp backend runs: cpu, cuda or cuda:N.")

    @property
    def policy_dt(self) -> float:
        return self.physics_dt * self.decimation

    def validate(self, path: str) -> None:
        p = f"{path}." if path else ""
        check(self.physics_dt > 0 and self.decimation >= 1, f"{p}decimation", "needs physics_dt > 0, decimation >= 1")
        check(self.action_offset in ("reference", "default"), f"{p}action_offset", "must be reference or default")
        check(self.action_scale > 0, f"{p}action_scale", "must be positive")
        check_backend(self.backend, self.device, path)
        check(self.hold_s >= 0, f"{p}hold_s", "must be >= 0")
        check(0 <= self.start_at_zero <= 1, f"{p}start_at_zero", "must be in [0, 1]")
        check(self.start_window_s is None or self.start_window_s >= 0, f"{p}start_window_s", "must be >= 0 or null")
        self.adaptive_starts.validate(f"{p}adaptive_starts")
        check(0 <= self.start_velocity_share <= 1, f"{p}start_velocity_share", "must be in [0, 1]")
        check(self.start_window_s is None or self.adaptive_starts.bin_s == 0, f"{p}adaptive_starts.bin_s",
              "adaptive starts span the whole motion: not with start_window_s")  # fmt: skip
        check(self.start_posture in ("reference", "default"), f"{p}start_posture", "must be reference or default")
        if self.friction is not None:
            lo, hi = self.friction
            check(0 < lo <= hi, f"{p}friction", f"[{lo}, {hi}]: need 0 < low <= high")
        check(self.lateral_m >= 0, f"{p}lateral_m", "must be >= 0")
        check(0 <= self.walking_starts <= 1, f"{p}walking_starts", "must be in [0, 1]")
        check(self.walking_lead_in_m >= 0, f"{p}walking_lead_in_m", "must be >= 0")
        check(self.lead_in_m >= 0, f"{p}lead_in_m", "must be >= 0")
        check(self.walking_lead_in_m == 0 or self.lead_in_m == 0, f"{p}walking_lead_in_m",
              "a lead-in for walking starts alone, or lead_in_m for every episode: not both")  # fmt: skip
        unheld = self.terminations.walking_unheld_z
        check(unheld is None or unheld > 0, f"{p}terminations.walking_unheld_z", "must be > 0 (or null)")
        check(self.terminations.contact_threshold > 0, f"{p}terminations.contact_threshold", "must be > 0")
        tilt, height = self.terminations.max_tilt, self.terminations.min_base_height
        check(tilt is None or 0 < tilt < 3.2, f"{p}terminations.max_tilt", "radians in (0, pi) (or null)")
        check(height is None or height > 0, f"{p}terminations.min_base_height", "must be > 0 (or null)")
        check(self.lead_in_levels >= 0, f"{p}lead_in_levels", "must be >= 0")
        check(self.lead_in_speed >= 0, f"{p}lead_in_speed", "must be >= 0")
        check(self.lead_in_tolerance_m >= 0, f"{p}lead_in_tolerance_m", "must be >= 0")
        check(self.lead_in_timeout_s > 0, f"{p}lead_in_timeout_s", "must be > 0")
        check(self.proprio_layout in ("tracking", "locomotion"), f"{p}proprio_layout", "must be tracking or locomotion")
        check(len(self.tracked_bodies) > 0, f"{p}tracked_bodies", "needs at least one body")
        for name, term in self.rewards.items():
            where = f"{p}rewards.{name}"
            check(name in TRACKING_REWARDS, where, f"unknown term; allowed: {', '.join(TRACKING_REWARDS)}")
            if TRACKING_REWARDS[name] == "penalty":
                check(term.weight <= 0, f"{where}.weight", f"{name} is a penalty: its weight must be <= 0")
            else:
                check(term.weight >= 0, f"{where}.weight", f"{name} is a reward: its weight must be >= 0")
                check(term.std is not None and term.std > 0, f"{where}.std", "a kernel reward needs std > 0")
        for group, terms in self.observations.items():
            for i, term in enumerate(terms):
                check(
                    term in TRACKING_OBSERVATIONS,
                    f"{p}observations.{group}[{i}]",
                    f"got {term!r}, allowed values: {', '.join(TRACKING_OBSERVATIONS)}",
                )


@dataclass
class Lane:
    """One more reference for a tracking env, with its own box (a skill's library entry at another height)."""

    qpos: np.ndarray  # [T, nq], the motion's start at x = y = 0 like the main reference's
    obstacle: ObstacleBox
    contacts: list[Contact]
    reference_id: str = ""


@dataclass
class TrackingEnvConfig:
    """Everything a tracking env needs, picklable for Ray: the task and the reference with its obstacle; with
    ``lanes``, more references of the same skill, each over its own box (env i tracks lane i mod lanes, the main
    reference being lane 0; with ``lane_shares``, lane k gets that share of the envs, interleaved)."""

    task: TrackingTaskConfig
    qpos: np.ndarray  # [T, nq] the reference
    fps: float
    obstacle: ObstacleBox
    contacts: list[Contact]
    reference_id: str = ""
    lanes: list[Lane] = dataclass_field(default_factory=list)
    lane_shares: list[float] = dataclass_field(default_factory=list)  # envs per lane, relative; []: equal
    walking_states: np.ndarray | None = None  # [M, D] the teacher's gait (llp.motion.walking_states)

    @property
    def policy_dt(self) -> float:
        return self.task.policy_dt

    def references(self) -> list[Lane]:
        """Every reference in lane order, the main one first."""
        return [Lane(self.qpos, self.obstacle, self.contacts, self.reference_id), *self.lanes]

    def __post_init__(self) -> None:
        if abs(self.fps * self.task.policy_dt - 1.0) > 1e-6:
            raise ValueError(
                f"reference {self.reference_id!r} runs at {self.fps} fps; the tracking policy at "
                f"{1 / self.task.policy_dt:g} Hz needs one reference frame per policy step"
            )
        if self.task.walking_starts > 0 and (self.walking_states is None or len(self.walking_states) == 0):
            raise ValueError(f"walking_starts {self.task.walking_starts} needs recorded walking states "
                             "(TrackingEnvConfig.walking_states: the stage's teacher input records them)")  # fmt: skip
        if self.lane_shares and (len(self.lane_shares) != len(self.lanes) + 1 or min(self.lane_shares) <= 0):
            raise ValueError(f"lane_shares {list(self.lane_shares)}: one share > 0 per reference "
                             f"({[lane.reference_id for lane in self.references()]})")  # fmt: skip
        frames = [c.frame for c in self.contacts]
        for lane in self.references():
            name, q = lane.reference_id, lane.qpos
            if q.ndim != 2 or len(q) < 2:
                raise ValueError(f"reference {name!r} needs at least 2 frames, got shape {q.shape}")
            if q.shape[1] != self.qpos.shape[1]:
                raise ValueError(f"reference {name!r} has {q.shape[1]} qpos columns, {self.reference_id!r} "
                                 f"{self.qpos.shape[1]}: one robot per env")  # fmt: skip
            theirs = [c.frame for c in lane.contacts]
            if theirs != frames:
                raise ValueError(f"reference {name!r} has contacts on {theirs}, {self.reference_id!r} on {frames}: "
                                 "lanes of one skill share their contact frames")  # fmt: skip


def tracking_task(name: str = "tracking", robot: str = "lightbot0_like", overrides: dict[str, Any] | None = None):
    """conf/task/<name>.yaml on ``robot`` with ``overrides`` merged on top, validated."""
    from llp.config.files import named
    from llp.config.schema import build, merge

    data = merge(named("task", name), {"robot": named("robot", robot), **sim_defaults()})
    if overrides:
        data = merge(data, overrides)
    return build(TrackingTaskConfig, data)


@dataclass
class ReferenceKinematics:
    """A reference with everything the tracking env compares against, per frame; the last frame repeated for
    the hold, with zero velocity."""

    qpos: np.ndarray  # [T, nq]
    qvel: np.ndarray  # [T, nv]
    joint_pos: np.ndarray  # [T, nu] actuated joints, actuator order
    joint_vel: np.ndarray  # [T, nu]
    body_pos: np.ndarray  # [T, B, 3] tracked bodies, world (= scene) frame
    body_vel: np.ndarray  # [T, B, 3]
    contact_pos: np.ndarray  # [T, C, 3] intended-contact frames
    contact_active: np.ndarray  # [T, C] bool: the contact's window holds that frame
    gravity: np.ndarray  # [T, 3] gravity in the pelvis frame
    motion_frames: int  # frames before the hold

    @property
    def num_frames(self) -> int:
        return len(self.qpos)


def reference_kinematics(
    model, qpos: np.ndarray, fps: float, bodies: list[int], contact_bodies: list[int], contacts: list[Contact],
    joint_qpos: np.ndarray, joint_qvel: np.ndarray, hold_frames: int,
) -> ReferenceKinematics:  # fmt: skip
    """Forward kinematics of ``qpos`` [T, nq] on ``model``: body and contact positions, velocities by finite
    differences (mj_differentiatePos for the free joint)."""
    import mujoco

    data = mujoco.MjData(model)
    q = np.concatenate([qpos, np.repeat(qpos[-1:], hold_frames, axis=0)])
    T = len(q)
    qvel = np.zeros((T, model.nv))
    for t in range(len(qpos) - 1):
        mujoco.mj_differentiatePos(model, qvel[t], 1.0 / fps, qpos[t], qpos[t + 1])
    if len(qpos) > 1 and hold_frames == 0:
        qvel[len(qpos) - 1] = qvel[len(qpos) - 2]
    body_pos = np.zeros((T, len(bodies), 3))
    contact_pos = np.zeros((T, len(contact_bodies), 3))
    gravity = np.zeros((T, 3))
    for t in range(T):
        data.qpos[:] = q[t]
        mujoco.mj_kinematics(model, data)
        body_pos[t] = data.xpos[bodies]
        contact_pos[t] = data.xpos[contact_bodies]
        gravity[t] = data.xmat[bodies[0]].reshape(3, 3).T @ np.array([0.0, 0.0, -1.0])
    body_vel = np.zeros_like(body_pos)
    body_vel[:-1] = (body_pos[1:] - body_pos[:-1]) * fps
    times = np.arange(T) / fps
    active = np.zeros((T, len(contacts)), dtype=bool)
    for c, contact in enumerate(contacts):
        active[:, c] = (times >= contact.start) & (times <= contact.end)
    active[len(qpos) :] = active[len(qpos) - 1]  # the hold keeps the last frame's contacts
    return ReferenceKinematics(
        qpos=q, qvel=qvel, joint_pos=q[:, joint_qpos], joint_vel=qvel[:, joint_qvel], body_pos=body_pos,
        body_vel=body_vel, contact_pos=contact_pos, contact_active=active, gravity=gravity, motion_frames=len(qpos),
    )  # fmt: skip
