"""Walking states: the locomotion teacher's own gait, recorded on flat ground, for episodes that start walking.

On the transition course the robot reaches a skill's start walking, while a skill learned from standing starts
never meets that handoff in training. These states put an episode's body mid-stride: each is stored in the
robot's heading frame, so it can be placed at any spot and heading, as one row of

  [pelvis height above the floor (1), tilt: the pelvis quaternion with its heading removed (4),
   joint positions (nq - 7), linear velocity in the heading frame (3), angular velocity as MuJoCo's free
   joint holds it, body frame (3), joint velocities (nv - 6)]

for a robot whose model holds only its own free joint and joints (the terrain and tracking envs' robots).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from llp.config.schema import check, field
from llp.sim.math3d import rotate_into_yaw_frame, yaw_and_gravity, yaw_quat


@dataclass(kw_only=True)
class WalkingStatesConfig:
    """How the teacher's gait is recorded: straight ahead on flat ground at a commanded pace."""

    speed: tuple[float, float] = field(
        default=(0.3, 0.6),
        doc="Forward command range of the recorded walk, m/s (the skill's pace, about 0.2 m/s, up to the "
        "course's lowest, 0.4-0.8).",
    )
    envs: int = field(default=64, doc="Envs of the recording.")
    steps: int = field(default=150, doc="Policy steps recorded per env.")
    warmup_s: float = field(default=1.0, doc="Seconds into an episode before its states count (the gait settles).")
    every: int = field(default=2, doc="Keep every this many steps' states.")

    def validate(self, path: str) -> None:
        lo, hi = self.speed
        check(0 <= lo <= hi, f"{path}.speed", f"must be a range 0 <= lo <= hi, got {list(self.speed)}")
        for name in ("envs", "steps", "every"):
            check(getattr(self, name) >= 1, f"{path}.{name}", "must be >= 1")
        check(self.warmup_s >= 0, f"{path}.warmup_s", "must be >= 0")


def state_width(nq: int, nv: int) -> int:
    """Columns of a walking state of a robot with ``nq`` positions and ``nv`` velocities."""
    return 1 + 4 + (nq - 7) + 3 + 3 + (nv - 6)


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton products of quaternions [N, 4] (w first)."""
    aw, ax, ay, az = a.T
    bw, bx, by, bz = b.T
    return np.stack([
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ], axis=1)  # fmt: skip


def to_states(qpos: np.ndarray, qvel: np.ndarray, ground: np.ndarray) -> np.ndarray:
    """Rows of ``qpos`` [N, nq] and ``qvel`` [N, nv] as walking states, ``ground`` [N] the floor beneath."""
    yaw, _ = yaw_and_gravity(qpos[:, 3:7])
    unyaw = yaw_quat(-yaw)
    tilt = quat_mul(unyaw, qpos[:, 3:7])
    return np.concatenate([
        (qpos[:, 2] - ground)[:, None], tilt, qpos[:, 7:],
        rotate_into_yaw_frame(qvel[:, 0:3], yaw), qvel[:, 3:6], qvel[:, 6:],
    ], axis=1)  # fmt: skip


def place(states: np.ndarray, xy: np.ndarray, yaw: np.ndarray, nq: int, floor: float = 0.0):
    """(qpos [N, nq], qvel [N, nv]) of ``states`` [N, D] placed at ``xy`` [N, 2] with heading ``yaw`` [N]."""
    nj = nq - 7
    height, tilt, joints = states[:, 0], states[:, 1:5], states[:, 5 : 5 + nj]
    lin, ang, joint_vel = states[:, 5 + nj : 8 + nj], states[:, 8 + nj : 11 + nj], states[:, 11 + nj :]
    qpos = np.concatenate([xy, (height + floor)[:, None], quat_mul(yaw_quat(yaw), tilt), joints], axis=1)
    world = rotate_into_yaw_frame(lin, -yaw)  # the heading frame's velocity back into the world's
    return qpos, np.concatenate([world, ang, joint_vel], axis=1)


def forward_speed(states: np.ndarray) -> np.ndarray:
    """[M] each state's speed along its heading, m/s (a robot of hinge joints: as many velocities as joints)."""
    joints = (states.shape[1] - 11) // 2
    return states[:, 5 + joints]


def record_walking_states(env, policy, cfg: WalkingStatesConfig) -> np.ndarray:
    """[M, D] states of ``policy`` (deterministic: its action mean) walking in ``env`` (a terrain env on flat
    ground commanding ``cfg.speed`` straight ahead), from envs at least ``cfg.warmup_s`` into their episode."""
    warmup = int(round(cfg.warmup_s / env.dt))
    obs = env.reset()
    memory = policy.initial_memory(env.num_envs)
    rows = []
    with torch.no_grad():
        for t in range(cfg.steps):
            mean, memory, _ = policy.step(policy.observe(obs), memory)
            result = env.step(mean)
            memory = memory.reset(result.terminated | result.truncated)
            obs = result.obs
            if t % cfg.every == 0:
                walking = env.episode_length >= warmup
                if walking.any():
                    qpos, qvel = env.qpos[walking], env.qvel[walking]
                    rows.append(to_states(qpos, qvel, env.terrain.height_at(qpos[:, 0:2])))
    if not rows:
        raise ValueError(f"no walking states: {cfg.steps} steps never passed the {cfg.warmup_s} s warm-up "
                         f"({warmup} steps); record more steps")  # fmt: skip
    return np.concatenate(rows).astype(np.float32)
