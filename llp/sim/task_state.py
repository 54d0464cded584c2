"""The per-step quantities that reward and termination terms read, all numpy arrays over envs.

The env fills one ``TaskState`` per step; tests build them by hand. Shapes use
N = envs, J = actuated joints, F = feet (2), K = rays per foot, B = bodies with
contact sensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TaskState:
    dt: float  # policy step, seconds
    base_lin_vel: np.ndarray | None = None  # [N, 3] base linear velocity in the yaw-aligned base frame
    base_ang_vel: np.ndarray | None = None  # [N, 3] base angular velocity, base frame
    projected_gravity: np.ndarray | None = None  # [N, 3] unit gravity in the base frame (upright: [0, 0, -1])
    yaw: np.ndarray | None = None  # [N] base heading, radians
    command: np.ndarray | None = None  # [N, 3] commanded (vx, vy, yaw rate), base frame
    heading_target: np.ndarray | None = None  # [N] commanded heading, radians
    heading_active: np.ndarray | None = None  # [N] bool: a heading is commanded (not standing, heading on)
    joint_pos: np.ndarray | None = None  # [N, J]
    default_joint_pos: np.ndarray | None = None  # [J] the pose actions are offsets from
    joint_names: list[str] | None = None  # [J] actuated joint names, in joint_pos order
    joint_soft_limits: np.ndarray | None = None  # [J, 2] lower/upper soft limits
    actions: np.ndarray | None = None  # [N, J] this step's actions
    last_actions: np.ndarray | None = None  # [N, J] the previous step's actions
    foot_pos: np.ndarray | None = None  # [N, F, 3] sole positions, world frame
    foot_vel: np.ndarray | None = None  # [N, F, 3] sole velocities, world frame
    last_foot_vel: np.ndarray | None = None  # [N, F, 3] sole velocities one policy step earlier
    foot_contact_force: np.ndarray | None = None  # [N, F] contact force magnitude on each foot, N
    foot_ray_heights: np.ndarray | None = None  # [N, F, K] ground height under each foot ray, world z
    body_contact_force: np.ndarray | None = None  # [N, B] contact force magnitude on each sensed body, N
    undesired_bodies: np.ndarray | None = None  # [B] bool: bodies whose contact is penalised
    hand_bodies: np.ndarray | None = None  # [B] bool: hands (allowed to touch obstacles)
    on_obstacle_tile: np.ndarray | None = None  # [N] bool: the env's tile is a climb, vault or course
    termination_bodies: np.ndarray | None = None  # [B] bool: bodies whose contact ends the episode
    base_height: np.ndarray | None = None  # [N] base height above the ground under it, metres
    terminated: np.ndarray | None = None  # [N] bool: this step ends the episode in a fall
    gait_phase: np.ndarray | None = None  # [N, 2] each foot's gait-clock phase in [0, 2 pi); swing in [0, pi)
    goal_reached: np.ndarray | None = None  # [N] bool: this step reaches the tile's goal (goal tiles only)
    goal_approach: np.ndarray | None = None  # [N] metres closer to the goal than a step before (0 without a goal)
