"""Authored motion seeds: contact keyframes around an obstacle, solved into a smooth robot trajectory.

No human-motion data can be downloaded where this project is built, so it ships its own small seeds
(conf/seeds/*.yaml). The author places the pelvis, the feet (ankle points) and the hands at key times,
in the motion frame (x forward from the start, z up from the floor), and names the intended contacts.
The tool interpolates each waypoint track with monotone cubic Hermite splines (a track that holds still
between two keyframes stays still) and solves the tracks into joint trajectories with the retargeter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llp.config.schema import check, field
from llp.motion.physics_refinement import PhysicsRefinement
from llp.motion.retarget import Retargeter, pitch_yaw_rotation
from llp.motion.scene import Contact, ObstacleBox

TRACKS = ("pelvis", "left_foot", "right_foot", "left_hand", "right_hand")


@dataclass(kw_only=True)
class Keyframe:
    """Where the pelvis, the ankles and the hands are at time ``t``."""

    t: float = field(doc="Seconds from the start.")
    pelvis: list[float] = field(doc="x, y, z of the pelvis, metres.")
    pelvis_pitch: float = field(default=0.0, doc="Forward lean of the pelvis, radians.")
    left_foot: list[float] = field(doc="x, y, z of the left ankle (0.045 m above a planted sole).")
    right_foot: list[float] = field(doc="x, y, z of the right ankle.")
    left_foot_pitch: float = field(default=0.0, doc="Toes down (heel raised) of the left sole, radians; 0 is flat.")
    right_foot_pitch: float = field(default=0.0, doc="Toes down (heel raised) of the right sole, radians.")
    pelvis_yaw: float = field(default=0.0, doc="Turn of the pelvis about the vertical, radians; + to the left.")
    pelvis_roll: float = field(
        default=0.0, doc="Sideways lean of the pelvis about its own forward axis, radians; + lowers its right side."
    )
    left_foot_yaw: float = field(default=0.0, doc="Turn of the left sole about the vertical, radians.")
    right_foot_yaw: float = field(default=0.0, doc="Turn of the right sole about the vertical, radians.")
    left_hand: list[float] = field(doc="x, y, z of the left hand's tip.")
    right_hand: list[float] = field(doc="x, y, z of the right hand's tip.")

    def validate(self, path: str) -> None:
        for name in TRACKS:
            check(len(getattr(self, name)) == 3, f"{path}.{name}", "needs x, y, z")


@dataclass(kw_only=True)
class SeedSpec:
    """One shipped seed (conf/seeds/<id>.yaml)."""

    id: str = field(doc="Seed name.")
    skill: str = field(doc="climb_step, speed_vault or reverse_vault.")
    made_by: str = field(doc="How the seed was made, kept in every reference grown from it.")
    robot: str = field(default="lightbot0_like", doc="conf/robot/<name>.yaml the keyframes are placed for.")
    obstacle: ObstacleBox = field(doc="The paired obstacle.")
    fps: float = field(default=50.0, doc="Frame rate of the solved trajectory (the policy rate).")
    keyframes: list[Keyframe] = field(doc="At least two, in time order, the first at t = 0.")
    contacts: list[Contact] = field(doc="Intended contacts with the obstacle's top and the floor.")
    frame_costs: dict[str, float] = field(
        default_factory=dict,
        doc="Position costs of the IK's frame tasks that differ for this seed (the rest as conf/retarget/<robot>.yaml):"
        " hands that carry weight on the box must be where they are placed, not where a straight arm puts them.",
    )
    growth_frame_costs: dict[str, float] = field(
        default_factory=dict,
        doc="Position costs of the growth's IK where they differ from frame_costs (the seed itself is solved with "
        "frame_costs): hands that pass close over the top must follow their raised targets (llp.motion.growth).",
    )
    physics: PhysicsRefinement | None = field(
        default=None,
        doc="Drive the solved keyframes through the simulator and keep what the robot does (llp.motion."
        "physics_refinement); null keeps the kinematic motion.",
    )

    def validate(self, path: str) -> None:
        check(self.skill in ("climb_step", "speed_vault", "reverse_vault"), f"{path}.skill",
              "must be climb_step, speed_vault or reverse_vault")  # fmt: skip
        times = [k.t for k in self.keyframes]
        check(len(times) >= 2 and times[0] == 0.0, f"{path}.keyframes", "needs two or more, the first at t = 0")
        check(all(a < b for a, b in zip(times, times[1:])), f"{path}.keyframes", f"times must increase: {times}")
        for i, c in enumerate(self.contacts):
            check(c.end <= times[-1], f"{path}.contacts[{i}].end", f"past the last keyframe ({times[-1]} s)")
        for where, costs in (("frame_costs", self.frame_costs), ("growth_frame_costs", self.growth_frame_costs)):
            for name, cost in costs.items():
                check(name in TRACKS, f"{path}.{where}.{name}", f"not a track; allowed: {', '.join(TRACKS)}")
                check(cost > 0, f"{path}.{where}.{name}", "must be > 0")

    @property
    def duration(self) -> float:
        return self.keyframes[-1].t


def seed_retarget_config(spec: SeedSpec, growth: bool = False):
    """The robot's retargeting config with the seed's own frame costs: the IK that solves the seed; with
    ``growth``, the IK that grows it (the growth's costs over the seed's)."""
    from dataclasses import replace

    from llp.motion.retarget import retarget_config

    cfg = retarget_config(spec.robot)
    costs = {**spec.frame_costs, **(spec.growth_frame_costs if growth else {})}
    frames = {k: replace(f, position_cost=costs.get(k, f.position_cost)) for k, f in cfg.frames.items()}
    return replace(cfg, frames=frames)


def seed_spec(name: str) -> SeedSpec:
    from llp.config.files import named
    from llp.config.schema import build

    return build(SeedSpec, named("seeds", name), "seed")


def shipped_seeds() -> list[str]:
    from llp.config.files import CONF_DIR

    return sorted(p.stem for p in (CONF_DIR / "seeds").glob("*.yaml"))


def monotone_hermite(times: np.ndarray, values: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Piecewise cubic through (times, values [K, D]) at ``t``, with Fritsch-Carlson tangents: no overshoot,
    flat where a value holds or turns, zero slope at both ends."""
    h = np.diff(times)
    d = np.diff(values, axis=0) / h[:, None]  # [K-1, D] secant slopes
    m = np.zeros_like(values)
    for k in range(1, len(times) - 1):
        a, b = d[k - 1], d[k]
        same = a * b > 0
        w1, w2 = 2 * h[k] + h[k - 1], h[k] + 2 * h[k - 1]
        m[k] = np.where(same, (w1 + w2) / (w1 / np.where(same, a, 1) + w2 / np.where(same, b, 1)), 0.0)
    seg = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(times) - 2)
    s = (t - times[seg]) / h[seg]
    s = np.clip(s, 0.0, 1.0)[:, None]
    h00, h10, h01, h11 = 2 * s**3 - 3 * s**2 + 1, s**3 - 2 * s**2 + s, -2 * s**3 + 3 * s**2, s**3 - s**2
    hh = h[seg][:, None]
    return h00 * values[seg] + h10 * hh * m[seg] + h01 * values[seg + 1] + h11 * hh * m[seg + 1]


