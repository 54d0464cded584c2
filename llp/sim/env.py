"""ParkourEnv: N humanoid envs in one MuJoCo batch, torch tensors in and out.

One policy step = ``decimation`` physics steps of every env (``cfg.backend``:
MuJoCo's C engine through ``mujoco.batch``, or MuJoCo Warp through
``llp.sim.warp_batch``), then numpy-vectorised observations, rewards and
terminations over all envs. Envs that end are reset individually (nothing
about any other env changes) and ``terminated`` (a fall) is reported apart from
``truncated`` (time limit, leaving the tile, reaching a goal), with the
observation of the final state for bootstrapping.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import mujoco
import numpy as np
import torch

from llp.sim import rewards as reward_terms
from llp.sim.backend import ONE_MODEL_BACKENDS, physics_batch
from llp.sim.camera_model import CameraModel
from llp.sim.command_regions import REGIONS, command_regions, slug
from llp.sim.config import EnvConfig
from llp.sim.math3d import rotate_into_yaw_frame, wrap_angle, yaw_and_gravity, yaw_quat
from llp.sim.proprio import convert_proprio, proprio_head
from llp.sim.robot import default_joint_positions, policy_joint_indices
from llp.sim.scene import build_scene, robot_collision_geoms, world_model
from llp.sim.sensors import DepthCamera, foot_ray_heights, height_scan
from llp.sim.task_state import TaskState
from llp.sim.terrain import GOAL_TYPES, generate_terrain

Obs = dict[str, dict[str, torch.Tensor]]
NO_COURSE_PROGRESS = -10.0  # the progress term on tiles without a course: far before any phase trigger


@dataclass
class StepResult:
    """What ``ParkourEnv.step`` returns."""

    obs: Obs  # observation after auto-reset (the first of the next episode for envs that ended)
    reward: torch.Tensor  # [N]
    terminated: torch.Tensor  # [N] bool: the episode ended in a failure state (no bootstrap)
    truncated: torch.Tensor  # [N] bool: the episode was cut off (time-out, left tile, goal reached)
    final_obs: Obs | None  # observation of the final state of every env; meaningful where done
    info: dict


FALL_RATE_MEMORY = 1.0 - 1.0 / 200  # how slowly a command region's recent fall rate forgets (per ended episode)


class ParkourEnv:
    """Vectorised humanoid parkour env on the embedded MuJoCo simulator."""

    def __init__(self, cfg: EnvConfig, num_envs: int, seed: int = 0, threads: int = 1):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.cfg, self.num_envs, self.seed = cfg, num_envs, seed
        self.rng = np.random.default_rng(seed)
        self.terrain = generate_terrain(cfg.terrain, seed=seed)
        self.scene = build_scene(cfg.robot, self.terrain, cfg.physics_dt, cfg.solver_iterations)
        m = self.model = self.scene.model
        self._randomized = any(
            x is not None
            for x in (cfg.randomization.friction, cfg.randomization.added_mass, cfg.randomization.motor_strength)
        )
        # mujoco: each env simulates its tile's model; warp and isaaclab: every env is a world of one model of the
        # whole terrain, with per-world physics parameters
        self.warp = cfg.backend in ONE_MODEL_BACKENDS
        physics_model = world_model(cfg.robot, self.terrain, cfg.physics_dt, cfg.solver_iterations) if self.warp else m
        self.batch = physics_batch(physics_model, num_envs, threads, cfg.backend, cfg.device, params=self._randomized,
                                   robot=cfg.robot.name)  # fmt: skip
        self._physics_robot_geoms = robot_collision_geoms(physics_model)
        self.qpos = self.batch.bind("qpos")
        self.qvel = self.batch.bind("qvel")
        self.ctrl = self.batch.bind("ctrl")
        self.sensordata = self.batch.bind("sensordata")
        self.site_xpos = self.batch.bind("site_xpos")
        self.site_xmat = self.batch.bind("site_xmat")
        self.num_actions = m.nu  # narrowed below to the joints the policy drives
        self.dt = cfg.policy_dt
        self.max_episode_length = int(round(cfg.terminations.episode_length_s / self.dt))

        # robot constants
        sc = self.scene
        self.default_joint_pos = np.array(default_joint_positions(cfg.robot, m, list(sc.joint_ids)))
        self.joint_names = [m.joint(int(j)).name for j in sc.joint_ids]
        # the policy drives these actuators; the others hold the default pose
        self.action_joints = np.array(policy_joint_indices(cfg.robot, self.joint_names), dtype=np.int64)
        self.num_actions = len(self.action_joints)
        rng_lo, rng_hi = m.jnt_range[sc.joint_ids, 0], m.jnt_range[sc.joint_ids, 1]
        mid, half = (rng_lo + rng_hi) / 2, (rng_hi - rng_lo) / 2 * cfg.robot.soft_joint_limit
        self.joint_soft_limits = np.stack([mid - half, mid + half], axis=1)
        self.base_qpos0 = 0  # free joint of the base is the first joint
        feet = set(cfg.robot.foot_bodies)
        self.undesired_bodies = np.array([b not in feet for b in sc.contact_bodies])
        self.hand_bodies = np.array([b in set(cfg.robot.hand_bodies) for b in sc.contact_bodies])
        self.termination_bodies = np.array([b in set(cfg.robot.termination_bodies) for b in sc.contact_bodies])
        self.foot_sensor_idx = np.array([sc.contact_bodies.index(b) for b in cfg.robot.foot_bodies])
        self.scan_points = cfg.height_scan.points()
        self._force_idx = (sc.contact_adr[:, None] + np.arange(1, 4)[None, :]).ravel()  # sensordata columns
        self._foot_vel_idx = (sc.foot_vel_adr[:, None] + np.arange(3)[None, :]).ravel()
        self.foot_points = cfg.foot_rays.points()
        self.robot_geoms = sc.robot_geoms
        self._base_mass0 = float(m.body_mass[sc.base_body])
        self._gain0 = m.actuator_gainprm[:, 0].copy()
        self._bias0 = m.actuator_biasprm[:, :3].copy()

        # observation layout
        self.groups = {g: list(t) for g, t in cfg.observations.items()}
        needed = {t for terms in self.groups.values() for t in terms}
        self.depth = DepthCamera(cfg.depth_camera, self.scene.tile_models, self.terrain) if "depth" in needed else None
        self.camera_envs = num_envs if cfg.camera_envs is None else min(cfg.camera_envs, num_envs)
        self.camera = None  # a perfect camera renders exact images whenever observations are computed
        if self.depth is not None and not cfg.camera_model.perfect:
            shape = (cfg.depth_camera.height, cfg.depth_camera.width)
            self.camera = CameraModel(cfg.camera_model, self.camera_envs, shape, cfg.policy_dt,
                                      cfg.depth_camera.far, seed=seed + 17)  # fmt: skip
        self.num_columns = self.terrain.num_columns
        tiles = self.terrain.tiles
        self.tile_origin = np.array([t.origin for t in tiles])
        self.tile_goal = np.array([t.goal if t.goal is not None else (np.nan, np.nan) for t in tiles])
        self.tile_has_goal = ~np.isnan(self.tile_goal[:, 0])
        # course progress is measured from the first phase trigger (the approach ends there); far before it elsewhere
        self.tile_trigger0 = np.array([t.triggers[0] if t.triggers else np.nan for t in tiles])

        # reward terms
        self.reward_names = list(cfg.rewards)
        self.reward_weights = np.array([cfg.rewards[n].weight for n in self.reward_names])
        self.reward_fns = [
            reward_terms.REWARD_TERMS[n].make(num_envs, **cfg.rewards[n].params) for n in self.reward_names
        ]

        # per-env state
        n = num_envs
        self.env_ids = np.arange(n)
        self.column = self.env_ids % self.num_columns
        max_init = min(cfg.curriculum.initial_max_level, self.terrain.num_levels - 1)
        if cfg.curriculum.initial_levels == "spread":
            self.level = (self.env_ids // self.num_columns) % (max_init + 1)
        else:
            self.level = self.rng.integers(0, max_init + 1, size=n)
        self.tile_ids = self.level * self.num_columns + self.column
        self.spawn_xy = np.zeros((n, 2))
        self.start_step = np.zeros(n, dtype=int)  # goal tiles: this env's step of a start curriculum
        self.command = np.zeros((n, 3))
        self.region_fall_rate = np.zeros(len(REGIONS))  # recent share of episodes that fell, per command region
        self.heading_target = np.zeros(n)
        self.heading_env = np.ones(n, dtype=bool)  # this env's command is a heading (else a yaw rate)
        self.command_timer = np.zeros(n)
        self.push_timer = np.zeros(n)
        self.actions = np.zeros((n, self.num_actions))
        self.last_actions = np.zeros((n, self.num_actions))
        self.foot_vel = np.zeros((n, 2, 3))
        self.last_foot_vel = np.zeros((n, 2, 3))
        self.episode_length = np.zeros(n, dtype=np.int64)
        self.episode_return = np.zeros(n)
        self.episode_terms = np.zeros((n, len(self.reward_names)))
        self.episode_count = np.zeros(n, dtype=np.int64)
        self.friction = np.ones(n)
        self.added_mass = np.zeros(n)
        self.motor_strength = np.ones(n)
        self.goal_reached = np.zeros(n, dtype=bool)
        self.goal_distance = np.full(n, np.nan)  # to the tile's goal after the last step (NaN: no goal)
        self.goal_best = np.full(n, np.nan)  # the closest to the goal by a step of goal_stall_distance this episode
        self.goal_gain_step = np.zeros(n, dtype=np.int64)  # ... and the episode step it got there
        self.stall_steps = int(round(cfg.terminations.goal_stall_s / cfg.policy_dt))  # 0: no stall ends
        self.gait_freq = np.full(n, cfg.gait.frequency[0])  # stride frequency, Hz, drawn per episode
        self.commanded_disp = np.zeros((n, 2))  # world-frame integral of the commanded velocity this episode
        # each env simulates its own model: its tile's terrain, plus its randomised physics when randomisation
        # is on (then a private copy, re-copied only when the env changes tile)
        self.model_tile = np.full(n, -1)
        self.env_models: list[mujoco.MjModel] = [m] * n
        self._depth_buf = (
            np.zeros((n, cfg.depth_camera.height, cfg.depth_camera.width)) if self.depth is not None else None
        )
        self._obs_buf: dict[str, np.ndarray] = {}
        self._state: TaskState | None = None
        self.reset()

    # ------------------------------------------------------------------ spaces
    def obs_dims(self) -> dict[str, dict[str, int]]:
        """Observation group -> term -> width."""
        return {g: {t: self._obs_buf[t].shape[1] for t in terms} for g, terms in self.groups.items()}

    # ------------------------------------------------------------------ reset
    def reset(self) -> Obs:
        """Reset every env (seeded); returns the first observation."""
        self._reset_envs(self.env_ids)
        self._read_state()
        self._compute_obs(None)
        return self._obs_tensors()

    def _reset_envs(self, ids: np.ndarray) -> None:
        cfg, rng, m = self.cfg, self.rng, self.model
        k = len(ids)
        if k == 0:
            return
        self.tile_ids[ids] = self.level[ids] * self.num_columns + self.column[ids]
        for env in [] if self.warp else ids:  # (warp: one model holds every tile)
            tile = self.tile_ids[env]
            if self.model_tile[env] != tile:
                template = self.scene.tile_models[tile]
                self.env_models[env] = copy.copy(template) if self._randomized else template
                self.model_tile[env] = tile
        q = np.tile(m.qpos0, (k, 1))
        jitter, starts = cfg.randomization.spawn_jitter, cfg.randomization.goal_starts
        along = [tuple(r) for r in starts] != [(0.0, 0.0)]
        yaw = np.zeros(k)
        for j, env in enumerate(ids):
            tile = self.terrain.tiles[self.tile_ids[env]]
            x, y = tile.spawn[0], tile.spawn[1]
            if tile.type not in GOAL_TYPES:
                x += rng.uniform(-jitter, jitter)
                y += rng.uniform(-jitter, jitter)
                yaw[j] = rng.uniform(-np.pi, np.pi)
            else:  # along the course (+x) from the spawn, by a drawn range of goal_starts
                if along:  # (the default draws nothing: the same trials as before the option)
                    curriculum = cfg.randomization.goal_start_curriculum
                    step = self.start_step[env] if curriculum else rng.integers(len(starts))
                    lo, hi = starts[step]
                    x += rng.uniform(lo, hi)
                y += rng.uniform(-jitter, jitter) * 0.5
            ground = float(self.terrain.height_at(np.array([x, y]))[()])
            q[j, 0:3] = (x, y, ground + cfg.robot.base_height + 0.01)
            self.spawn_xy[env] = (x, y)
        q[:, 3:7] = yaw_quat(yaw)
        noise = rng.uniform(-1, 1, size=(k, self.model.nu)) * cfg.randomization.init_joint_noise
        q[:, self.scene.joint_qpos] = self.default_joint_pos + noise
        # all of MuJoCo's state anew (the solver's warm start, applied pushes, time), so that an episode does not
        # depend on the one before it in the same env
        self.batch.reset(ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        self.qpos[ids] = q
        self.qvel[ids] = 0.0
        self.ctrl[ids] = self.default_joint_pos
        self._randomize(ids)
        if not self.warp:
            self.batch.set_models(self.env_models)
        self.batch.forward(ids)
        if self.camera is not None:  # the camera's new episode starts with a frame of the spawn pose
            self.camera.reset(ids[ids < self.camera_envs], self._render_images, self.max_episode_length)

        self.actions[ids] = 0.0
        self.last_actions[ids] = 0.0
        self.episode_length[ids] = 0
        self.episode_return[ids] = 0.0
        self.episode_terms[ids] = 0.0
        self.goal_reached[ids] = False
        self.goal_distance[ids] = np.linalg.norm(self.tile_goal[self.tile_ids[ids]] - self.qpos[ids, 0:2], axis=1)
        self.goal_best[ids] = self.goal_distance[ids]
        self.goal_gain_step[ids] = 0
        self.commanded_disp[ids] = 0.0
        self.command_timer[ids] = 0.0
        self.push_timer[ids] = 0.0
        self._resample_commands(ids)
        self.gait_freq[ids] = rng.uniform(*cfg.gait.frequency, size=k)
        for fn in self.reward_fns:
            if hasattr(fn, "reset"):
                fn.reset(ids)
        vel = self.sensordata[ids][:, self._foot_vel_idx].reshape(len(ids), -1, 3)
        self.foot_vel[ids] = vel
        self.last_foot_vel[ids] = vel

    def _randomize(self, ids: np.ndarray) -> None:
        """Draw friction, added base mass and motor strength for envs ``ids`` into their private models."""
        r, rng, k = self.cfg.randomization, self.rng, len(ids)
        friction = rng.uniform(*r.friction, size=k) if r.friction else np.ones(k)
        added = rng.uniform(*r.added_mass, size=k) if r.added_mass else np.zeros(k)
        strength = rng.uniform(*r.motor_strength, size=k) if r.motor_strength else np.ones(k)
        self.friction[ids], self.added_mass[ids], self.motor_strength[ids] = friction, added, strength
        if not self._randomized:
            return
        base = self.scene.base_body
        if self.warp:  # per-world fields of the one model
            b = self.batch
            b.params("geom_friction")[ids[:, None], self._physics_robot_geoms[None, :], 0] = friction[:, None]
            b.params("body_mass")[ids, base] = self._base_mass0 + added
            b.params("actuator_gainprm")[ids, :, 0] = self._gain0[None, :] * strength[:, None]
            b.params("actuator_biasprm")[ids, :, :3] = self._bias0[None, :, :] * strength[:, None, None]
            b.commit_params()
            return
        for j, env in enumerate(ids):
            em = self.env_models[env]
            em.geom_friction[self.robot_geoms, 0] = friction[j]
            em.body_mass[base] = self._base_mass0 + added[j]
            em.actuator_gainprm[:, 0] = self._gain0 * strength[j]
            em.actuator_biasprm[:, :3] = self._bias0 * strength[j]

    def _resample_commands(self, ids: np.ndarray) -> None:
        c, rng, k = self.cfg.commands, self.rng, len(ids)
        self.command[ids, 0] = rng.uniform(*c.lin_vel_x, size=k)
        self.command[ids, 1] = rng.uniform(*c.lin_vel_y, size=k)
        self.command[ids, 2] = rng.uniform(*c.ang_vel_yaw, size=k)
        self.heading_target[ids] = rng.uniform(-np.pi, np.pi, size=k)
        self.heading_env[ids] = rng.uniform(size=k) < c.heading_fraction
        standing = rng.uniform(size=k) < c.standing_fraction
        self.command[ids[standing]] = 0.0
        if c.failure_focus > 0.0:
            self._focus_on_failures(ids[~standing & (rng.uniform(size=k) < c.failure_focus)])
        goal = self.tile_has_goal[self.tile_ids[ids]]
        if goal.any():
            g_ids = ids[goal]
            self.heading_env[g_ids] = True  # steered towards the goal, from the first observation on
            self.command[g_ids, 0] = rng.uniform(*c.goal_speed, size=len(g_ids))
            self.command[g_ids, 1] = 0.0
            delta = self.tile_goal[self.tile_ids[g_ids]] - self.qpos[g_ids, 0:2]
            self.heading_target[g_ids] = np.arctan2(delta[:, 1], delta[:, 0])
        self.command_timer[ids] = 0.0

    # ------------------------------------------------------------------ teachers that drive other joints
    action_offset = "default"  # an action of 0 targets the default pose
    proprio_layout = "locomotion"  # llp.sim.proprio

    @property
    def action_joint_names(self) -> list[str]:
        return [self.joint_names[j] for j in self.action_joints]

    @property
    def action_scale(self) -> float:
        return self.cfg.robot.action_scale

    def _teacher_joints(self, joints: list[str] | None) -> np.ndarray:
        """Indices (in joint order) of the joints a teacher's actions drive; ``None``: this env's."""
        if joints is None:
            return self.action_joints
        unknown = [j for j in joints if j not in self.joint_names]
        if unknown:
            raise ValueError(f"a teacher drives joints {unknown} that robot {self.cfg.robot.name} does not have")
        return np.array([self.joint_names.index(j) for j in joints], dtype=np.int64)

    def convert_actions(self, actions: torch.Tensor, env_ids: torch.Tensor, offset: str = "default",
                        scale: float | None = None, joints: list[str] | None = None,
                        layout: str | None = None) -> torch.Tensor:  # fmt: skip
        """Actions of a teacher that drives ``joints`` (the others held at the default pose, as in its own env),
        with ``scale``, as this env's actions: the same joint targets. A leg-only locomotion teacher labels a
        whole-body student's states with this."""
        if offset != "default":
            raise ValueError(f"a terrain env converts actions that offset the default pose, not {offset!r}")
        s = self.cfg.robot.action_scale
        targets = np.repeat(self.default_joint_pos[None, :], len(env_ids), axis=0)
        targets[:, self._teacher_joints(joints)] += (scale or s) * actions.numpy()
        mine = (targets[:, self.action_joints] - self.default_joint_pos[self.action_joints]) / s
        return torch.from_numpy(mine.astype(np.float32))

    def teacher_obs(self, obs: dict, env_ids: torch.Tensor, offset: str = "default", scale: float | None = None,
                    joints: list[str] | None = None, layout: str | None = None) -> dict:  # fmt: skip
        """``obs`` of envs ``env_ids`` as a teacher that drives ``joints`` (with ``scale``) and reads proprioception
        in ``layout`` sees them: the last action in proprio re-expressed as its own (the joint targets in force
        on its joints), the proprioception in its layout."""
        if offset != "default":
            raise ValueError(f"a terrain env shows teachers actions that offset the default pose, not {offset!r}")
        theirs = self._teacher_joints(joints)
        same_actions = np.array_equal(theirs, self.action_joints) and scale in (None, self.cfg.robot.action_scale)
        if same_actions and layout in (None, self.proprio_layout):
            return obs
        ids = env_ids.numpy()
        last = (self.ctrl[ids][:, theirs] - self.default_joint_pos[theirs]) / (scale or self.cfg.robot.action_scale)
        out = {}
        for group, terms in obs.items():
            out[group] = dict(terms)
            if "proprio" in terms:  # its last block is the last action
                kept = convert_proprio(terms["proprio"][:, : -self.num_actions], self.proprio_layout,
                                       layout or self.proprio_layout)  # fmt: skip
                out[group]["proprio"] = torch.cat([kept, torch.from_numpy(last.astype(np.float32))], dim=1)
        return out

    # ------------------------------------------------------------------ step
    def step(self, actions: torch.Tensor) -> StepResult:
        """Advance every env by one policy step with joint-position actions [N, num_actions]."""
        cfg = self.cfg
        a = actions.detach().cpu().numpy().astype(np.float64, copy=False)
        if a.shape != (self.num_envs, self.num_actions):
            raise ValueError(f"actions must be [{self.num_envs}, {self.num_actions}], got {list(a.shape)}")
        a = np.minimum(np.maximum(a, -cfg.action_clip), cfg.action_clip)
        self.last_actions[:] = self.actions
        self.actions[:] = a
        targets = np.repeat(self.default_joint_pos[None, :], self.num_envs, axis=0)
        targets[:, self.action_joints] += cfg.robot.action_scale * a
        self.ctrl[:] = targets
        self.batch.step(nstep=cfg.decimation)

        self.episode_length += 1
        self.command_timer += self.dt
        self.push_timer += self.dt
        self._update_goal_commands()
        due = self.env_ids[self.command_timer >= cfg.commands.resample_s]
        if len(due):
            self._resample_commands(due)
        self._push()
        if self.camera is not None:  # a tick of the camera: frames due are captured, frames arrived are read
            self.camera.step(self._render_images)

        self.last_foot_vel[:] = self.foot_vel
        s = self._read_state()
        cos, sin = np.cos(s.yaw), np.sin(s.yaw)  # where the commands, in the base frame, point in the world
        vx, vy = self.command[:, 0], self.command[:, 1]
        self.commanded_disp += np.stack([vx * cos - vy * sin, vx * sin + vy * cos], axis=1) * self.dt
        terminated, truncated, success = self._terminations(s)
        s.terminated = terminated
        terms = np.stack([fn(s) for fn in self.reward_fns], axis=1) if self.reward_fns else np.zeros((self.num_envs, 0))
        weighted = terms * self.reward_weights[None, :] * self.dt
        reward = weighted.sum(axis=1)
        if cfg.only_positive_rewards:
            reward = np.maximum(reward, 0.0)
        self.episode_return += reward
        self.episode_terms += weighted

        done = terminated | truncated
        self._compute_obs(None)
        final_obs = None
        info: dict = {
            "reward_terms": dict(zip(self.reward_names, terms.mean(axis=0).tolist())),
            "weighted_terms": torch.from_numpy(weighted.astype(np.float32)),  # [N, terms], env.reward_names order
            "base_velocity": s.base_lin_vel[:, 0:2].copy(),  # [N, 2] yaw frame, before any reset (evaluation)
        }
        done_ids = self.env_ids[done]
        if len(done_ids):
            final_obs = self._obs_tensors()
            info["episode"] = self._episode_summary(done_ids, terminated, success)
            info["ends"] = {cause: int(ended[done].sum()) for cause, ended in self._ends.items()}
            info["end_details"] = self._ends_by_command(done & ~self.tile_has_goal[self.tile_ids], terminated)
            self._update_curriculum(done_ids, terminated, success)
            self.episode_count[done_ids] += 1
            self._reset_envs(done_ids)
            self._read_state()
            self._compute_obs(done_ids)
        return StepResult(
            obs=self._obs_tensors(),
            reward=torch.from_numpy(reward.astype(np.float32)),
            terminated=torch.from_numpy(terminated),
            truncated=torch.from_numpy(truncated),
            final_obs=final_obs,
            info=info,
        )

    def _update_goal_commands(self) -> None:
        """Goal tiles: steer towards the goal (heading = bearing of the goal)."""
        has_goal = self.tile_has_goal[self.tile_ids]
        if has_goal.any():
            delta = self.tile_goal[self.tile_ids[has_goal]] - self.qpos[has_goal, 0:2]
            self.heading_target[has_goal] = np.arctan2(delta[:, 1], delta[:, 0])

    def _push(self) -> None:
        r = self.cfg.randomization
        if r.push_interval_s is None:
            return
        due = self.env_ids[self.push_timer >= r.push_interval_s]
        if len(due):
            self.qvel[due, 0:2] += self.rng.uniform(-r.push_velocity, r.push_velocity, size=(len(due), 2))
            self.push_timer[due] = 0.0

    # ------------------------------------------------------------------ state
    def _read_state(self) -> TaskState:
        sc, cfg = self.scene, self.cfg
        qpos, qvel = self.qpos, self.qvel
        yaw, gravity = yaw_and_gravity(qpos[:, 3:7])
        standing = (self.command[:, 0] == 0) & (self.command[:, 1] == 0)
        heading = self.heading_env & ~standing if cfg.commands.heading_command else np.zeros(self.num_envs, dtype=bool)
        if cfg.commands.heading_command:
            err = wrap_angle(self.heading_target - yaw)
            lo, hi = cfg.commands.ang_vel_yaw
            self.command[heading, 2] = np.minimum(np.maximum(cfg.commands.heading_stiffness * err[heading], lo), hi)
            self.command[standing, 2] = 0.0
        forces = self.sensordata[:, self._force_idx]  # [N, B*3] net contact force per body, world frame
        forces *= forces
        force_mag = np.sqrt(forces.reshape(self.num_envs, -1, 3).sum(axis=2))
        foot_pos = self.site_xpos[:, sc.foot_sites]  # [N, 2, 3]
        foot_mat = self.site_xmat[:, sc.foot_sites]  # [N, 2, 9]
        foot_yaw = np.arctan2(foot_mat[:, :, 3], foot_mat[:, :, 0])
        self.foot_vel[:] = self.sensordata[:, self._foot_vel_idx].reshape(self.num_envs, -1, 3)
        ground = self.terrain.height_at(qpos[:, 0:2])
        s = TaskState(
            dt=self.dt,
            base_lin_vel=rotate_into_yaw_frame(qvel[:, 0:3], yaw),
            base_ang_vel=qvel[:, 3:6].copy(),
            projected_gravity=gravity,
            yaw=yaw,
            command=self.command,
            heading_target=self.heading_target,
            heading_active=heading,
            joint_pos=qpos[:, sc.joint_qpos],
            default_joint_pos=self.default_joint_pos,
            joint_names=self.joint_names,
            joint_soft_limits=self.joint_soft_limits,
            actions=self.actions,
            last_actions=self.last_actions,
            foot_pos=foot_pos,
            foot_vel=self.foot_vel,
            last_foot_vel=self.last_foot_vel,
            foot_contact_force=force_mag[:, self.foot_sensor_idx],
            foot_ray_heights=foot_ray_heights(self.terrain, self.foot_points, foot_pos, foot_yaw),
            body_contact_force=force_mag,
            undesired_bodies=self.undesired_bodies,
            hand_bodies=self.hand_bodies,
            on_obstacle_tile=self.tile_has_goal[self.tile_ids],
            termination_bodies=self.termination_bodies,
            base_height=qpos[:, 2] - ground,
            gait_phase=self.gait_phase(),
        )
        self._state = s
        return s

    def gait_phase(self) -> np.ndarray:
        """Each foot's gait phase in [0, 2 pi) [N, 2]: the left foot swings in [0, pi), the right half a cycle
        later. It advances with episode time at the env's stride frequency."""
        cycles = self.gait_freq * self.episode_length * self.dt
        left = 2 * np.pi * (cycles % 1.0)
        return np.stack([left, (left + np.pi) % (2 * np.pi)], axis=1)

    def _terminations(self, s: TaskState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = self.cfg.terminations
        fell = (s.body_contact_force[:, s.termination_bodies] > t.contact_threshold).any(axis=1)
        fell |= s.projected_gravity[:, 2] > -np.cos(t.max_tilt)
        fell |= s.base_height < t.min_base_height
        time_out = self.episode_length >= self.max_episode_length
        half = np.array([self.cfg.terrain.tile_length / 2, self.cfg.terrain.tile_width / 2])
        xy = self.qpos[:, 0:2]
        left_tile = (np.abs(xy - self.tile_origin[self.tile_ids]) > half).any(axis=1)
        goal_dist = np.linalg.norm(self.tile_goal[self.tile_ids] - xy, axis=1)
        success = self.tile_has_goal[self.tile_ids] & (np.where(np.isnan(goal_dist), np.inf, goal_dist) < t.goal_radius)
        s.goal_reached = success & ~self.goal_reached
        s.goal_approach = np.nan_to_num(self.goal_distance - goal_dist)
        self.goal_distance[:] = goal_dist
        self.goal_reached |= success
        stalled = np.zeros(self.num_envs, dtype=bool)
        if self.stall_steps:  # goal tiles: no goal_stall_distance of progress for goal_stall_s ends the episode
            with np.errstate(invalid="ignore"):  # (NaN distances: no goal on the tile, never a gain)
                gained = goal_dist <= self.goal_best - t.goal_stall_distance
            self.goal_best[gained] = goal_dist[gained]
            self.goal_gain_step[gained] = self.episode_length[gained]
            waited = self.episode_length - self.goal_gain_step >= self.stall_steps
            stalled = self.tile_has_goal[self.tile_ids] & ~success & ~fell & waited
        terminated = fell | stalled
        truncated = ~terminated & (time_out | left_tile | success)
        self._ends = {  # why each episode ended, one cause each (episode_ends/<cause> in the training metrics)
            "fall": fell,
            "stall": stalled,
            "goal": success & ~fell,
            "time_out": truncated & ~success & time_out,
            "left_tile": truncated & ~success & ~time_out,
        }
        return terminated, truncated, success

    def _ends_by_command(self, ended: np.ndarray, terminated: np.ndarray) -> dict[str, int]:
        """Episodes ended off goal tiles, and the falls among them, by the region of the command they ended on
        (``command/<region>/ended`` and ``.../fell``): which commands the policy falls on, as training goes.
        Also keeps each region's recent fall rate, which ``commands.failure_focus`` samples from."""
        regions = command_regions(self.command[:, 0:2])
        out = {}
        for k, region in enumerate(REGIONS):
            mine = ended & (regions == k)
            if mine.any():
                n, fell = int(mine.sum()), int((mine & terminated).sum())
                out[f"command/{slug(region)}/ended"], out[f"command/{slug(region)}/fell"] = n, fell
                keep = FALL_RATE_MEMORY**n  # each ended episode moves the rate 1 / 200 of the way to its outcome
                self.region_fall_rate[k] = keep * self.region_fall_rate[k] + (1 - keep) * fell / n
        return out

    def _focus_on_failures(self, ids: np.ndarray) -> None:
        """Draw envs ``ids``' (vx, vy) again, inside one moving region each, picked in proportion to the regions'
        recent fall rates (uniform while none has fallen); uniform inside the region (rejection from the
        ranges; an env whose region the ranges miss keeps its command)."""
        if not len(ids):
            return
        c, rng = self.cfg.commands, self.rng
        rates = self.region_fall_rate[1:] + 1e-3  # the moving regions (not standing)
        want = 1 + rng.choice(len(rates), size=len(ids), p=rates / rates.sum())
        tries = 32
        vel = np.stack([rng.uniform(*c.lin_vel_x, size=(len(ids), tries)),
                        rng.uniform(*c.lin_vel_y, size=(len(ids), tries))], axis=-1)  # fmt: skip
        match = command_regions(vel.reshape(-1, 2)).reshape(len(ids), tries) == want[:, None]
        found = match.any(axis=1)
        first = match.argmax(axis=1)
        self.command[ids[found], 0:2] = vel[found, first[found]]

    def _episode_summary(self, ids: np.ndarray, terminated: np.ndarray, success: np.ndarray) -> dict:
        summary = {
            "env_ids": ids.copy(),
            "return": self.episode_return[ids].copy(),
            "length": self.episode_length[ids].copy(),
            "terminated": terminated[ids].copy(),
            "success": success[ids].copy(),
            "level": self.level[ids].copy(),
            "terms": {n: self.episode_terms[ids, i].copy() for i, n in enumerate(self.reward_names)},
        }
        if self.cfg.randomization.goal_start_curriculum:  # the start curriculum's step each episode began at
            summary["start_step"] = self.start_step[ids].copy()
        return summary

    def _update_curriculum(self, ids: np.ndarray, terminated: np.ndarray, success: np.ndarray) -> None:
        if self.cfg.randomization.goal_start_curriculum:  # starts: on after reaching the goal, back otherwise
            goal = self.tile_has_goal[self.tile_ids[ids]]
            step = self.start_step[ids] + np.where(success[ids], 1, -1)
            last = len(self.cfg.randomization.goal_starts) - 1
            self.start_step[ids] = np.where(goal, np.clip(step, 0, last), self.start_step[ids])
        if not self.cfg.curriculum.enabled:
            return
        distance = np.linalg.norm(self.qpos[ids, 0:2] - self.spawn_xy[ids], axis=1)
        goal = self.tile_has_goal[self.tile_ids[ids]]
        # how far the episode's commands, followed exactly, would have carried the robot from its spawn (heading
        # commands turn it, so this is the length of the integrated world-frame command, not speed x time), as
        # far as the tile allows
        commanded = np.minimum(np.linalg.norm(self.commanded_disp[ids], axis=1), self.cfg.terrain.tile_length / 2)
        up = np.where(goal, success[ids], distance > self.cfg.terrain.tile_length * 0.4)
        down = np.where(goal, terminated[ids], (distance < 0.5 * commanded) & ~up)
        top = self.terrain.num_levels - 1
        self.level[ids] = np.clip(self.level[ids] + up.astype(int) - down.astype(int), 0, top)

    # ------------------------------------------------------------------ observations
    def _compute_obs(self, ids: np.ndarray | None) -> None:
        """Fill the observation buffers, for every env (ids=None) or for the envs ``ids``."""
        s, cfg, sc = self._state, self.cfg, self.scene
        sel = slice(None) if ids is None else ids
        needed = {t for terms in self.groups.values() for t in terms}
        n = self.num_envs
        qvel = self.qvel[sel]
        if "proprio" in needed:
            parts = [
                *proprio_head(s.base_ang_vel[sel], s.projected_gravity[sel], self.proprio_layout),
                s.joint_pos[sel] - self.default_joint_pos,
                qvel[:, sc.joint_qvel] * 0.05,
                self.actions[sel],
            ]
            self._write("proprio", sel, np.concatenate(parts, axis=1), n)
        if "command" in needed:
            self._write("command", sel, self.command[sel], n)
        if "height_scan" in needed:
            scan = height_scan(self.terrain, self.scan_points, self.qpos[sel, 0:3], s.yaw[sel], cfg.robot.base_height)
            self._write("height_scan", sel, np.minimum(np.maximum(scan, -1.0), 1.0), n)
        if "foot_scan" in needed:
            rel = s.foot_ray_heights[sel] - s.foot_pos[sel][:, :, 2:3]
            self._write("foot_scan", sel, np.minimum(np.maximum(rel, -1.0), 1.0).reshape(rel.shape[0], -1), n)
        if "privileged" in needed:
            contact = (s.foot_contact_force[sel] > 1.0).astype(np.float64)
            parts = [
                s.base_lin_vel[sel],
                s.base_height[sel, None],
                contact,
                s.foot_contact_force[sel] / 100.0,
                self.friction[sel, None],
                self.added_mass[sel, None],
                self.motor_strength[sel, None],
            ]
            self._write("privileged", sel, np.concatenate(parts, axis=1), n)
        if "amp_features" in needed:
            parts = [
                s.base_height[sel, None],
                s.projected_gravity[sel],
                s.base_lin_vel[sel],
                s.base_ang_vel[sel],
                s.joint_pos[sel] - self.default_joint_pos,
                qvel[:, sc.joint_qvel] * 0.05,
            ]
            self._write("amp_features", sel, np.concatenate(parts, axis=1), n)
        if "progress" in needed:
            trigger = self.tile_trigger0[self.tile_ids[sel]]
            past = np.where(np.isnan(trigger), NO_COURSE_PROGRESS, self.qpos[sel, 0] - np.nan_to_num(trigger))
            self._write("progress", sel, past[:, None], n)
        if "gait_clock" in needed:
            phase = s.gait_phase[sel]
            self._write("gait_clock", sel, np.concatenate([np.cos(phase), np.sin(phase)], axis=1), n)
        if "group_onehot" in needed:
            onehot = np.eye(self.num_columns)[self.column[sel]]
            self._write("group_onehot", sel, onehot, n)
        if "depth" in needed:
            self._render_depth(ids)
            self._write("depth", slice(None), self._depth_buf.reshape(n, -1) / cfg.depth_camera.far, n)

    def _write(self, name: str, sel, values: np.ndarray, n: int) -> None:
        if name not in self._obs_buf:
            self._obs_buf[name] = np.zeros((n, values.shape[1]), dtype=np.float32)
        self._obs_buf[name][sel] = values

    def _render_depth(self, ids: np.ndarray | None) -> None:
        if self.camera is not None:  # the camera model: what the policy reads was captured at ticks and resets
            self._depth_buf[: self.camera_envs] = self.camera.image
            return
        envs = np.arange(self.camera_envs) if ids is None else ids[ids < self.camera_envs]
        if len(envs):
            self._depth_buf[envs] = self._render_images(envs)

    def _render_images(self, envs: np.ndarray) -> np.ndarray:
        """Exact depth images [k, H, W] (metres) of envs ``envs`` at their current state."""
        cam = self.scene.camera_site
        pos = self.site_xpos[envs, cam]
        mat = self.site_xmat[envs, cam].reshape(-1, 3, 3)
        images = np.empty((len(envs), *self._depth_buf.shape[1:]))
        self.depth.render(self.tile_ids[envs], pos, mat, images)
        return images

    def _obs_tensors(self) -> Obs:
        copies = {name: torch.from_numpy(buf.copy()) for name, buf in self._obs_buf.items()}
        return {g: {t: copies[t] for t in terms} for g, terms in self.groups.items()}

    # ------------------------------------------------------------------ trials (evaluation)
    def reseed(self, seed: int) -> None:
        """Draw every later spawn, command, randomisation and camera-model draw from ``seed``."""
        self.rng = np.random.default_rng(seed)
        if self.camera is not None:
            self.camera.rng = np.random.default_rng(seed + 17)

    def assign_tiles(self, ids: np.ndarray, columns: np.ndarray, levels: np.ndarray) -> Obs:
        """Move envs ``ids`` to the tiles (column = tile type index, level) and start a new episode there."""
        ids = np.asarray(ids)
        self.column[ids], self.level[ids] = columns, levels
        self._reset_envs(ids)
        self._read_state()
        self._compute_obs(ids)
        return self._obs_tensors()

    def command_envs(self, ids: np.ndarray, lin_vel: np.ndarray, heading: np.ndarray | None = None) -> None:
        """Give envs ``ids`` a fixed command: linear velocity [k, 2] (base frame) and, with heading commands
        on, a heading [k] (radians, world frame). Held until the env resamples (``commands.resample_s``)."""
        ids = np.asarray(ids)
        self.command[ids, 0:2] = lin_vel
        if heading is not None:
            self.heading_target[ids] = heading
            self.heading_env[ids] = True
        self.command_timer[ids] = 0.0
        self._read_state()
        self._compute_obs(ids)

    def course_state(self) -> dict[str, np.ndarray]:
        """Where each env is on its tile: base ``xy`` [N, 2], ``spawn`` [N, 2], ``goal`` [N, 2] (NaN on tiles
        without a goal), ``yaw`` [N], ``command`` [N, 3], and its tile's ``column`` (type index) and ``level`` [N]."""
        return {
            "xy": self.qpos[:, 0:2].copy(),
            "spawn": self.spawn_xy.copy(),
            "goal": self.tile_goal[self.tile_ids].copy(),
            "yaw": self._state.yaw.copy(),
            "command": self.command.copy(),
            "column": self.column.copy(),
            "level": self.level.copy(),
        }

    # ------------------------------------------------------------------ helpers for tests and tools
    def depth_images(self) -> np.ndarray:
        """Current depth images of the camera envs, [camera_envs, H, W] metres."""
        if self._depth_buf is None:
            raise RuntimeError("no observation group uses the 'depth' term")
        return self._depth_buf[: self.camera_envs].copy()

    def state(self) -> TaskState:
        return self._state

    def set_base_pose(self, env: int, pos: np.ndarray, yaw: float = 0.0) -> None:
        """Place env ``env``'s base (tests and tools); recomputes its derived fields and observations."""
        self.qpos[env, 0:3] = pos
        self.qpos[env, 3:7] = yaw_quat(np.array([yaw]))[0]
        self.qvel[env] = 0.0
        self.batch.forward(np.array([env]))
        self._read_state()
        self._compute_obs(None)

    def close(self) -> None:
        """Release the simulator where it holds something per process (Isaac Lab: its one simulation)."""
        closer = getattr(self.batch, "close", None)
        if closer is not None:
            closer()

    def physics_readback(self) -> dict:
        """Per-env physics parameters as the engine holds them, where it keeps its own copy (isaaclab)."""
        return self.batch.readback()

    def set_physics_state(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        """Put every env's robot in the state ``qpos`` [N, nq], ``qvel`` [N, nv] (tests and tools: one backend's
        state on another); recomputes the derived fields and the observations."""
        self.qpos[:] = qpos
        self.qvel[:] = qvel
        self.batch.forward(self.env_ids)
        self._read_state()
        self._compute_obs(None)

    def observe(self) -> Obs:
        return self._obs_tensors()
