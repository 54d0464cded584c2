"""DeviceParkourEnv: ParkourEnv's task computed in torch on the device that holds MuJoCo Warp's worlds.

``ParkourEnv`` on ``sim.backend: warp`` steps the physics on a GPU but computes
the task in numpy on the host, so every policy step copies the state off the
device and the observations back. This env keeps everything where Warp keeps
the state: torch views of Warp's own arrays (``wp.to_torch``, no copies), and
observations, rewards, terminations, commands, resets, curriculum and domain
randomisation as torch ops on the same device. A learner on that device reads
its rollouts without a host copy (issue 12's co-located mode; mjlab's layout,
a manager-free version of it).

It is the same task as ``ParkourEnv`` (same config, reward terms, observation
layout and episode logic; ``tests/test_device_env.py`` checks them against each
other from the same state), with these differences:

  * float32 throughout (Warp's precision), and torch's random streams (the same
    distributions as ``ParkourEnv``, not the same draws);
  * commands and pushes are drawn for every env each step and kept where due
    (masks, so that a step does not wait on the device);
  * teachers label on the device too (``convert_actions``, ``teacher_obs``: a leg-only teacher labels a
    whole-body student's states, as on the host);
  * depth images are Warp's ray casts against the terrain's geoms in each world (the exact geometry, as the
    ``mujoco`` depth backend casts them), from a perfect camera: the camera model (noise, latency, dropped
    frames) runs in ``ParkourEnv`` only, and a config that asks for it is an error here.

Ended envs are still found with one ``nonzero`` per step, as Isaac Lab does.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from llp.sim import rewards as reward_terms
from llp.sim.config import EnvConfig
from llp.sim.env import NO_COURSE_PROGRESS, Obs, StepResult
from llp.sim.math3d import rotate_into_yaw_frame, wrap_angle, yaw_and_gravity, yaw_quat
from llp.sim.proprio import convert_proprio, proprio_head
from llp.sim.robot import TERRAIN_GROUP, default_joint_positions, policy_joint_indices
from llp.sim.scene import build_scene, robot_collision_geoms, world_model
from llp.sim.sensors import camera_rays
from llp.sim.task_state import TaskState
from llp.sim.terrain import GOAL_TYPES, Terrain, generate_terrain

DEVICE_TERMS = ("proprio", "command", "height_scan", "foot_scan", "privileged", "amp_features", "progress",
                "gait_clock", "group_onehot", "depth")  # fmt: skip


class HeightGrid:
    """The terrain's height grid on the device: the same nearest-cell lookups as ``Terrain`` (float32)."""

    def __init__(self, terrain: Terrain, device: torch.device):
        padded = terrain._padded_heights()
        self.ny, self.nx = padded.shape
        self.flat = torch.as_tensor(padded.ravel(), dtype=torch.float32, device=device)
        self.inv = 1.0 / terrain.resolution
        self.ox, self.oy = float(terrain.origin[0]), float(terrain.origin[1])

    def _read(self, gx: torch.Tensor, gy: torch.Tensor) -> torch.Tensor:
        ix = torch.floor(gx).long().clamp_(0, self.nx - 1)
        iy = torch.floor(gy).long().clamp_(0, self.ny - 1)
        return self.flat[iy * self.nx + ix]

    def at(self, xy: torch.Tensor) -> torch.Tensor:
        """Ground height under points ``xy`` [..., 2]."""
        return self._read((xy[..., 0] - self.ox) * self.inv + 1.0, (xy[..., 1] - self.oy) * self.inv + 1.0)

    def around(self, centers: torch.Tensor, yaw: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Ground height at ``offsets`` [P, 2] rotated by ``yaw`` [N] around ``centers`` [N, 2] -> [N, P]."""
        c, s = (torch.cos(yaw) * self.inv)[:, None], (torch.sin(yaw) * self.inv)[:, None]
        px, py = offsets[None, :, 0], offsets[None, :, 1]
        gx = ((centers[:, 0] - self.ox) * self.inv + 1.0)[:, None] + (c * px - s * py)
        gy = ((centers[:, 1] - self.oy) * self.inv + 1.0)[:, None] + (s * px + c * py)
        return self._read(gx, gy)


class DeviceParkourEnv:
    """N humanoid envs as worlds of one MuJoCo Warp model, task in torch on the same device."""

    def __init__(self, cfg: EnvConfig, num_envs: int, seed: int = 0, threads: int = 1):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if cfg.backend != "warp":
            raise ValueError(f"the device env runs on sim.backend warp, not {cfg.backend!r}")
        needed = {t for terms in cfg.observations.values() for t in terms}
        missing = sorted(needed - set(DEVICE_TERMS))
        if missing:
            raise ValueError(f"observation terms {missing} are not computed on the device yet (it computes "
                             f"{', '.join(DEVICE_TERMS)}): use ParkourEnv")  # fmt: skip
        if cfg.commands.failure_focus > 0.0:
            raise ValueError("commands.failure_focus is not computed on the device yet (it samples from the fall "
                             "rates ParkourEnv keeps per command region): use ParkourEnv")  # fmt: skip
        if "depth" in needed and not cfg.camera_model.perfect:
            raise ValueError("the device env renders a perfect camera only: set camera_model.perfect (the camera "
                             "model's noise and latency run in ParkourEnv)")  # fmt: skip
        from llp.sim.warp_batch import WarpBatch

        self.cfg, self.num_envs, self.seed = cfg, num_envs, seed
        self.terrain = generate_terrain(cfg.terrain, seed=seed)
        self.scene = sc = build_scene(cfg.robot, self.terrain, cfg.physics_dt, cfg.solver_iterations)
        m = self.model = sc.model
        r = cfg.randomization
        self._randomized = any(x is not None for x in (r.friction, r.added_mass, r.motor_strength))
        physics = world_model(cfg.robot, self.terrain, cfg.physics_dt, cfg.solver_iterations)
        self.batch = WarpBatch(physics, num_envs, cfg.device, params=self._randomized)
        self.device = dev = torch.device(str(self.batch.device) if self.batch.device.is_cuda else "cpu")
        if self.batch.device.is_cuda:  # torch's ops go on Warp's stream: ordered after the physics, no waits
            torch.cuda.set_stream(self.batch.wp.stream_to_torch(self.batch.device.stream))
        self.gen = torch.Generator(device=dev).manual_seed(seed)
        self._teacher_cache: dict = {}  # a teacher's joints -> (indices, whether they are this env's)
        self._params = {}  # per-world model fields that domain randomisation writes (torch views)
        if self._randomized:
            from llp.sim.warp_batch import PARAM_FIELDS

            self._params = {name: self.batch.param_tensor(name) for name in PARAM_FIELDS}
        self.qpos, self.qvel, self.ctrl = (self.batch.tensor(n) for n in ("qpos", "qvel", "ctrl"))
        self.sensordata = self.batch.tensor("sensordata")
        self.site_xpos, self.site_xmat = self.batch.tensor("site_xpos"), self.batch.tensor("site_xmat")
        self.dt = cfg.policy_dt
        self.max_episode_length = int(round(cfg.terminations.episode_length_s / self.dt))

        def t(x, dtype=torch.float32):
            return torch.as_tensor(np.asarray(x), dtype=dtype, device=dev)

        # robot constants (ParkourEnv's)
        self.joint_names = [m.joint(int(j)).name for j in sc.joint_ids]
        self.default_joint_pos = t(default_joint_positions(cfg.robot, m, list(sc.joint_ids)))
        self.action_joints = t(policy_joint_indices(cfg.robot, self.joint_names), torch.long)
        self.num_actions = len(self.action_joints)
        lo, hi = m.jnt_range[sc.joint_ids, 0], m.jnt_range[sc.joint_ids, 1]
        mid, half = (lo + hi) / 2, (hi - lo) / 2 * cfg.robot.soft_joint_limit
        self.joint_soft_limits = t(np.stack([mid - half, mid + half], axis=1))
        self.joint_qpos, self.joint_qvel = t(sc.joint_qpos, torch.long), t(sc.joint_qvel, torch.long)
        self.qpos0 = t(m.qpos0)
        feet = set(cfg.robot.foot_bodies)
        self.undesired_bodies = t([b not in feet for b in sc.contact_bodies], torch.bool)
        self.hand_bodies = t([b in set(cfg.robot.hand_bodies) for b in sc.contact_bodies], torch.bool)
        self.termination_bodies = t([b in set(cfg.robot.termination_bodies) for b in sc.contact_bodies], torch.bool)
        self.foot_sensor_idx = t([sc.contact_bodies.index(b) for b in cfg.robot.foot_bodies], torch.long)
        self._force_idx = t((sc.contact_adr[:, None] + np.arange(1, 4)[None, :]).ravel(), torch.long)
        self._foot_vel_idx = t((sc.foot_vel_adr[:, None] + np.arange(3)[None, :]).ravel(), torch.long)
        self.foot_sites = t(sc.foot_sites, torch.long)
        self.scan_points = t(cfg.height_scan.points())
        self.foot_points = t(cfg.foot_rays.points())
        self.grid = HeightGrid(self.terrain, dev)
        dirs, axial = camera_rays(cfg.depth_camera)
        self._cam_dirs, self._cam_axial = t(dirs), t(axial)
        self.camera_envs = num_envs if cfg.camera_envs is None else min(cfg.camera_envs, num_envs)
        self._robot_geoms = t(robot_collision_geoms(physics), torch.long)
        self._base_mass0 = float(m.body_mass[sc.base_body])
        self._gain0, self._bias0 = t(m.actuator_gainprm[:, 0]), t(m.actuator_biasprm[:, :3])

        # tiles
        tiles = self.terrain.tiles
        self.num_columns = self.terrain.num_columns
        self.tile_origin = t([tile.origin for tile in tiles])[:, :2]
        self.tile_half = t([cfg.terrain.tile_length / 2, cfg.terrain.tile_width / 2])
        goals = np.array([tile.goal if tile.goal is not None else (np.nan, np.nan) for tile in tiles])
        self.tile_has_goal = t(~np.isnan(goals[:, 0]), torch.bool)
        self.tile_goal = t(np.nan_to_num(goals))
        trig = np.array([tile.triggers[0] if tile.triggers else np.nan for tile in tiles])
        self.tile_has_course = t(~np.isnan(trig), torch.bool)
        self.tile_trigger0 = t(np.nan_to_num(trig))
        self.tile_spawn = t([tile.spawn[:2] for tile in tiles])
        self.tile_is_goal_type = t([tile.type in GOAL_TYPES for tile in tiles], torch.bool)
        self.goal_starts = t(r.goal_starts)  # [S, 2]
        self._along = [tuple(x) for x in r.goal_starts] != [(0.0, 0.0)]

        # observation layout, rewards
        self.groups = {g: list(terms) for g, terms in cfg.observations.items()}
        self.reward_names = list(cfg.rewards)
        self.reward_weights = t([cfg.rewards[n].weight for n in self.reward_names])
        self.reward_fns = [reward_terms.REWARD_TERMS[n].make(num_envs, **cfg.rewards[n].params)
                           for n in self.reward_names]  # fmt: skip
        like = torch.zeros(num_envs, 2, device=dev)
        for fn in self.reward_fns:
            if hasattr(fn, "place"):
                fn.place(like)

        # per-env state
        n = num_envs
        z = torch.zeros
        self.env_ids = torch.arange(n, device=dev)
        self.column = self.env_ids % self.num_columns
        max_init = min(cfg.curriculum.initial_max_level, self.terrain.num_levels - 1)
        if cfg.curriculum.initial_levels == "spread":
            self.level = (self.env_ids // self.num_columns) % (max_init + 1)
        else:
            self.level = torch.randint(0, max_init + 1, (n,), generator=self.gen, device=dev)
        self.tile_ids = self.level * self.num_columns + self.column
        self.spawn_xy = z(n, 2, device=dev)
        self.start_step = z(n, dtype=torch.long, device=dev)
        self.command = z(n, 3, device=dev)
        self.heading_target = z(n, device=dev)
        self.heading_env = torch.ones(n, dtype=torch.bool, device=dev)
        self.command_timer, self.push_timer = z(n, device=dev), z(n, device=dev)
        self.actions, self.last_actions = z(n, self.num_actions, device=dev), z(n, self.num_actions, device=dev)
        self.foot_vel, self.last_foot_vel = z(n, 2, 3, device=dev), z(n, 2, 3, device=dev)
        self.episode_length = z(n, dtype=torch.long, device=dev)
        self.episode_return = z(n, device=dev)
        self.episode_terms = z(n, len(self.reward_names), device=dev)
        self.friction, self.added_mass, self.motor_strength = (torch.ones(n, device=dev), z(n, device=dev),
                                                               torch.ones(n, device=dev))  # fmt: skip
        self.goal_reached = z(n, dtype=torch.bool, device=dev)
        self.goal_distance = z(n, device=dev)
        self.goal_best = z(n, device=dev)  # ParkourEnv's stall bookkeeping (goal_stall_s)
        self.goal_gain_step = z(n, dtype=torch.long, device=dev)
        self.stall_steps = int(round(cfg.terminations.goal_stall_s / cfg.policy_dt))
        self.gait_freq = torch.full((n,), cfg.gait.frequency[0], device=dev)
        self.commanded_disp = z(n, 2, device=dev)
        self._obs_buf: dict[str, torch.Tensor] = {}
        self._state: TaskState | None = None
        self.reset()

    # ------------------------------------------------------------------ draws
    def _uniform(self, lo: float, hi: float, shape) -> torch.Tensor:
        u = torch.rand(shape, generator=self.gen, device=self.device)
        return lo + (hi - lo) * u

    # ------------------------------------------------------------------ spaces
    def obs_dims(self) -> dict[str, dict[str, int]]:
        return {g: {t: self._obs_buf[t].shape[1] for t in terms} for g, terms in self.groups.items()}

    @property
    def action_joint_names(self) -> list[str]:
        return [self.joint_names[j] for j in self.action_joints.tolist()]

    @property
    def action_scale(self) -> float:
        return self.cfg.robot.action_scale

    action_offset = "default"
    proprio_layout = "locomotion"

    # ------------------------------------------------------------------ teachers that drive other joints
    def _teacher_joints(self, joints: list[str] | None) -> tuple[torch.Tensor, bool]:
        """(indices in joint order of the joints a teacher drives, whether they are this env's); None: this env's.
        Cached: asked every step, it would otherwise compare tensors on the device."""
        key = None if joints is None else tuple(joints)
        if key not in self._teacher_cache:
            if joints is None:
                self._teacher_cache[key] = (self.action_joints, True)
            else:
                unknown = [j for j in joints if j not in self.joint_names]
                if unknown:
                    raise ValueError(
                        f"a teacher drives joints {unknown} that robot {self.cfg.robot.name} does not have"
                    )
                idx = [self.joint_names.index(j) for j in joints]
                same = idx == self.action_joints.tolist()
                self._teacher_cache[key] = (torch.tensor(idx, dtype=torch.long, device=self.device), same)
        return self._teacher_cache[key]

    def convert_actions(self, actions: torch.Tensor, env_ids: torch.Tensor, offset: str = "default",
                        scale: float | None = None, joints: list[str] | None = None,
                        layout: str | None = None) -> torch.Tensor:  # fmt: skip
        """``ParkourEnv.convert_actions`` on the device: a teacher's actions as this env's (the same joint targets)."""
        if offset != "default":
            raise ValueError(f"a terrain env converts actions that offset the default pose, not {offset!r}")
        s = self.cfg.robot.action_scale
        targets = self.default_joint_pos.expand(len(env_ids), -1).clone()
        targets[:, self._teacher_joints(joints)[0]] += (scale or s) * actions
        return (targets[:, self.action_joints] - self.default_joint_pos[self.action_joints]) / s

    def teacher_obs(self, obs: dict, env_ids: torch.Tensor, offset: str = "default", scale: float | None = None,
                    joints: list[str] | None = None, layout: str | None = None) -> dict:  # fmt: skip
        """``ParkourEnv.teacher_obs`` on the device: the last action in proprio as the teacher's own, the
        proprioception in its layout."""
        if offset != "default":
            raise ValueError(f"a terrain env shows teachers actions that offset the default pose, not {offset!r}")
        theirs, same = self._teacher_joints(joints)
        if same and scale in (None, self.cfg.robot.action_scale) and layout in (None, self.proprio_layout):
            return obs
        last = (self.ctrl[env_ids][:, theirs] - self.default_joint_pos[theirs]) / (scale or self.cfg.robot.action_scale)
        out = {}
        for group, terms in obs.items():
            out[group] = dict(terms)
            if "proprio" in terms:  # its last block is the last action
                kept = convert_proprio(terms["proprio"][:, : -self.num_actions], self.proprio_layout,
                                       layout or self.proprio_layout)  # fmt: skip
                out[group]["proprio"] = torch.cat([kept, last], dim=1)
        return out

    # ------------------------------------------------------------------ reset
    def reset(self) -> Obs:
        self._reset_envs(self.env_ids)
        self._read_state()
        self._compute_obs()
        return self._obs_tensors()

    def _reset_envs(self, ids: torch.Tensor) -> None:
        cfg, k = self.cfg, len(ids)
        if k == 0:
            return
        r = cfg.randomization
        tile = self.tile_ids[ids] = self.level[ids] * self.num_columns + self.column[ids]
        goal = self.tile_is_goal_type[tile]
        xy = self.tile_spawn[tile].clone()
        jitter = self._uniform(-r.spawn_jitter, r.spawn_jitter, (k, 2))
        yaw = torch.where(goal, 0.0, self._uniform(-math.pi, math.pi, (k,)))
        along = torch.zeros(k, device=self.device)
        if self._along:  # goal tiles start along the course (+x) by a drawn range of goal_starts
            if r.goal_start_curriculum:
                step = self.start_step[ids]
            else:
                step = torch.randint(0, len(self.goal_starts), (k,), generator=self.gen, device=self.device)
            lo, hi = self.goal_starts[step, 0], self.goal_starts[step, 1]
            along = lo + (hi - lo) * torch.rand(k, generator=self.gen, device=self.device)
        xy[:, 0] += torch.where(goal, along, jitter[:, 0])
        xy[:, 1] += torch.where(goal, jitter[:, 1] * 0.5, jitter[:, 1])
        q = self.qpos0.expand(k, -1).clone()
        q[:, 0:2] = xy
        q[:, 2] = self.grid.at(xy) + cfg.robot.base_height + 0.01
        q[:, 3:7] = yaw_quat(yaw)
        noise = self._uniform(-1.0, 1.0, (k, len(self.default_joint_pos))) * r.init_joint_noise
        q[:, self.joint_qpos] = self.default_joint_pos + noise
        self.spawn_xy[ids] = xy
        mask = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        mask[ids] = True
        self.batch.reset_where(mask)
        self.qpos[ids] = q
        self.qvel[ids] = 0.0
        self.ctrl[ids] = self.default_joint_pos
        self._randomize(ids)
        self.batch.forward()

        self.actions[ids] = 0.0
        self.last_actions[ids] = 0.0
        self.episode_length[ids] = 0
        self.episode_return[ids] = 0.0
        self.episode_terms[ids] = 0.0
        self.goal_reached[ids] = False
        self.goal_distance[ids] = torch.linalg.vector_norm(self.tile_goal[tile] - xy, dim=1)
        self.goal_best[ids] = self.goal_distance[ids]
        self.goal_gain_step[ids] = 0
        self.commanded_disp[ids] = 0.0
        self.push_timer[ids] = 0.0
        due = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        due[ids] = True
        self._resample_commands(due)
        self.gait_freq[ids] = self._uniform(*cfg.gait.frequency, (k,))
        for fn in self.reward_fns:
            if hasattr(fn, "reset"):
                fn.reset(ids)
        vel = self.sensordata[ids][:, self._foot_vel_idx].reshape(k, -1, 3)
        self.foot_vel[ids] = vel
        self.last_foot_vel[ids] = vel

    def _randomize(self, ids: torch.Tensor) -> None:
        r, k = self.cfg.randomization, len(ids)
        self.friction[ids] = self._uniform(*r.friction, (k,)) if r.friction else 1.0
        self.added_mass[ids] = self._uniform(*r.added_mass, (k,)) if r.added_mass else 0.0
        self.motor_strength[ids] = self._uniform(*r.motor_strength, (k,)) if r.motor_strength else 1.0
        if not self._randomized:
            return
        p, strength = self._params, self.motor_strength[ids]
        p["geom_friction"][ids[:, None], self._robot_geoms[None, :], 0] = self.friction[ids, None]
        p["body_mass"][ids, self.scene.base_body] = self._base_mass0 + self.added_mass[ids]
        p["actuator_gainprm"][ids, :, 0] = self._gain0[None, :] * strength[:, None]
        p["actuator_biasprm"][ids, :, :3] = self._bias0[None, :, :] * strength[:, None, None]

    def _resample_commands(self, due: torch.Tensor) -> None:
        """New commands for the envs where ``due`` [N] is true (drawn for all, kept where due: no host sync)."""
        c, n = self.cfg.commands, self.num_envs
        new = torch.stack([self._uniform(*c.lin_vel_x, (n,)), self._uniform(*c.lin_vel_y, (n,)),
                           self._uniform(*c.ang_vel_yaw, (n,))], dim=1)  # fmt: skip
        heading = self._uniform(-math.pi, math.pi, (n,))
        heading_env = self._uniform(0.0, 1.0, (n,)) < c.heading_fraction
        standing = self._uniform(0.0, 1.0, (n,)) < c.standing_fraction
        new = torch.where(standing[:, None], 0.0, new)
        goal = self.tile_has_goal[self.tile_ids]
        speed = self._uniform(*c.goal_speed, (n,))
        goal_cmd = torch.stack([speed, torch.zeros_like(speed), new[:, 2]], dim=1)
        new = torch.where(goal[:, None], goal_cmd, new)
        delta = self.tile_goal[self.tile_ids] - self.qpos[:, 0:2]
        heading = torch.where(goal, torch.atan2(delta[:, 1], delta[:, 0]), heading)
        heading_env = heading_env | goal
        self.command[:] = torch.where(due[:, None], new, self.command)
        self.heading_target[:] = torch.where(due, heading, self.heading_target)
        self.heading_env[:] = torch.where(due, heading_env, self.heading_env)
        self.command_timer[:] = torch.where(due, 0.0, self.command_timer)

    # ------------------------------------------------------------------ step
    def step(self, actions: torch.Tensor) -> StepResult:
        cfg = self.cfg
        if tuple(actions.shape) != (self.num_envs, self.num_actions):
            raise ValueError(f"actions must be [{self.num_envs}, {self.num_actions}], got {list(actions.shape)}")
        a = actions.detach().to(self.device, torch.float32).clamp(-cfg.action_clip, cfg.action_clip)
        self.last_actions[:] = self.actions
        self.actions[:] = a
        targets = self.default_joint_pos.expand(self.num_envs, -1).clone()
        targets[:, self.action_joints] += cfg.robot.action_scale * a
        self.ctrl[:] = targets
        self.batch.step(nstep=cfg.decimation)

        self.episode_length += 1
        self.command_timer += self.dt
        self.push_timer += self.dt
        goal = self.tile_has_goal[self.tile_ids]  # goal tiles steer towards the goal
        delta = self.tile_goal[self.tile_ids] - self.qpos[:, 0:2]
        self.heading_target[:] = torch.where(goal, torch.atan2(delta[:, 1], delta[:, 0]), self.heading_target)
        self._resample_commands(self.command_timer >= cfg.commands.resample_s)
        self._push()

        self.last_foot_vel[:] = self.foot_vel
        s = self._read_state()
        cos, sin = torch.cos(s.yaw), torch.sin(s.yaw)
        vx, vy = self.command[:, 0], self.command[:, 1]
        self.commanded_disp += torch.stack([vx * cos - vy * sin, vx * sin + vy * cos], dim=1) * self.dt
        terminated, truncated, success = self._terminations(s)
        s.terminated = terminated
        if self.reward_fns:
            terms = torch.stack([fn(s) for fn in self.reward_fns], dim=1)
        else:
            terms = torch.zeros(self.num_envs, 0, device=self.device)
        weighted = terms * self.reward_weights[None, :] * self.dt
        reward = weighted.sum(dim=1)
        if cfg.only_positive_rewards:
            reward = reward.clamp(min=0.0)
        self.episode_return += reward
        self.episode_terms += weighted

        done = terminated | truncated
        self._compute_obs()
        final_obs = self._obs_tensors()  # (every step: whether any env ended is not asked of the device)
        info: dict = {
            "reward_terms": dict(zip(self.reward_names, terms.mean(dim=0).unbind(0))),  # 0-d tensors
            "weighted_terms": weighted,
            "base_velocity": s.base_lin_vel[:, 0:2].clone(),
        }
        done_ids = done.nonzero()[:, 0]  # one host sync per step
        if len(done_ids):
            info["episode"] = self._episode_summary(done_ids, terminated, success)
            counts = self._ends[:, done].sum(dim=1).tolist()  # ParkourEnv's episode ends by cause
            info["ends"] = dict(zip(("fall", "stall", "goal", "time_out", "left_tile"), counts))
            self._update_curriculum(done_ids, terminated, success)
            self._reset_envs(done_ids)
            self._read_state()
            self._compute_obs()
        return StepResult(obs=self._obs_tensors(), reward=reward, terminated=terminated, truncated=truncated,
                          final_obs=final_obs, info=info)  # fmt: skip

    def _push(self) -> None:
        r = self.cfg.randomization
        if r.push_interval_s is None:
            return
        due = self.push_timer >= r.push_interval_s
        kick = self._uniform(-r.push_velocity, r.push_velocity, (self.num_envs, 2))
        self.qvel[:, 0:2] += torch.where(due[:, None], kick, 0.0)
        self.push_timer[:] = torch.where(due, 0.0, self.push_timer)

    # ------------------------------------------------------------------ state
    def _read_state(self) -> TaskState:
        cfg, n = self.cfg, self.num_envs
        qpos, qvel = self.qpos, self.qvel
        yaw, gravity = yaw_and_gravity(qpos[:, 3:7])
        standing = (self.command[:, 0] == 0) & (self.command[:, 1] == 0)
        if cfg.commands.heading_command:
            heading = self.heading_env & ~standing
            err = wrap_angle(self.heading_target - yaw)
            lo, hi = cfg.commands.ang_vel_yaw
            turn = (cfg.commands.heading_stiffness * err).clamp(lo, hi)
            yaw_rate = torch.where(heading, turn, self.command[:, 2])
            self.command[:, 2] = torch.where(standing, 0.0, yaw_rate)
        else:
            heading = torch.zeros(n, dtype=torch.bool, device=self.device)
        forces = self.sensordata[:, self._force_idx]
        force_mag = torch.sqrt((forces * forces).reshape(n, -1, 3).sum(dim=2))
        foot_pos = self.site_xpos[:, self.foot_sites]  # [N, 2, 3]
        foot_mat = self.site_xmat[:, self.foot_sites]  # [N, 2, 3, 3]
        foot_yaw = torch.atan2(foot_mat[..., 1, 0], foot_mat[..., 0, 0])
        self.foot_vel[:] = self.sensordata[:, self._foot_vel_idx].reshape(n, -1, 3)
        rays = self.grid.around(foot_pos[:, :, :2].reshape(-1, 2), foot_yaw.reshape(-1), self.foot_points)
        s = TaskState(
            dt=self.dt,
            base_lin_vel=rotate_into_yaw_frame(qvel[:, 0:3], yaw),
            base_ang_vel=qvel[:, 3:6].clone(),
            projected_gravity=gravity,
            yaw=yaw,
            command=self.command,
            heading_target=self.heading_target,
            heading_active=heading,
            joint_pos=qpos[:, self.joint_qpos],
            default_joint_pos=self.default_joint_pos,
            joint_names=self.joint_names,
            joint_soft_limits=self.joint_soft_limits,
            actions=self.actions,
            last_actions=self.last_actions,
            foot_pos=foot_pos,
            foot_vel=self.foot_vel,
            last_foot_vel=self.last_foot_vel,
            foot_contact_force=force_mag[:, self.foot_sensor_idx],
            foot_ray_heights=rays.reshape(n, 2, -1),
            body_contact_force=force_mag,
            undesired_bodies=self.undesired_bodies,
            hand_bodies=self.hand_bodies,
            on_obstacle_tile=self.tile_has_goal[self.tile_ids],
            termination_bodies=self.termination_bodies,
            base_height=qpos[:, 2] - self.grid.at(qpos[:, 0:2]),
            gait_phase=self.gait_phase(),
        )
        self._state = s
        return s

    def gait_phase(self) -> torch.Tensor:
        cycles = self.gait_freq * self.episode_length * self.dt
        left = 2 * math.pi * (cycles % 1.0)
        return torch.stack([left, (left + math.pi) % (2 * math.pi)], dim=1)

    def _terminations(self, s: TaskState):
        t = self.cfg.terminations
        fell = (s.body_contact_force[:, s.termination_bodies] > t.contact_threshold).any(dim=1)
        fell |= s.projected_gravity[:, 2] > -math.cos(t.max_tilt)
        fell |= s.base_height < t.min_base_height
        time_out = self.episode_length >= self.max_episode_length
        xy = self.qpos[:, 0:2]
        left_tile = ((xy - self.tile_origin[self.tile_ids]).abs() > self.tile_half).any(dim=1)
        has_goal = self.tile_has_goal[self.tile_ids]
        goal_dist = torch.linalg.vector_norm(self.tile_goal[self.tile_ids] - xy, dim=1)
        success = has_goal & (goal_dist < t.goal_radius)
        s.goal_reached = success & ~self.goal_reached
        s.goal_approach = torch.where(has_goal, self.goal_distance - goal_dist, 0.0)
        self.goal_distance[:] = goal_dist
        self.goal_reached |= success
        stalled = torch.zeros_like(fell)
        if self.stall_steps:  # ParkourEnv's stall end
            gained = has_goal & (goal_dist <= self.goal_best - t.goal_stall_distance)
            self.goal_best[:] = torch.where(gained, goal_dist, self.goal_best)
            self.goal_gain_step[:] = torch.where(gained, self.episode_length, self.goal_gain_step)
            waited = self.episode_length - self.goal_gain_step >= self.stall_steps
            stalled = has_goal & ~success & ~fell & waited
        terminated = fell | stalled
        truncated = ~terminated & (time_out | left_tile | success)
        self._ends = torch.stack([fell, stalled, success & ~fell, truncated & ~success & time_out,
                                  truncated & ~success & ~time_out])  # fmt: skip
        return terminated, truncated, success

    def _episode_summary(self, ids, terminated, success) -> dict:
        summary = {
            "env_ids": ids,
            "return": self.episode_return[ids].clone(),
            "length": self.episode_length[ids].clone(),
            "terminated": terminated[ids].clone(),
            "success": success[ids].clone(),
            "level": self.level[ids].clone(),
            "terms": {n: self.episode_terms[ids, i].clone() for i, n in enumerate(self.reward_names)},
        }
        if self.cfg.randomization.goal_start_curriculum:
            summary["start_step"] = self.start_step[ids].clone()
        return summary

    def _update_curriculum(self, ids, terminated, success) -> None:
        goal = self.tile_has_goal[self.tile_ids[ids]]
        if self.cfg.randomization.goal_start_curriculum:
            step = self.start_step[ids] + torch.where(success[ids], 1, -1)
            last = len(self.cfg.randomization.goal_starts) - 1
            self.start_step[ids] = torch.where(goal, step.clamp(0, last), self.start_step[ids])
        if not self.cfg.curriculum.enabled:
            return
        tile_length = self.cfg.terrain.tile_length
        distance = torch.linalg.vector_norm(self.qpos[ids, 0:2] - self.spawn_xy[ids], dim=1)
        commanded = torch.linalg.vector_norm(self.commanded_disp[ids], dim=1).clamp(max=tile_length / 2)
        up = torch.where(goal, success[ids], distance > tile_length * 0.4)
        down = torch.where(goal, terminated[ids], (distance < 0.5 * commanded) & ~up)
        top = self.terrain.num_levels - 1
        self.level[ids] = (self.level[ids] + up.long() - down.long()).clamp(0, top)

    # ------------------------------------------------------------------ observations
    def _compute_obs(self) -> None:
        s, cfg = self._state, self.cfg
        needed = {t for terms in self.groups.values() for t in terms}
        qvel = self.qvel
        if "proprio" in needed:
            parts = [*proprio_head(s.base_ang_vel, s.projected_gravity, self.proprio_layout),
                     s.joint_pos - self.default_joint_pos, qvel[:, self.joint_qvel] * 0.05, self.actions]  # fmt: skip
            self._obs_buf["proprio"] = torch.cat(parts, dim=1)
        if "command" in needed:
            self._obs_buf["command"] = self.command.clone()
        if "height_scan" in needed:
            ground = self.grid.around(self.qpos[:, 0:2], s.yaw, self.scan_points)
            scan = ground - (self.qpos[:, 2:3] - cfg.robot.base_height)
            self._obs_buf["height_scan"] = scan.clamp(-1.0, 1.0)
        if "foot_scan" in needed:
            rel = s.foot_ray_heights - s.foot_pos[:, :, 2:3]
            self._obs_buf["foot_scan"] = rel.clamp(-1.0, 1.0).reshape(self.num_envs, -1)
        if "privileged" in needed:
            contact = (s.foot_contact_force > 1.0).float()
            parts = [s.base_lin_vel, s.base_height[:, None], contact, s.foot_contact_force / 100.0,
                     self.friction[:, None], self.added_mass[:, None], self.motor_strength[:, None]]  # fmt: skip
            self._obs_buf["privileged"] = torch.cat(parts, dim=1)
        if "amp_features" in needed:
            parts = [s.base_height[:, None], s.projected_gravity, s.base_lin_vel, s.base_ang_vel,
                     s.joint_pos - self.default_joint_pos, qvel[:, self.joint_qvel] * 0.05]  # fmt: skip
            self._obs_buf["amp_features"] = torch.cat(parts, dim=1)
        if "progress" in needed:
            tile = self.tile_ids
            past = torch.where(self.tile_has_course[tile], self.qpos[:, 0] - self.tile_trigger0[tile],
                               NO_COURSE_PROGRESS)  # fmt: skip
            self._obs_buf["progress"] = past[:, None]
        if "gait_clock" in needed:
            phase = s.gait_phase
            self._obs_buf["gait_clock"] = torch.cat([torch.cos(phase), torch.sin(phase)], dim=1)
        if "group_onehot" in needed:
            self._obs_buf["group_onehot"] = torch.nn.functional.one_hot(self.column, self.num_columns).float()
        if "depth" in needed:
            self._obs_buf["depth"] = self._render_depth().reshape(self.num_envs, -1) / cfg.depth_camera.far

    def _render_depth(self) -> torch.Tensor:
        """Z-depth images [N, H, W] in metres, clipped to [near, far], of the camera envs (0 for the others)."""
        cam, c = self.scene.camera_site, self.cfg.depth_camera
        pos, mat = self.site_xpos[:, cam], self.site_xmat[:, cam]  # [N, 3], [N, 3, 3]
        dirs = torch.einsum("nij,pj->npi", mat, self._cam_dirs)
        dist = self.batch.rays(pos[:, None, :].expand_as(dirs), dirs, TERRAIN_GROUP)
        depth = torch.where(dist < 0, c.far, dist * self._cam_axial).clamp(c.near, c.far)
        depth[self.camera_envs :] = 0.0
        return depth.reshape(self.num_envs, c.height, c.width)

    def depth_images(self) -> torch.Tensor:
        """Current depth images of the camera envs, [camera_envs, H, W] metres."""
        return self._render_depth()[: self.camera_envs].clone()

    def _obs_tensors(self) -> Obs:
        copies = {name: buf.clone() for name, buf in self._obs_buf.items()}
        return {g: {t: copies[t] for t in terms} for g, terms in self.groups.items()}

    def observe(self) -> Obs:
        return self._obs_tensors()

    def state(self) -> TaskState:
        return self._state

    def course_state(self) -> dict[str, np.ndarray]:
        """ParkourEnv's ``course_state``, read back to the host (for set-up and tools, not every step)."""
        goal = torch.where(self.tile_has_goal[self.tile_ids, None], self.tile_goal[self.tile_ids], float("nan"))
        out = {"xy": self.qpos[:, 0:2], "spawn": self.spawn_xy, "goal": goal, "yaw": self._state.yaw,
               "command": self.command, "column": self.column, "level": self.level}  # fmt: skip
        return {k: v.detach().cpu().numpy().copy() for k, v in out.items()}

    def refresh(self) -> Obs:
        """Recompute derived fields, the task state and the observations at the current physics state (tests and
        tools that set the state)."""
        self.batch.forward()
        self._read_state()
        self._compute_obs()
        return self._obs_tensors()
