"""Making a keyframed seed physically consistent: sampling-based model-predictive control in MuJoCo.

A seed solved from keyframes is kinematic: nothing makes its momentum add up. The 45 cm step-up showed what that
costs: its tracker follows the seed up to the transfer onto the box and falls from every start before its end
(docs/experiments/2026-12-06-step-up-45.md). Here the robot itself is driven along the seed in the tracking
task's physics, and what it does becomes the motion.

The planner is MPPI (Williams et al. 2017) as MuJoCo MPC's sampling planners run it (Howell et al. 2022):

- the control is the seed's next joint positions plus an offset, a piecewise-linear spline with a knot every
  ``knot_s`` over a horizon of ``horizon_s``;
- every control step, ``samples`` offset splines (the current one and noisy copies) are rolled out from the
  robot's state; each is scored by how far the pelvis, the ankles and the hands stray from the seed's, how far
  the pelvis tilts from the seed's, and how far the joints stray;
- the cost-weighted mean of the splines moves the robot one control step, and the spline shifts on.

Past the seed's end it holds the last frame for ``hold_s``, to judge whether the robot stays where the seed
ends; the motion kept is the seed's length. (Keeping the hold too made a tracker's round worse, 53% -> 9%:
its random start frames then fell on the standing half of a motion twice as long; docs/experiments/
2026-12-06-step-up-45.md, section 10.) A try succeeds when
the pelvis ends within the tracking task's success distance of the seed's last frame and never drops more than its
fall height below the seed's; planner seeds are tried in turn until one does. The motion kept is the state at
every control step: a rollout of the simulator, so its momentum adds up by construction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from llp.config.schema import check, field


@dataclass(kw_only=True)
class PhysicsRefinement:
    """How a seed is driven through the simulator (a seed file's ``physics:`` block)."""

    samples: int = field(default=128, doc="Rollouts per control step, the current plan among them.")
    noise: float = field(default=0.2, doc="Standard deviation of the sampled joint-target offsets at each knot, rad.")
    horizon_s: float = field(default=0.5, doc="How far ahead each rollout runs, seconds.")
    knot_s: float = field(default=0.1, doc="Spacing of the offset spline's knots, seconds.")
    temperature: float = field(
        default=0.1, doc="MPPI's temperature, as a share of the spread between the median and the best cost."
    )
    hold_s: float = field(default=1.0, doc="Seconds past the seed's end that hold its last frame.")
    tries: int = field(default=3, doc="Planner seeds tried in turn until one ends standing where the seed ends.")
    seed: int = field(default=0, doc="The first planner seed.")
    frame_weights: dict[str, float] = field(
        default_factory=lambda: {
            "pelvis": 10.0,
            "left_foot": 10.0,
            "right_foot": 10.0,
            "left_hand": 1.0,
            "right_hand": 1.0,
        },  # fmt: skip
        doc="Weight of each retargeting frame's squared position error (m^2) per control step.",
    )
    velocity_weight: float = field(
        default=0.05,
        doc="Weight of each weighted frame's squared velocity error ((m/s)^2) per control step: no stamping.",
    )
    upright_weight: float = field(default=2.0, doc="Weight of the pelvis's squared up-axis error per control step.")
    joint_weight: float = field(default=0.1, doc="Weight of the joints' squared error (rad^2) per control step.")

    def validate(self, path: str) -> None:
        check(self.samples >= 2, f"{path}.samples", "needs 2 or more")
        check(self.noise > 0, f"{path}.noise", "must be > 0")
        check(0 < self.knot_s <= self.horizon_s, f"{path}.knot_s", "must be in (0, horizon_s]")
        check(self.temperature > 0, f"{path}.temperature", "must be > 0")
        check(self.hold_s >= 0, f"{path}.hold_s", "must be >= 0")
        check(self.tries >= 1, f"{path}.tries", "must be >= 1")
        for name, w in self.frame_weights.items():
            check(w >= 0, f"{path}.frame_weights.{name}", "must be >= 0")


@dataclass
class Refined:
    """The physics motion at the seed's frames, and what each try did."""

    qpos: np.ndarray | None  # at the seed's frames, [T, nq]; None when no try succeeded
    tries: list[dict]

    @property
    def succeeded(self) -> bool:
        return self.qpos is not None


class _Scene:
    """The tracking task's physics over the seed's obstacle, with a position sensor per weighted frame."""

    def __init__(self, task, obstacle, retarget_cfg, frames: list[str]):
        import mujoco

        from llp.motion.scene import add_obstacle
        from llp.sim.robot import load_robot_spec

        spec = load_robot_spec(task.robot)
        spec.option.timestep = task.physics_dt
        spec.option.iterations = task.solver_iterations
        add_obstacle(spec, obstacle, name="obstacle", floor=True)
        for key in frames:
            f = retarget_cfg.frames[key]
            objtype = mujoco.mjtObj.mjOBJ_SITE if f.type == "site" else mujoco.mjtObj.mjOBJ_BODY
            spec.add_sensor(name=f"refine_{key}", type=mujoco.mjtSensor.mjSENS_FRAMEPOS, objtype=objtype,
                            objname=f.frame)  # fmt: skip
        for key in frames:
            f = retarget_cfg.frames[key]
            objtype = mujoco.mjtObj.mjOBJ_SITE if f.type == "site" else mujoco.mjtObj.mjOBJ_BODY
            spec.add_sensor(name=f"refine_{key}_velocity", type=mujoco.mjtSensor.mjSENS_FRAMELINVEL, objtype=objtype,
                            objname=f.frame)  # fmt: skip
        pelvis = retarget_cfg.frames["pelvis"].frame
        spec.add_sensor(name="refine_up", type=mujoco.mjtSensor.mjSENS_FRAMEZAXIS, objtype=mujoco.mjtObj.mjOBJ_BODY,
                        objname=pelvis)  # fmt: skip
        self.model = m = spec.compile()
        self.data = mujoco.MjData(m)
        joints = [int(m.actuator_trnid[a, 0]) for a in range(m.nu)]
        self.joint_qpos = np.array([m.jnt_qposadr[j] for j in joints])
        self.lo, self.hi = m.jnt_range[joints, 0], m.jnt_range[joints, 1]
        self.kind = mujoco.mjtState.mjSTATE_FULLPHYSICS
        self.qpos_at = 1  # a full-physics state starts with the time, then qpos

    def sensors(self, qpos: np.ndarray) -> np.ndarray:
        """The sensor readings [T, nsensordata] of a motion's frames, at rest."""
        import mujoco

        m, d = self.model, self.data
        out = np.zeros((len(qpos), m.nsensordata))
        for t, q in enumerate(qpos):
            d.qpos[:], d.qvel[:] = q, 0.0
            mujoco.mj_forward(m, d)
            out[t] = d.sensordata
        return out

    def state(self, qpos: np.ndarray) -> np.ndarray:
        import mujoco

        m, d = self.model, self.data
        d.qpos[:], d.qvel[:] = qpos, 0.0
        mujoco.mj_forward(m, d)
        out = np.zeros(mujoco.mj_stateSize(m, self.kind))
        mujoco.mj_getState(m, d, out, self.kind)
        return out


def refine(qpos: np.ndarray, fps: float, obstacle, retarget_cfg, task, cfg: PhysicsRefinement, accept=None,
           threads: int = 1, log=print) -> Refined:  # fmt: skip
    """Drive the robot along ``qpos`` (a seed's frames at ``fps``) over ``obstacle`` in ``task``'s physics (a
    tracking task: its robot, physics step, decimation, success distance and fall height). ``accept`` (a motion
    -> (passed, reason)) also judges each try that ends where the seed ends: a try it rejects does not count."""
    control_dt = task.physics_dt * task.decimation
    if abs(control_dt * fps - 1.0) > 1e-6:
        raise ValueError(f"the seed's {fps} fps is not the tracking task's control rate ({1 / control_dt:.1f} Hz)")
    unknown = sorted(set(cfg.frame_weights) - set(retarget_cfg.frames))
    if unknown:
        raise ValueError(f"physics.frame_weights names {unknown}, not frames of the robot's retargeting config")
    planner = _Planner(qpos, fps, obstacle, retarget_cfg, task, cfg, threads)
    tries = []
    try:
        for k in range(cfg.tries):
            began = time.time()
            motion = planner.drive(cfg.seed + k)
            report = _judge(motion, qpos, task)
            report.update(seed=cfg.seed + k, seconds=round(time.time() - began, 1), rejected="")
            if report["stood"] and accept is not None:
                passed, reason = accept(motion[: len(qpos)])
                report["rejected"] = "" if passed else reason
            tries.append(report)
            verdict = "stands where the seed ends" if report["stood"] else "does not end where the seed ends"
            if report["rejected"]:
                verdict += f", but {report['rejected']}"
            log(f"[llp] physics refinement, try {k + 1} of {cfg.tries} (planner seed {cfg.seed + k}): {verdict}; "
                f"the pelvis {100 * report['final_error_m']:.1f} cm off at the end, at most "
                f"{100 * report['deepest_drop_m']:.1f} cm below the seed's ({report['seconds']:.0f} s)")  # fmt: skip
            if report["stood"] and not report["rejected"]:
                return Refined(qpos=motion[: len(qpos)], tries=tries)
    finally:
        planner.close()
    return Refined(qpos=None, tries=tries)


class _Planner:
    """MPPI over offset splines to the seed's joint targets, on MuJoCo's batched rollouts."""

    def __init__(self, qpos: np.ndarray, fps: float, obstacle, retarget_cfg, task, cfg: PhysicsRefinement,
                 threads: int):  # fmt: skip
        from mujoco import rollout

        self.qpos, self.task, self.cfg = qpos, task, cfg
        frames = [k for k, w in cfg.frame_weights.items() if w > 0]
        self.scene = scene = _Scene(task, obstacle, retarget_cfg, frames)
        self.reference = scene.sensors(qpos)
        positions, velocities = slice(0, 3 * len(frames)), slice(3 * len(frames), 6 * len(frames))
        self.reference[:, velocities] = np.gradient(self.reference[:, positions], 1.0 / fps, axis=0)
        self.weights = np.concatenate(
            [np.full(3, cfg.frame_weights[k]) for k in frames]
            + [np.full(3 * len(frames), cfg.velocity_weight), np.full(3, cfg.upright_weight)]
        )
        self.targets = qpos[:, scene.joint_qpos]
        self.frames_total = len(qpos) + int(round(cfg.hold_s * fps))
        self.horizon = max(1, int(round(cfg.horizon_s * fps)))
        self.spacing = max(1, int(round(cfg.knot_s * fps)))
        self.knots = -(-self.horizon // self.spacing) + 1
        steps = np.arange(self.horizon)
        self.upper = np.minimum(steps // self.spacing + 1, self.knots - 1)
        self.frac = ((steps % self.spacing) / self.spacing)[None, :, None]
        self.pool = rollout.Rollout(nthread=threads if threads > 1 else 0)

    def close(self) -> None:
        self.pool.close()

    def drive(self, seed: int) -> np.ndarray:
        """One try: the states' qpos at every control step, the seed's frames then the hold's."""
        scene, m, cfg = self.scene, self.scene.model, self.cfg
        rng = np.random.default_rng(seed)
        plan = np.zeros((self.knots, m.nu))
        state = scene.state(self.qpos[0])
        motion = [state[scene.qpos_at : scene.qpos_at + m.nq].copy()]
        for t in range(self.frames_total - 1):
            ahead = np.minimum(np.arange(t + 1, t + 1 + self.horizon), len(self.qpos) - 1)
            splines = plan[None] + rng.normal(0.0, cfg.noise, size=(cfg.samples, self.knots, m.nu))
            splines[0] = plan
            cost = self._costs(state, splines, ahead)
            w = np.exp(-(cost - cost.min()) / (cfg.temperature * (np.median(cost) - cost.min()) + 1e-12))
            plan = (w[:, None, None] * splines).sum(axis=0) / w.sum()
            first = np.clip(self.targets[ahead[0]] + plan[0], scene.lo, scene.hi)  # the spline's first step
            moved, _ = self.pool.rollout(m, [scene.data], state[None],
                                         np.repeat(first[None, None], self.task.decimation, 1))  # fmt: skip
            state = moved[0, -1].copy()
            motion.append(state[scene.qpos_at : scene.qpos_at + m.nq].copy())
            plan = _shifted(plan, self.spacing)
        return np.array(motion)

    def _costs(self, state: np.ndarray, splines: np.ndarray, ahead: np.ndarray) -> np.ndarray:
        """Each spline's cost over the horizon from ``state`` (frames ``ahead`` of the seed)."""
        scene, decimation = self.scene, self.task.decimation
        offsets = splines[:, self.upper - 1] * (1 - self.frac) + splines[:, self.upper] * self.frac
        ctrl = np.clip(self.targets[ahead][None] + offsets, scene.lo, scene.hi)
        states, sensed = self.pool.rollout(scene.model, [scene.data], np.repeat(state[None], len(splines), 0),
                                           np.repeat(ctrl, decimation, axis=1))  # fmt: skip
        at = slice(decimation - 1, None, decimation)  # the end of each control step
        error = ((sensed[:, at] - self.reference[ahead][None]) ** 2 * self.weights).sum(axis=(1, 2))
        joints = states[:, at][..., scene.qpos_at + scene.joint_qpos] - self.targets[ahead][None]
        return error + self.cfg.joint_weight * (joints**2).sum(axis=(1, 2))


def _shifted(plan: np.ndarray, spacing: int) -> np.ndarray:
    """The spline one control step later: each knot moves to where the spline is one step after it."""
    knots = len(plan)
    out = np.empty_like(plan)
    for k in range(knots):
        s = (k * spacing + 1) / spacing
        j = min(int(s), knots - 2)
        f = min(s - j, 1.0)
        out[k] = plan[j] * (1 - f) + plan[j + 1] * f
    return out


def _judge(motion: np.ndarray, qpos: np.ndarray, task) -> dict:
    """Did the robot end where the seed ends (the tracking task's success distance, its fall height)?"""
    n = min(len(motion), len(qpos))
    final = float(np.linalg.norm(motion[-1, :3] - qpos[-1, :3]))
    drop = float(np.max(qpos[:n, 2] - motion[:n, 2]))
    drop = max(drop, float(np.max(qpos[-1, 2] - motion[n:, 2], initial=0.0)))
    stood = final < task.success_distance and drop < task.terminations.anchor_z
    return {"stood": bool(stood), "final_error_m": final, "deepest_drop_m": drop}
