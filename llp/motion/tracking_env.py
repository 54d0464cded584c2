"""TrackingEnv: N envs tracking one motion reference over its obstacle, in one MuJoCo batch.

Each env holds the robot, a floor and the reference's box. With lanes (``TrackingEnvConfig.lanes``) the model
holds one box per reference, side by side ``LANE_SPACING`` apart, and env i tracks lane i mod lanes (or each
lane its ``lane_shares``): one skill over several obstacle heights (a skill expert's generalisation).

Training episodes start at a random frame of the reference, in its pose and velocity (reference-state
initialisation, DeepMimic; mjlab samples start frames too), or in the motion's first ``start_window_s``
seconds, in the reference's posture or the default one; they run to the end of the motion plus ``hold_s`` in
its final pose. With ``lead_in_m`` an episode starts up to that far behind its start frame and the
reference's clock waits there until the pelvis has walked up to it (or ``lead_in_timeout_s`` passes): a skill
that starts from a range of distances before its obstacle. With ``lead_in_speed`` the reference does not wait
in place: its start frame walks in from where the episode began at that speed, so robot and reference arrive
together (rewards and terminations read the moved frame), and the clock starts when it arrives. The policy
adds a correction to the reference's next joint positions (``action_offset: reference``) or offsets the default
pose (``default``). ``trial_mode`` starts every episode at the first frame (behind it with a lead-in) and records
each env's trajectory, for the dynamic acceptance test and for taking the best rollout as the repaired reference.

Rewards (each weighted and multiplied by the policy step, as in ``ParkourEnv``):
  anchor_pos      exp(-|p_pelvis - p_ref|^2 / std^2), world frame = the scene's frame
  anchor_ori      exp(-angle(q_pelvis, q_ref)^2 / std^2)
  body_pos        exp(-mean_b |(p_b - p_pelvis) - (p_ref_b - p_ref_pelvis)|^2 / std^2)
  body_lin_vel    exp(-mean_b |v_b - v_ref_b|^2 / std^2)
  anchor_ang_vel  exp(-|w_pelvis - w_ref|^2 / std^2), pelvis frame
  contact_pos     exp(-mean_c |p_c - p_ref_c|^2 / std^2) over the intended contacts active now (1 if none)
  goal            exp(-|p_pelvis - p_goal|^2 / std^2), p_goal the reference's final pelvis position (skill experts)
  action_rate     |a - a_prev|^2
  joint_limit     sum of excursions past the soft joint limits, rad
"""

from __future__ import annotations

import copy
from dataclasses import replace

import mujoco
import numpy as np
import torch

from llp.motion.scene import add_obstacle
from llp.motion.start_sampling import StartSampler
from llp.motion.tracking import ReferenceKinematics, TrackingEnvConfig, reference_kinematics
from llp.motion.walking_states import place, state_width
from llp.sim.backend import physics_batch
from llp.sim.env import StepResult
from llp.sim.math3d import yaw_and_gravity
from llp.sim.proprio import convert_proprio, proprio_head
from llp.sim.robot import default_joint_positions, load_robot_spec
from llp.sim.scene import TERRAIN_FRICTION, add_contact_sensor, contact_force_columns, robot_collision_geoms

LANE_SPACING = 4.0  # m between the lanes' boxes (across the motion): a robot that strays 2 m sideways has fallen


def lane_assignment(num_envs: int, shares: list[float]) -> np.ndarray:
    """[N] each env's lane: lane k gets ``shares[k]`` of the envs, interleaved (smooth weighted round robin:
    env i goes to the lane furthest behind its share); equal shares give env i lane i mod lanes."""
    share = np.asarray(shares, dtype=float) / np.sum(shares)
    counts = np.zeros(len(share))
    lane = np.empty(num_envs, dtype=np.int64)
    for i in range(num_envs):
        lane[i] = int(np.argmax(share * (i + 1) - counts))
        counts[lane[i]] += 1
    return lane


def _stack_lanes(kin: list[ReferenceKinematics]) -> ReferenceKinematics:
    """Per-lane kinematics as one with a leading lane axis [L, T, ...], shorter lanes padded with their held
    last frame (zero velocity); motion_frames becomes [L]."""
    T = max(k.num_frames for k in kin)

    def pad(a: np.ndarray, still: bool) -> np.ndarray:
        extra = np.zeros_like(a[-1:]) if still else a[-1:]
        return np.concatenate([a, np.repeat(extra, T - len(a), axis=0)])

    moving = ("qvel", "joint_vel", "body_vel")
    names = ("qpos", "qvel", "joint_pos", "joint_vel", "body_pos", "body_vel", "contact_pos", "contact_active",
             "gravity")  # fmt: skip
    arrays = {n: np.stack([pad(getattr(k, n), n in moving) for k in kin]) for n in names}
    return ReferenceKinematics(**arrays, motion_frames=np.array([k.motion_frames for k in kin]))


