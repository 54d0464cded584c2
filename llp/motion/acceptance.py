"""The acceptance tests every reference passes before it is used, each recorded with its numbers.

* kinematic: joint positions inside the robot's limits, joint speeds under the configured limit;
* scene: no robot geometry deeper than ``penetration_limit`` in the obstacle or the floor, and every
  intended contact within ``contact_tolerance`` of its surface (median over its window);
* dynamic: the reference executed in physics; recorded as not run until a tracking policy has run it;
* heading: how far a physics rollout's root turns away from the seed's heading, frame by frame (a rollout
  becomes the next round's proposal, so a turn compounds over the rounds); judged only against a set limit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from llp.motion.scene import Contact, SceneModel

# physics rollouts are checked with twice the IK's tolerances: soft contacts sink about 1 cm, joints overshoot
# their limits by a few hundredths of a radian and their speed limit briefly
PHYSICS_SLACK = 2.0


@dataclass
class Acceptance:
    """One check's verdict: ``passed`` is None when the check has not been run."""

    name: str
    passed: bool | None
    numbers: dict[str, float] = field(default_factory=dict)
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def kinematic(
    scene: SceneModel, qpos: np.ndarray, fps: float, joint_speed_limit: float, tol: float = 1e-3
) -> Acceptance:
    """Joint limits and joint speeds along a trajectory qpos [T, nq]."""
    import mujoco

    m = scene.model
    hinges = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE and m.jnt_limited[j]]
    adr = np.array([m.jnt_qposadr[j] for j in hinges])
    q = qpos[:, adr]
    lo, hi = m.jnt_range[hinges, 0], m.jnt_range[hinges, 1]
    over = np.maximum(lo[None] - q, q - hi[None]).max(axis=0)  # per joint, worst excursion (negative: inside)
    speed = np.abs(np.diff(q, axis=0)).max(axis=0) * fps if len(q) > 1 else np.zeros(len(hinges))
    worst_limit, worst_speed = int(np.argmax(over)), int(np.argmax(speed))
    numbers = {"limit_excursion_rad": float(max(over.max(), 0.0)), "max_joint_speed": float(speed.max())}
    reasons = []
    if over.max() > tol:
        reasons.append(f"{m.joint(hinges[worst_limit]).name} leaves its range by {over.max():.3f} rad")
    if speed.max() > joint_speed_limit * (1 + 1e-6):
        reasons.append(f"{m.joint(hinges[worst_speed]).name} moves at {speed.max():.1f} rad/s > {joint_speed_limit}")
    return Acceptance("kinematic", not reasons, numbers, "; ".join(reasons))


def scene_relation(
    scene: SceneModel,
    qpos: np.ndarray,
    fps: float,
    contacts: list[Contact],
    penetration_limit: float,
    contact_tolerance: float,
) -> Acceptance:
    """Penetration of the robot into the obstacle and the floor, and the distance of each intended contact."""
    depth = np.zeros(len(qpos))  # deepest penetration per frame
    worst_geom = np.zeros(len(qpos), dtype=np.int64)
    distances = {i: [] for i in range(len(contacts))}
    windows = [(int(np.ceil(c.start * fps)), int(np.floor(c.end * fps))) for c in contacts]
    for t, q in enumerate(qpos):
        scene.set_qpos(q)
        d = np.array(
            [min(scene.distance(g, scene.box_id), scene.distance(g, scene.floor_id)) for g in scene.robot_geoms]
        )
        depth[t], worst_geom[t] = max(-d.min(), 0.0), scene.robot_geoms[int(np.argmin(d))]
        for i, (c, (a, b)) in enumerate(zip(contacts, windows)):
            if a <= t <= b:
                surface = scene.box_id if c.surface == "top" else scene.floor_id
                distances[i].append(min(scene.distance(g, surface) for g in scene.frame_geoms[c.frame]))
    numbers = {"max_penetration_m": float(depth.max())}
    reasons = []
    if depth.max() > penetration_limit:
        t = int(np.argmax(depth))
        name = scene.model.geom(int(worst_geom[t])).name or f"geom {int(worst_geom[t])}"
        reasons.append(f"{name} is {100 * depth.max():.1f} cm inside the scene at {t / fps:.2f} s")
    worst = 0.0
    for i, c in enumerate(contacts):
        if not distances[i]:
            reasons.append(f"contact {c.frame} on {c.surface} has no frame in [{c.start}, {c.end}] s")
            continue
        med = float(np.median(distances[i]))
        worst = max(worst, abs(med))
        if med > contact_tolerance:
            reasons.append(f"{c.frame} stays {100 * med:.1f} cm from the {c.surface} in [{c.start}, {c.end}] s")
    numbers["worst_contact_distance_m"] = worst
    return Acceptance("scene", not reasons, numbers, "; ".join(reasons))


def heading_drift_deg(qpos: np.ndarray, seed_qpos: np.ndarray) -> np.ndarray:
    """Per frame of ``qpos`` [T, nq], its root's yaw minus the seed's at the same point of the motion (frames
    matched by their share of the motion), wrapped to [-180, 180) degrees."""
    from llp.sim.math3d import yaw_and_gravity

    at = np.rint(np.linspace(0, len(seed_qpos) - 1, len(qpos))).astype(np.int64)
    yaw, _ = yaw_and_gravity(np.asarray(qpos[:, 3:7], dtype=np.float64))
    seed_yaw, _ = yaw_and_gravity(np.asarray(seed_qpos[at, 3:7], dtype=np.float64))
    return (np.degrees(yaw - seed_yaw) + 180.0) % 360.0 - 180.0


def heading(qpos: np.ndarray, seed_qpos: np.ndarray, limit_deg: float) -> Acceptance:
    """The largest turn of the root away from the seed's heading must stay within ``limit_deg``."""
    drift = np.abs(heading_drift_deg(qpos, seed_qpos))
    numbers = {"max_heading_drift_deg": float(drift.max()), "final_heading_drift_deg": float(drift[-1])}
    why = ""
    if drift.max() > limit_deg:
        why = f"the root turns {drift.max():.1f} deg off the seed's heading (> {limit_deg})"
    return Acceptance("heading", not why, numbers, why)


def not_run(name: str, why: str) -> Acceptance:
    return Acceptance(name, None, {}, why)