def seed_targets(spec: SeedSpec) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per-frame target positions [T, 3] by track, and pelvis and foot rotations [T, 3, 3] (a sole pitched toes
    down stands on its toes: the heel up, the ankle higher by the toes' lever; yaw turns it about the vertical)."""
    times = np.array([k.t for k in spec.keyframes])
    t = np.arange(int(round(spec.duration * spec.fps)) + 1) / spec.fps
    positions = {n: monotone_hermite(times, np.array([getattr(k, n) for k in spec.keyframes]), t) for n in TRACKS}
    rotations = {}
    for track in ("pelvis", "left_foot", "right_foot"):
        angles = np.array([[getattr(k, f"{track}_pitch"), getattr(k, f"{track}_yaw"), getattr(k, f"{track}_roll", 0.0)]
                           for k in spec.keyframes])  # fmt: skip
        pitch, yaw, roll = monotone_hermite(times, angles, t).T
        # turned about the vertical, pitched about its own y, then leaned about its own x
        rotations[track] = pitch_yaw_rotation(pitch, yaw) @ roll_rotation(roll)
    return positions, rotations


def roll_rotation(roll: np.ndarray) -> np.ndarray:
    """Rx(roll) [T, 3, 3]."""
    c, s = np.cos(roll), np.sin(roll)
    R = np.zeros((len(roll), 3, 3))
    R[:, 0, 0], R[:, 1, 1], R[:, 1, 2], R[:, 2, 1], R[:, 2, 2] = 1.0, c, -s, s, c
    return R


def author(spec: SeedSpec, solver: Retargeter) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The seed's joint trajectory qpos [T, nq] and its target positions."""
    positions, rotations = seed_targets(spec)
    return solver.solve(positions, rotations, spec.fps), positions


def seed_reference(spec: SeedSpec, physics: bool = True, log=print):
    """The seed as the round-0 entry of a reference library: authored, then checked kinematically and against
    its obstacle. A seed with a ``physics`` block is then driven through the simulator, and the entry is what the
    robot did there (the keyframes' motion kept as ``tracked``), checked with a physics rollout's tolerances;
    ``physics=False`` keeps the keyframes' motion. The dynamic check waits for a physics tracking policy."""
    from llp.config.files import named
    from llp.config.schema import build
    from llp.motion import acceptance as A
    from llp.motion.library import Reference
    from llp.motion.scene import SceneModel
    from llp.sim.robot import RobotConfig

    cfg = seed_retarget_config(spec)
    robot_cfg = build(RobotConfig, named("robot", spec.robot), "robot")
    solver = Retargeter(cfg, robot_cfg)
    qpos, positions = author(spec, solver)
    reached = solver.frame_positions(qpos, list(positions))
    ik_error = float(np.mean([np.linalg.norm(reached[k] - positions[k], axis=1).mean() for k in positions]))
    scene = SceneModel(robot_cfg, spec.obstacle, cfg.contact_frames)
    checks = [
        A.kinematic(scene, qpos, spec.fps, cfg.joint_speed_limit),
        A.scene_relation(scene, qpos, spec.fps, spec.contacts, cfg.penetration_limit, cfg.contact_tolerance),
        A.not_run("dynamic", "needs a physics tracking policy (growth rounds)"),
    ]
    checks[0].numbers["mean_ik_error_m"] = ik_error
    common = dict(
        id=f"{spec.id}.r0", skill=spec.skill, seed=spec.id, round=0, parent=None, obstacle=spec.obstacle,
        contacts=spec.contacts, fps=spec.fps,
    )  # fmt: skip
    if spec.physics is None or not physics or not all(a.passed for a in checks[:2]):
        return Reference(**common, made_by=spec.made_by, acceptance=checks, qpos=qpos)
    from llp.motion.tracking import tracking_task

    task = tracking_task("tracking", spec.robot)
    motion, made_by, driven = physical_motion(qpos, spec.fps, scene, spec.contacts, cfg, task, spec.physics, log)
    if motion is None:
        return Reference(**common, made_by=spec.made_by, acceptance=[*checks[:2], driven, checks[2]], qpos=qpos)
    checks = [*physics_checks(scene, motion, spec.fps, spec.contacts, cfg), driven, checks[2]]
    return Reference(**common, made_by=f"{spec.made_by}; {made_by}", acceptance=checks, qpos=motion, tracked=qpos)


def physics_checks(scene, motion: np.ndarray, fps: float, contacts, retarget_cfg) -> list:
    """The kinematic and scene checks of a physics rollout: the IK's limits times ``PHYSICS_SLACK``."""
    from llp.motion import acceptance as A

    slack = A.PHYSICS_SLACK
    return [
        A.kinematic(scene, motion, fps, retarget_cfg.joint_speed_limit * slack, tol=0.05),
        A.scene_relation(
            scene, motion, fps, contacts, retarget_cfg.penetration_limit * slack, retarget_cfg.contact_tolerance * slack
        ),  # fmt: skip
    ]


def physical_motion(qpos: np.ndarray, fps: float, scene, contacts, retarget_cfg, task, cfg: PhysicsRefinement,
                    log=print):  # fmt: skip
    """``qpos`` driven through ``task``'s physics (a tracking task) over ``scene``'s obstacle, each try held to
    ``physics_checks``: (the motion or None, how it was made, the "physics" acceptance with the last try's
    numbers)."""
    from llp.motion import acceptance as A
    from llp.motion.physics_refinement import refine

    def accept(motion: np.ndarray) -> tuple[bool, str]:
        failed = [a for a in physics_checks(scene, motion, fps, contacts, retarget_cfg) if not a.passed]
        return not failed, "; ".join(a.reason for a in failed)

    refined = refine(qpos, fps, scene.obstacle, retarget_cfg, task, cfg, accept=accept, log=log)
    last = refined.tries[-1]
    numbers = {"tries": len(refined.tries), "final_error_m": last["final_error_m"],
               "deepest_drop_m": last["deepest_drop_m"]}  # fmt: skip
    if not refined.succeeded:
        rejected = f"; {last['rejected']}" if last["rejected"] else ""
        why = (f"none of {cfg.tries} planner tries ended where the motion ends and passed the physics checks (the "
               f"last: the pelvis {100 * last['final_error_m']:.1f} cm off{rejected})")  # fmt: skip
        return None, "", A.Acceptance("physics", False, numbers, why)
    made_by = (f"driven through MuJoCo by MPPI ({cfg.samples} rollouts a step over {cfg.horizon_s:g} s, planner "
               f"seed {last['seed']}; llp.motion.physics_refinement)")  # fmt: skip
    return refined.qpos, made_by, A.Acceptance("physics", True, numbers, "")