def _quat_angle(q: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Rotation angle between unit quaternions [N, 4] (w first)."""
    dot = np.abs(np.sum(q * r, axis=1))
    return 2.0 * np.arccos(np.clip(dot, -1.0, 1.0))


def _rotate_into(quat: np.ndarray, vec: np.ndarray) -> np.ndarray:
    """World vectors [N, 3] expressed in the frames of quaternions [N, 4] (w first)."""
    w, xyz = quat[:, :1], quat[:, 1:]
    t = 2.0 * np.cross(-xyz, vec)
    return vec + w * t + np.cross(-xyz, t)


class TrackingEnv:
    """Vectorised tracking of one reference (``llp.sim.interface.VecEnv``)."""

    def __init__(self, cfg: TrackingEnvConfig, num_envs: int, seed: int = 0, threads: int = 1):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        task = cfg.task
        self.cfg, self.task, self.num_envs, self.seed = cfg, task, num_envs, seed
        self.rng = np.random.default_rng(seed)
        spec = load_robot_spec(task.robot)
        spec.option.timestep = task.physics_dt
        spec.option.iterations = task.solver_iterations
        lanes = cfg.references()
        narrow = min(lane.obstacle.width for lane in lanes)
        if task.lateral_m >= narrow / 2:
            raise ValueError(f"lateral_m {task.lateral_m} m would start the motion beside its box: the narrowest box "
                             f"is {narrow} m wide (need lateral_m < {narrow / 2})")  # fmt: skip
        self.boxes = [replace(lane.obstacle, y=lane.obstacle.y + k * LANE_SPACING) for k, lane in enumerate(lanes)]
        for k, box in enumerate(self.boxes):
            add_obstacle(spec, box, name="obstacle" if k == 0 else f"obstacle_{k}", floor=k == 0)
        touching = task.robot.termination_bodies if task.terminations.body_contact else []
        for name in touching:
            if spec.body(name) is None:
                raise ValueError(f"termination_bodies: body {name!r} is not in robot {task.robot.name}")
            add_contact_sensor(spec, name)
        m = self.model = spec.compile()
        self.warp = task.backend == "warp"
        self.randomized = task.friction is not None
        self.robot_geoms = robot_collision_geoms(m)
        if self.randomized:  # the floor and boxes at the terrain's floor value: MuJoCo's max-combination then makes
            world = np.setdiff1d(np.arange(m.ngeom), self.robot_geoms)  # the robot's friction the contact's
            m.geom_friction[world] = TERRAIN_FRICTION
        self.batch = physics_batch(m, num_envs, threads, task.backend, task.device, params=self.randomized)
        self.base_friction = m.geom_friction[self.robot_geoms, 0].copy()
        self.friction = self.base_friction[:1].repeat(num_envs)  # each env's friction this episode
        # the CPU batch takes a model per env for randomized physics; Warp, per-world parameters of its one model
        self.env_models = [copy.copy(m) for _ in range(num_envs)] if self.randomized and not self.warp else None
        self.qpos, self.qvel = self.batch.bind("qpos"), self.batch.bind("qvel")
        self.ctrl, self.xpos = self.batch.bind("ctrl"), self.batch.bind("xpos")
        self.contact_force_idx = None  # sensordata columns of the termination bodies' net contact forces
        if touching:
            self.sensordata = self.batch.bind("sensordata")
            self.contact_force_idx = contact_force_columns(m, touching)
        self.dt = task.policy_dt

        joints = [int(m.actuator_trnid[a, 0]) for a in range(m.nu)]
        self.joint_qpos = np.array([m.jnt_qposadr[j] for j in joints])
        self.joint_qvel = np.array([m.jnt_dofadr[j] for j in joints])
        self.joint_names = [m.joint(j).name for j in joints]
        self.default_joint_pos = np.array(default_joint_positions(task.robot, m, joints))
        lo, hi = m.jnt_range[joints, 0], m.jnt_range[joints, 1]
        self.joint_lo, self.joint_hi = lo, hi
        mid, half = (lo + hi) / 2, (hi - lo) / 2 * task.robot.soft_joint_limit
        self.soft_lo, self.soft_hi = mid - half, mid + half
        self.num_actions = m.nu
        self.walking_states = None
        if cfg.walking_states is not None:
            states, width = np.asarray(cfg.walking_states, dtype=np.float64), state_width(m.nq, m.nv)
            if states.ndim != 2 or states.shape[1] != width:
                raise ValueError(f"walking states of shape {list(states.shape)} do not fit robot "
                                 f"{task.robot.name} ({width} columns: llp.motion.walking_states)")  # fmt: skip
            self.walking_states = states
        self.action_offset = task.action_offset
        self.scan_points = task.height_scan.points()

        def body(name: str, what: str) -> int:
            b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, name)
            if b < 0:
                raise ValueError(f"{what}: body {name!r} is not in robot {task.robot.name}")
            return b

        if task.tracked_bodies[0] != task.robot.base_body:
            raise ValueError(f"tracked_bodies must start with the anchor {task.robot.base_body!r}")
        self.bodies = np.array([body(b, "tracked_bodies") for b in task.tracked_bodies])
        self.end_bodies = np.array([list(self.bodies).index(body(b, "end_bodies")) for b in task.end_bodies])
        unknown = sorted({c.frame for c in cfg.contacts} - set(task.contact_frames))
        if unknown:
            raise ValueError(f"reference {cfg.reference_id}: contact frames {unknown} are not in contact_frames")
        self.contact_bodies = np.array([body(task.contact_frames[c.frame], "contact_frames") for c in cfg.contacts])
        hold = int(round(task.hold_s / self.dt))
        kin = []
        for k, lane in enumerate(lanes):
            q = lane.qpos.copy()
            q[:, 1] += k * LANE_SPACING
            kin.append(reference_kinematics(
                m, q, cfg.fps, list(self.bodies), list(self.contact_bodies), lane.contacts,
                self.joint_qpos, self.joint_qvel, hold,
            ))  # fmt: skip
        self.ref = _stack_lanes(kin)  # arrays [lane, frame, ...]
        self.num_lanes = len(lanes)
        self.lane = lane_assignment(num_envs, cfg.lane_shares or [1.0] * self.num_lanes)
        self.lane_ids = [lane.reference_id for lane in lanes]
        self.lane_last = np.array([k.num_frames - 1 for k in kin])  # [L] each lane's last frame (end of its hold)
        self.last_frame = self.lane_last[self.lane]  # [N]
        self.goal = np.stack([k.body_pos[-1, 0] for k in kin])[self.lane]  # [N, 3] the final pelvis position
        spans = np.array([max(k.motion_frames - 1, 1) * self.dt for k in kin])
        speed = np.array([(lane.qpos[-1, 0] - lane.qpos[0, 0]) for lane in lanes]) / spans  # each motion's mean speed
        self.command = np.stack([speed, np.zeros_like(speed), np.zeros_like(speed)], axis=1)[self.lane]  # [N, 3]
        box_rows = [[b.front_x, b.front_x + b.depth, b.y, b.width, b.height] for b in self.boxes]
        self.box = np.array(box_rows)[self.lane]  # [N, 5] front, back, centre y, width, height of each env's box

        self.reward_names = list(task.rewards)
        self.reward_weights = np.array([task.rewards[n].weight for n in self.reward_names])
        self.groups = {g: list(t) for g, t in task.observations.items()}

        n = num_envs
        self.env_ids = np.arange(n)
        self.frame = np.zeros(n, dtype=np.int64)
        self.start_frame = np.zeros(n, dtype=np.int64)
        self.actions = np.zeros((n, self.num_actions))
        self.last_actions = np.zeros((n, self.num_actions))
        self.prev_body_pos = np.zeros((n, len(self.bodies), 3))
        self.episode_length = np.zeros(n, dtype=np.int64)
        self.episode_return = np.zeros(n)
        self.body_error = np.zeros(n)  # sum over the episode of the mean tracked-body position error
        self.waiting = np.zeros(n, dtype=bool)  # lead-in: the reference's clock waits at the start frame
        self.wait_left = np.zeros(n, dtype=np.int64)  # lead-in: policy steps before the clock starts anyway
        self.walking = np.zeros(n, dtype=bool)  # whether each env's episode began mid-stride (walking_starts)
        self.lead_in = np.zeros(n)  # lead-in: how far behind its start frame the episode began, m
        self.shift = np.zeros(n)  # walking lead-in: how far behind its start frame the reference still is, m
        self.lead_level = np.zeros(n, dtype=np.int64)  # lead-in curriculum: this env's level
        self.lateral = np.zeros(n)  # how far to the side (+y) of its reference this env's episode runs, m
        self.starts = StartSampler(task.adaptive_starts, np.array([k.motion_frames for k in kin]), self.dt)
        self.trial_mode = False
        self.trajectories: list[list[np.ndarray]] = [[] for _ in range(n)]
        self.finished: list[dict] = []  # trial mode: one record per ended episode
        self._obs: dict[str, np.ndarray] = {}
        self.reset()

    # ------------------------------------------------------------------ spaces
    def obs_dims(self) -> dict[str, dict[str, int]]:
        return {g: {t: self._obs[t].shape[1] for t in terms} for g, terms in self.groups.items()}

    def course_state(self) -> dict[str, np.ndarray]:
        """Each env's lane, as a terrain env's tile column (teacher routing reads it: a lane's tracker labels it)."""
        return {"column": self.lane.astype(np.int64)}

    # ------------------------------------------------------------------ reset
    def reset(self) -> dict:
        self._reset_envs(self.env_ids)
        self._compute_obs()
        return self._obs_tensors()

    def start_trials(self) -> dict:
        """Trial mode from now on: every env restarts at the first frame; trajectories are recorded."""
        self.trial_mode = True
        self.finished = []
        return self.reset()

    def _reset_envs(self, ids: np.ndarray) -> None:
        task, rng, ref, k = self.task, self.rng, self.ref, len(ids)
        lane = self.lane[ids]
        if self.trial_mode:
            start = np.zeros(k, dtype=np.int64)
        else:
            last = ref.motion_frames[lane] - 1  # RSI: any frame of the motion
            if task.start_window_s is not None:
                last = np.minimum(last, int(round(task.start_window_s / self.dt)))
            start = self.starts.draw(lane, last, rng)
            start[rng.uniform(size=k) < task.start_at_zero] = 0
        q = ref.qpos[lane, start].copy()
        if task.start_posture == "default":  # the locomotion teacher's standing posture, at the frame's root
            q[:, self.joint_qpos] = self.default_joint_pos
        q[:, self.joint_qpos] += rng.uniform(-1, 1, size=(k, self.num_actions)) * task.init_joint_noise
        q[:, 0:2] += rng.uniform(-1, 1, size=(k, 2)) * task.init_root_noise
        q[:, self.joint_qpos] = np.clip(q[:, self.joint_qpos], self.joint_lo, self.joint_hi)
        if task.lateral_m > 0:  # beside the start frame; the reference moves with the robot (_shifted)
            self.lateral[ids] = rng.uniform(-task.lateral_m, task.lateral_m, size=k)
            q[:, 1] += self.lateral[ids]
        if task.lead_in_m > 0:  # behind the start frame along the motion (+x), the clock waiting there
            reach = task.lead_in_m
            if task.lead_in_levels and not self.trial_mode:  # the curriculum: up to the env's level
                reach = task.lead_in_m * self.lead_level[ids] / task.lead_in_levels
            back = rng.uniform(0, 1, size=k) * reach
            q[:, 0] -= back
            self.lead_in[ids] = back
            walking = task.lead_in_speed > 0
            self.shift[ids] = back if walking else 0.0
            self.waiting[ids] = back > (0.0 if walking else task.lead_in_tolerance_m)
            self.wait_left[ids] = int(round(task.lead_in_timeout_s / self.dt))
        if self.randomized:
            self._randomize(ids)
        qvel = ref.qvel[lane, start].copy()
        if not self.trial_mode:  # reference-state initialisation hands over the frame's velocities (or a share)
            qvel *= task.start_velocity_share
        if task.start_posture == "default":
            qvel[:, 6:] = 0.0
        ctrl = q[:, self.joint_qpos] if task.start_posture == "default" else ref.joint_pos[lane, start].copy()
        walk = np.zeros(k, dtype=bool)
        if task.walking_starts > 0:  # drawn only then: without walking starts the random stream is as before
            walk = rng.uniform(size=k) < task.walking_starts
        self.walking[ids] = walk
        if task.walking_lead_in_m > 0:  # only walking starts lead in (below); the others start on their frame
            self.lead_in[ids], self.waiting[ids] = 0.0, False
        if walk.any():  # mid-stride, at the spot (lead-in and sideways offset included) and heading of the start
            states = self.walking_states[rng.integers(len(self.walking_states), size=int(walk.sum()))]
            yaw, _ = yaw_and_gravity(ref.qpos[lane[walk], start[walk], 3:7])
            q[walk], qvel[walk] = place(states, q[walk, 0:2], yaw, self.model.nq)
            ctrl[walk] = q[walk][:, self.joint_qpos]
            if task.walking_lead_in_m > 0:  # behind the start frame along the motion (+x), the clock waiting there
                back, w = rng.uniform(0, task.walking_lead_in_m, size=int(walk.sum())), ids[walk]
                q[walk, 0] -= back
                self.lead_in[w], self.shift[w] = back, 0.0
                self.waiting[w] = back > task.lead_in_tolerance_m
                self.wait_left[w] = int(round(task.lead_in_timeout_s / self.dt))
        self.qpos[ids] = q
        self.qvel[ids] = qvel
        self.ctrl[ids] = ctrl
        self.batch.forward(ids)
        self.frame[ids] = start
        self.start_frame[ids] = start
        self.actions[ids] = 0.0
        self.last_actions[ids] = 0.0
        self.prev_body_pos[ids] = self.xpos[ids][:, self.bodies]
        self.episode_length[ids] = 0
        self.episode_return[ids] = 0.0
        self.body_error[ids] = 0.0
        if self.trial_mode:
            for env in ids:
                self.trajectories[env] = [self.qpos[env].copy()]

    def _randomize(self, ids: np.ndarray) -> None:
        """Draw each env's robot-ground friction (the robot's collision geoms, as the terrain env does)."""
        friction = self.rng.uniform(*self.task.friction, size=len(ids))
        self.friction[ids] = friction
        if self.warp:
            b = self.batch
            b.params("geom_friction")[ids[:, None], self.robot_geoms[None, :], 0] = friction[:, None]
            b.commit_params()
            return
        for j, env in enumerate(ids):
            self.env_models[env].geom_friction[self.robot_geoms, 0] = friction[j]
        self.batch.set_models(self.env_models)

    # ------------------------------------------------------------------ actions
    def joint_offsets(self, kind: str) -> np.ndarray:
        """[N, A] what an action of 0 targets: the reference's next joint positions or the default pose."""
        if kind == "reference":
            return self.ref.joint_pos[self.lane, np.minimum(self.frame + 1, self.last_frame)]
        if kind == "default":
            return np.broadcast_to(self.default_joint_pos, (self.num_envs, self.num_actions))
        raise ValueError(f"unknown action offset {kind!r}: reference or default")

    @property
    def action_joint_names(self) -> list[str]:
        return list(self.joint_names)

    @property
    def action_scale(self) -> float:
        return self.task.action_scale

    @property
    def proprio_layout(self) -> str:
        return self.task.proprio_layout

    def _same_joints(self, joints: list[str] | None) -> None:
        if joints is not None and list(joints) != self.joint_names:
            raise ValueError(f"a teacher drives joints {list(joints)}; a tracking env converts only policies that "
                             f"drive all of {self.joint_names}")  # fmt: skip

    def convert_actions(self, actions: torch.Tensor, env_ids: torch.Tensor, offset: str, scale: float | None = None,
                        joints: list[str] | None = None, layout: str | None = None):  # fmt: skip
        """Actions of a policy with another offset (and scale) as this env's actions: the same joint targets.
        A tracker (offset reference) labels a skill expert's states (offset default) with this."""
        self._same_joints(joints)
        ids = env_ids.numpy()
        s = self.task.action_scale
        targets = self.joint_offsets(offset)[ids] + (scale or s) * actions.numpy()
        return torch.from_numpy(((targets - self.joint_offsets(self.action_offset)[ids]) / s).astype(np.float32))

    def teacher_obs(self, obs: dict, env_ids: torch.Tensor, offset: str, scale: float | None = None,
                    joints: list[str] | None = None, layout: str | None = None) -> dict:  # fmt: skip
        """``obs`` of envs ``env_ids`` as a policy with another offset (and scale), reading proprioception in
        ``layout``, sees them: the last action in proprio re-expressed in its terms (the joint targets in force,
        minus its offset when they were set), the proprioception in its layout."""
        self._same_joints(joints)
        mine = self.task.proprio_layout
        same_actions = offset == self.action_offset and scale in (None, self.task.action_scale)
        if same_actions and layout in (None, mine):
            return obs
        ids = env_ids.numpy()
        if offset == "reference":
            before = self.ref.joint_pos[self.lane[ids], self.frame[ids]]
        else:
            before = self.default_joint_pos[None, :]
        last = ((self.ctrl[ids] - before) / (scale or self.task.action_scale)).astype(np.float32)
        out = {}
        for group, terms in obs.items():
            out[group] = dict(terms)
            if "proprio" in terms:  # its last block is the last action
                proprio = convert_proprio(terms["proprio"], mine, layout or mine).clone()
                proprio[:, -self.num_actions :] = torch.from_numpy(last)
                out[group]["proprio"] = proprio
        return out

    # ------------------------------------------------------------------ step
    def step(self, actions: torch.Tensor) -> StepResult:
        task = self.task
        a = actions.detach().cpu().numpy().astype(np.float64, copy=False)
        if a.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions must be [{self.num_envs}, {self.num_actions}], got {list(a.shape)}")
        a = np.clip(a, -task.action_clip, task.action_clip)
        self.last_actions[:] = self.actions
        self.actions[:] = a
        nxt = np.where(self.waiting, self.frame, np.minimum(self.frame + 1, self.last_frame))
        self.ctrl[:] = self.joint_offsets(task.action_offset) + task.action_scale * a
        self.prev_body_pos[:] = self.xpos[:, self.bodies]
        self.batch.step(nstep=task.decimation, stage=mujoco.mjtStage.mjSTAGE_POS)
        self.frame = nxt
        if self.waiting.any() and task.lead_in_speed > 0:  # walking lead-in: the clock starts once the frame arrives
            self.shift = np.where(self.waiting, np.maximum(self.shift - task.lead_in_speed * self.dt, 0.0), 0.0)
            self.waiting &= self.shift > 0
        elif self.waiting.any():  # lead-in: the clock starts once the pelvis is at the start frame's
            arrived = self.qpos[:, 0] >= self.ref.qpos[self.lane, self.frame, 0] - task.lead_in_tolerance_m
            self.wait_left -= self.waiting
            self.waiting &= ~arrived & (self.wait_left > 0)
        self.episode_length += 1

        terms, errors = self._rewards()
        weighted = terms * self.reward_weights[None, :] * self.dt
        reward = weighted.sum(axis=1)
        self.episode_return += reward
        self.body_error += errors["body_pos"]
        causes = self._fell(errors)
        terminated = np.logical_or.reduce(list(causes.values()))
        at_end = self.frame >= self.last_frame
        truncated = at_end & ~terminated
        if not self.trial_mode:
            self.starts.record(self.lane, self.frame, terminated)
        success = truncated & (errors["anchor_pos"] < task.success_distance)
        if self.trial_mode:
            for env in self.env_ids:
                self.trajectories[env].append(self.qpos[env].copy())

        done = terminated | truncated
        self._compute_obs()
        info: dict = {
            "reward_terms": dict(zip(self.reward_names, terms.mean(axis=0).tolist())),
            "weighted_terms": torch.from_numpy(weighted.astype(np.float32)),
            "ends": self._end_causes(causes, truncated),
            "end_details": self._end_details(causes, errors["end_z_body"]),
        }
        final_obs = None
        ids = self.env_ids[done]
        if len(ids):
            final_obs = self._obs_tensors()
            info["episode"] = {
                "return": self.episode_return[ids].copy(),
                "length": self.episode_length[ids].copy(),
                "terminated": terminated[ids].copy(),
                "success": success[ids].copy(),
            }
            if task.lead_in_levels and not self.trial_mode:  # the curriculum: the level each episode began at
                info["episode"]["start_step"] = self.lead_level[ids].copy()
                step = self.lead_level[ids] + np.where(success[ids], 1, -1)
                self.lead_level[ids] = np.clip(step, 0, task.lead_in_levels)
            if self.trial_mode:
                for env in ids:
                    self.finished.append({
                        "env": int(env), "lane": int(self.lane[env]), "reference_id": self.lane_ids[self.lane[env]],
                        "success": bool(success[env]), "fell": bool(terminated[env]),
                        "frames": int(self.episode_length[env]), "lead_in_m": float(self.lead_in[env]),
                        "walking_start": bool(self.walking[env]),
                        "tracking_error_m": float(self.body_error[env] / max(self.episode_length[env], 1)),
                        "final_anchor_error_m": float(errors["anchor_pos"][env]),
                        "qpos": np.array(self.trajectories[env]),
                    })  # fmt: skip
            self._reset_envs(ids)
            self._compute_obs()
        return StepResult(
            obs=self._obs_tensors(),
            reward=torch.from_numpy(reward.astype(np.float32)),
            terminated=torch.from_numpy(terminated),
            truncated=torch.from_numpy(truncated),
            final_obs=final_obs,
            info=info,
        )

    def _rewards(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        task, ref, f, lane = self.task, self.ref, self.frame, self.lane
        pos = self.xpos[:, self.bodies]  # [N, B, 3]
        ref_pos = self._shifted(ref.body_pos[lane, f])
        anchor_err = np.linalg.norm(pos[:, 0] - ref_pos[:, 0], axis=1)
        rel = (pos - pos[:, :1]) - (ref_pos - ref_pos[:, :1])
        body_sq = np.mean(np.sum(rel**2, axis=2), axis=1)
        vel = (pos - self.prev_body_pos) / self.dt
        ref_vel = ref.body_vel[lane, f]  # indexed by arrays: already a copy
        if self.task.lead_in_speed > 0:  # a walking lead-in's frame moves forward at lead_in_speed
            ref_vel[self.waiting, :, 0] += self.task.lead_in_speed
        vel_sq = np.mean(np.sum((vel - ref_vel) ** 2, axis=2), axis=1)
        ori_err = _quat_angle(self.qpos[:, 3:7], ref.qpos[lane, f, 3:7])
        ang_sq = np.sum((self.qvel[:, 3:6] - ref.qvel[lane, f, 3:6]) ** 2, axis=1)
        active = ref.contact_active[lane, f]  # [N, C]
        if active.shape[1]:
            c_sq = np.sum((self.xpos[:, self.contact_bodies] - self._shifted(ref.contact_pos[lane, f])) ** 2, axis=2)
            count = active.sum(axis=1)
            contact_sq = np.where(count > 0, (c_sq * active).sum(axis=1) / np.maximum(count, 1), 0.0)
        else:
            contact_sq = np.zeros(self.num_envs)
        q = self.qpos[:, self.joint_qpos]
        values = {
            "anchor_pos": anchor_err**2,
            "anchor_ori": ori_err**2,
            "body_pos": body_sq,
            "body_lin_vel": vel_sq,
            "anchor_ang_vel": ang_sq,
            "contact_pos": contact_sq,
            "goal": np.sum((pos[:, 0] - self._shifted(self.goal[:, None])[:, 0]) ** 2, axis=1),
        }
        cols = []
        for name in self.reward_names:
            if name == "action_rate":
                cols.append(np.sum((self.actions - self.last_actions) ** 2, axis=1))
            elif name == "joint_limit":
                cols.append(np.sum(np.maximum(q - self.soft_hi, 0) + np.maximum(self.soft_lo - q, 0), axis=1))
            else:
                cols.append(np.exp(-values[name] / task.rewards[name].std ** 2))
        end_z = np.abs(pos[:, self.end_bodies, 2] - ref_pos[:, self.end_bodies, 2])  # [N, end bodies]
        errors = {
            "anchor_pos": anchor_err,
            "anchor_z": np.abs(pos[:, 0, 2] - ref_pos[:, 0, 2]),
            "end_z": end_z.max(axis=1),
            "end_z_body": end_z.argmax(axis=1),
            "body_pos": np.sqrt(np.mean(np.sum((pos - ref_pos) ** 2, axis=2), axis=1)),
        }
        return np.stack(cols, axis=1), errors

    def _shifted(self, positions: np.ndarray) -> np.ndarray:
        """Reference positions [N, K, 3] moved back along x by each env's walking lead-in still to go and sideways
        by its lateral offset."""
        if not self.shift.any() and not self.lateral.any():
            return positions
        moved = positions.copy()
        moved[:, :, 0] -= self.shift[:, None]
        moved[:, :, 1] += self.lateral[:, None]
        return moved

    @staticmethod
    def _end_causes(causes: dict[str, np.ndarray], truncated: np.ndarray) -> dict[str, int]:
        """Episodes ended this step by cause: each fall counted once, under the first cause that holds."""
        ends, taken = {}, np.zeros_like(truncated)
        for cause, hit in causes.items():
            ends[cause] = int((hit & ~taken).sum())
            taken |= hit
        ends["end_of_reference"] = int(truncated.sum())
        return ends

    def _end_details(self, causes: dict[str, np.ndarray], end_body: np.ndarray) -> dict[str, int]:
        """Falls this step, by the end body that left its reference (when that was the cause) and by the quarter
        of the motion they happened in: where and how a motion is lost."""
        details: dict[str, int] = {}
        fell = np.logical_or.reduce(list(causes.values()))
        if not fell.any():
            return details
        first = causes["end_body_z"] & ~(causes["anchor_z"] | causes["tilt"])
        for k, name in enumerate(self.task.end_bodies):
            count = int((first & (end_body == k)).sum())
            if count:
                details[f"end_body_z/{name}"] = count
        quarter = np.minimum(4 * self.frame[fell] // np.maximum(self.last_frame[fell], 1), 3)
        for q, count in zip(*np.unique(quarter, return_counts=True)):
            details[f"fell_in_quarter/{int(q) + 1}"] = int(count)
        return details

    def _fell(self, errors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Each termination's verdict [N] (bool), by cause."""
        t = self.task.terminations
        _, gravity = yaw_and_gravity(self.qpos[:, 3:7])
        tilt = np.linalg.norm(gravity - self.ref.gravity[self.lane, self.frame], axis=1)
        anchor_z, end_body_z = t.anchor_z, t.end_body_z
        if t.walking_unheld_z is not None:  # walking starts keep their own timing: heights not held to the clock
            anchor_z = np.where(self.walking, t.walking_unheld_z, t.anchor_z)
            end_body_z = np.where(self.walking, t.walking_unheld_z, t.end_body_z)
        causes = {
            "anchor_z": errors["anchor_z"] > anchor_z,
            "tilt": tilt > t.tilt,
            "end_body_z": errors["end_z"] > end_body_z,
        }
        if self.contact_force_idx is not None:  # a body the course counts a fall on touches the floor or a box
            force = self.sensordata[:, self.contact_force_idx].reshape(self.num_envs, -1, 3)
            causes["body_contact"] = (np.sqrt((force**2).sum(axis=2)) > t.contact_threshold).any(axis=1)
        if t.max_tilt is not None:  # the course's rule: tilted from upright, not from the reference
            causes["course_tilt"] = gravity[:, 2] > -np.cos(t.max_tilt)
        if t.min_base_height is not None:  # the course's rule: the pelvis over the ground (or the box top) under it
            ground = self.ground_under(self.qpos[:, 0], self.qpos[:, 1])
            causes["base_height"] = self.qpos[:, 2] - ground < t.min_base_height
        return causes

    def ground_under(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The ground height under each env's points ``x``, ``y`` ([N] or [N, P]): its box's top over the box,
        else the floor."""
        box = self.box.reshape(self.num_envs, 5, *([1] * (x.ndim - 1)))  # front, back, centre y, width, height
        over = (x >= box[:, 0]) & (x <= box[:, 1]) & (np.abs(y - box[:, 2]) <= box[:, 3] / 2)
        return np.where(over, box[:, 4], 0.0)

    # ------------------------------------------------------------------ observations
    def _compute_obs(self) -> None:
        ref, box, lane = self.ref, self.box, self.lane
        nxt = np.minimum(self.frame + 1, self.last_frame)
        quat = self.qpos[:, 3:7]
        _, gravity = yaw_and_gravity(quat)
        q, dq = self.qpos[:, self.joint_qpos], self.qvel[:, self.joint_qvel]
        root = self.qpos[:, 0:3]
        head = proprio_head(self.qvel[:, 3:6], gravity, self.task.proprio_layout)
        self._obs["proprio"] = np.concatenate([*head, q - self.default_joint_pos, dq * 0.05, self.actions], axis=1)
        anchor = ref.qpos[lane, nxt, 0:3]  # indexed by arrays: already a copy
        anchor[:, 0] -= self.shift  # a walking lead-in's frame is still behind its place
        anchor[:, 1] += self.lateral
        anchor_offset = _rotate_into(quat, anchor - root)
        phase = (nxt / np.maximum(self.last_frame, 1))[:, None]
        self._obs["reference"] = np.concatenate(
            [ref.joint_pos[lane, nxt] - q, ref.joint_vel[lane, nxt] * 0.05, anchor_offset, ref.gravity[lane, nxt],
             phase], axis=1,
        )  # fmt: skip
        self._obs["obstacle"] = np.stack(
            [box[:, 0] - root[:, 0], box[:, 1] - root[:, 0], box[:, 2] - root[:, 1], box[:, 4]], axis=1
        )
        pos = self.xpos[:, self.bodies]
        ref_pos = ref.body_pos[lane, self.frame]  # relative to the anchor: a walking lead-in's shift cancels
        rel = (pos - pos[:, :1]) - (ref_pos - ref_pos[:, :1])
        self._obs["privileged"] = np.concatenate([self.qvel[:, 0:3], root[:, 2:3], rel.reshape(self.num_envs, -1)], 1)
        needed = {t for terms in self.groups.values() for t in terms}
        if "height_scan" in needed:
            self._obs["height_scan"] = self._height_scan(root, quat)
        if "command" in needed:
            self._obs["command"] = np.broadcast_to(self.command, (self.num_envs, 3))

    def _height_scan(self, root: np.ndarray, quat: np.ndarray) -> np.ndarray:
        """The locomotion env's height scan (llp.sim.sensors.height_scan) over this scene: the floor at 0 and the
        box's top; relative to the ground level the pelvis implies, clipped to +-1 m."""
        yaw, _ = yaw_and_gravity(quat)
        c, s = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
        px = root[:, 0:1] + c * self.scan_points[:, 0] - s * self.scan_points[:, 1]
        py = root[:, 1:2] + s * self.scan_points[:, 0] + c * self.scan_points[:, 1]
        ground = self.ground_under(px, py)
        return np.clip(ground - (root[:, 2:3] - self.task.robot.base_height), -1.0, 1.0)

    def _obs_tensors(self) -> dict:
        return {
            g: {t: torch.from_numpy(self._obs[t].astype(np.float32)) for t in terms} for g, terms in self.groups.items()
        }
