"""Reward terms of the perceptive-locomotion task, each a small function of a ``TaskState``.

A term returns one value per env, [N], as numpy arrays (the CPU env) or torch
tensors (the device env, ``llp.sim.device_env``): terms use ``llp.sim.xp``'s
ops, written once for both. The env multiplies it by its configured
weight and by the policy step dt and sums the terms. Terms are declared as
rewards (weight must be >= 0) or penalties (weight must be <= 0), so a penalty
configured with a positive weight is caught when the config loads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from llp.sim.task_state import TaskState
from llp.sim.xp import namespace


def _wrap(angle):
    return (angle + math.pi) % (2 * math.pi) - math.pi


def lin_vel_tracking(s: TaskState, sigma: float = 0.25) -> np.ndarray:
    """exp(-|v_xy - c_xy|^2 / sigma): Gaussian kernel in legged_gym's convention (sigma plays 2 std^2)."""
    xp = namespace(s.command)
    err = xp.sum((s.command[:, :2] - s.base_lin_vel[:, :2]) ** 2, axis=1)
    return xp.exp(-err / sigma)


def ang_vel_tracking(s: TaskState, sigma: float = 0.25) -> np.ndarray:
    """exp(-(w_z - c_yaw)^2 / sigma)."""
    err = (s.command[:, 2] - s.base_ang_vel[:, 2]) ** 2
    return namespace(err).exp(-err / sigma)


def upright(s: TaskState) -> np.ndarray:
    """Cosine of the base tilt, clipped at 0: 1 upright, 0 lying or upside down."""
    xp = namespace(s.projected_gravity)
    return xp.minimum(xp.maximum(-s.projected_gravity[:, 2], 0.0), 1.0)


def velocity_slack(s: TaskState, low: float = 0.3, high: float = 1.5, min_command: float = 0.1) -> np.ndarray:
    """1 when the speed along the command, over the command speed, lies in [low, high].

    Sign-aware: moving against the command gives a negative ratio (no reward).
    Gated: commands slower than ``min_command`` earn nothing (the ratio is meaningless).
    """
    xp = namespace(s.command)
    cmd = s.command[:, :2]
    speed2 = xp.sum(cmd**2, axis=1)
    gated = speed2 >= min_command**2
    ratio = xp.sum(s.base_lin_vel[:, :2] * cmd, axis=1) / xp.where(gated, speed2, 1.0)
    return xp.as_float(gated & (ratio >= low) & (ratio <= high))


def undesired_contact(s: TaskState, threshold: float = 1.0, allow_hands: str = "obstacles") -> np.ndarray:
    """Number of non-foot bodies pressed against anything harder than ``threshold`` newtons.

    Hands are exempt where climbing and vaulting need them: ``allow_hands`` is "obstacles" (envs on an
    obstacle tile: climbs, vaults, courses), "always", or "never".
    """
    xp = namespace(s.body_contact_force)
    hits = (s.body_contact_force > threshold) & s.undesired_bodies[None, :]
    if allow_hands != "never" and s.hand_bodies is not None:
        if allow_hands == "always":
            hits &= ~s.hand_bodies[None, :]
        else:
            hits &= ~(s.hand_bodies[None, :] & s.on_obstacle_tile[:, None])
    return xp.as_float(xp.sum(hits, axis=1))


def joint_limit(s: TaskState) -> np.ndarray:
    """Radians beyond the soft joint limits, summed over joints."""
    xp = namespace(s.joint_pos)
    low, high = s.joint_soft_limits[:, 0], s.joint_soft_limits[:, 1]
    below = xp.maximum(low[None, :] - s.joint_pos, 0.0)
    above = xp.maximum(s.joint_pos - high[None, :], 0.0)
    return xp.sum(below + above, axis=1)


def illegal_footstep(s: TaskState, depth: float = 0.1, contact_threshold: float = 1.0) -> np.ndarray:
    """Per contacting foot, the fraction of its rays whose ground lies more than ``depth`` below the sole; summed."""
    xp = namespace(s.foot_pos)
    below = xp.as_float((s.foot_pos[:, :, 2:3] - s.foot_ray_heights) > depth)  # [N, F, K]
    fraction = xp.sum(below, axis=2) / below.shape[2]
    contacting = s.foot_contact_force > contact_threshold
    return xp.sum(fraction * contacting, axis=1)


def heading_error(s: TaskState) -> np.ndarray:
    """|commanded heading - base heading|, radians in [0, pi]; 0 for envs with no heading command (standing
    still, or heading commands off)."""
    err = namespace(s.yaw).abs(_wrap(s.heading_target - s.yaw))
    return err if s.heading_active is None else err * s.heading_active


def opposite_direction(s: TaskState, min_command: float = 0.1) -> np.ndarray:
    """1 when the base moves against a (non-tiny) commanded direction."""
    xp = namespace(s.command)
    cmd = s.command[:, :2]
    moving_against = xp.sum(s.base_lin_vel[:, :2] * cmd, axis=1) < 0.0
    return xp.as_float(moving_against & (xp.sum(cmd**2, axis=1) >= min_command**2))


def action_rate(s: TaskState) -> np.ndarray:
    """|a_t - a_{t-1}|^2."""
    return namespace(s.actions).sum((s.actions - s.last_actions) ** 2, axis=1)


def alive(s: TaskState) -> np.ndarray:
    """1 every step the episode goes on."""
    return namespace(s.projected_gravity).ones_rows(s.projected_gravity)


def goal_reached(s: TaskState) -> np.ndarray:
    """1 on the step an env reaches its tile's goal (LLP's transition stage: goal reached)."""
    return namespace(s.goal_reached).as_float(s.goal_reached)


def goal_approach(s: TaskState, max_speed: float = 1.0) -> np.ndarray:
    """Speed towards the tile's goal this step, m/s, clipped to [-max_speed, max_speed] (LLP: goal approach)."""
    return namespace(s.goal_approach).clip(s.goal_approach / s.dt, -max_speed, max_speed)


def termination(s: TaskState) -> np.ndarray:
    """1 on the step the episode ends in failure (a fall; on goal tiles also a stall, goal_stall_s), else 0."""
    return namespace(s.terminated).as_float(s.terminated)


def flat_orientation(s: TaskState) -> np.ndarray:
    """|gravity_xy|^2 in the base frame: 0 upright, growing with tilt."""
    return namespace(s.projected_gravity).sum(s.projected_gravity[:, 0:2] ** 2, axis=1)


def lin_vel_z(s: TaskState) -> np.ndarray:
    """Vertical base velocity squared."""
    return s.base_lin_vel[:, 2] ** 2


def ang_vel_xy(s: TaskState) -> np.ndarray:
    """Roll and pitch rates squared."""
    return namespace(s.base_ang_vel).sum(s.base_ang_vel[:, 0:2] ** 2, axis=1)


_JOINT_MASKS: dict[tuple, np.ndarray] = {}  # (joint names, regex) -> joint indices


def joint_deviation(s: TaskState, joints: str = ".*") -> np.ndarray:
    """Sum over the joints whose names match the regex ``joints`` of |q - q_default| (L1), radians."""
    xp = namespace(s.joint_pos)
    key = (tuple(s.joint_names), joints, str(getattr(s.joint_pos, "device", "numpy")))
    index = _JOINT_MASKS.get(key)
    if index is None:
        import re

        picked = [i for i, n in enumerate(s.joint_names) if re.fullmatch(joints, n) is not None]
        index = _JOINT_MASKS[key] = xp.asarray(np.array(picked, dtype=np.int64), like=s.joint_pos)
    return xp.sum(xp.abs(s.joint_pos - s.default_joint_pos[None, :])[:, index], axis=1)


def feet_phase(s: TaskState, swing_height: float = 0.1, sigma: float = 0.01, min_command: float = 0.1) -> np.ndarray:
    """Feet follow the gait clock: exp(-sum_feet (clearance - target)^2 / sigma), where clearance is the sole's
    height above the highest ground under it and the target rises to ``swing_height`` and back in a half-sine
    while the foot's phase is in [0, pi) (swing) and is 0 in stance. 0 under commands slower than
    ``min_command`` (m/s and rad/s), so standing still is not asked to step."""
    xp = namespace(s.foot_pos)
    clearance = s.foot_pos[:, :, 2] - xp.amax(s.foot_ray_heights, axis=2)
    swing = s.gait_phase < math.pi
    target = xp.where(swing, swing_height * xp.sin(xp.minimum(s.gait_phase, math.pi)), 0.0)
    reward = xp.exp(-xp.sum((clearance - target) ** 2, axis=1) / sigma)
    moving = xp.amax(xp.abs(s.command), axis=1) >= min_command
    return reward * moving


def feet_slide(s: TaskState, contact_force: float = 1.0) -> np.ndarray:
    """Sum over the feet touching the ground (> ``contact_force`` newtons) of their horizontal speed, m/s:
    a foot that carries load should not slide (Isaac Lab's humanoid feet_slide)."""
    xp = namespace(s.foot_vel)
    contact = s.foot_contact_force > contact_force
    return xp.sum(xp.norm(s.foot_vel[:, :, :2], axis=2) * contact, axis=1)


class FeetAirTimeBiped:
    """Single-stance time: while exactly one foot touches the ground, the shorter of the stance foot's contact
    time and the swing foot's air time, capped at ``threshold`` seconds; 0 in double support, flight, or under
    commands slower than ``min_command``. Rewards stepping with a rhythm; per-env timers, reset per env."""

    def __init__(self, num_envs: int, threshold: float = 0.4, min_command: float = 0.1, contact_force: float = 1.0):
        self.threshold, self.min_command, self.contact_force = threshold, min_command, contact_force
        self.contact_time = np.zeros((num_envs, 2))
        self.air_time = np.zeros((num_envs, 2))

    def place(self, like) -> None:
        """Keep the timers as arrays of ``like``'s kind and device (the device env's tensors)."""
        xp = namespace(like)
        self.contact_time = xp.as_float(xp.asarray(self.contact_time, like=like))
        self.air_time = xp.as_float(xp.asarray(self.air_time, like=like))

    def reset(self, ids) -> None:
        self.contact_time[ids] = 0.0
        self.air_time[ids] = 0.0

    def __call__(self, s: TaskState) -> np.ndarray:
        xp = namespace(s.foot_contact_force)
        contact = s.foot_contact_force > self.contact_force  # [N, 2]
        self.contact_time = xp.where(contact, self.contact_time + s.dt, 0.0)
        self.air_time = xp.where(contact, 0.0, self.air_time + s.dt)
        in_mode = xp.where(contact, self.contact_time, self.air_time)
        single = xp.sum(contact, axis=1) == 1
        reward = xp.minimum(xp.amin(xp.where(single[:, None], in_mode, 0.0), axis=1), self.threshold)
        moving = xp.sum(s.command[:, 0:2] ** 2, axis=1) >= self.min_command**2
        return reward * moving


class FootAcceleration:
    """Accumulated excess foot acceleration: m <- alpha m + sum_feet max(|a_foot| - limit, 0).

    alpha = exp(-dt / tau). The memory is per env and is cleared only for the envs
    that reset: the env calls ``reset(ids)`` for them before their next step.
    """

    def __init__(self, num_envs: int, limit: float = 30.0, tau: float = 0.06):
        self.limit, self.tau = limit, tau
        self.memory = np.zeros(num_envs)

    def place(self, like) -> None:
        """Keep the memory as an array of ``like``'s kind and device (the device env's tensors)."""
        xp = namespace(like)
        self.memory = xp.as_float(xp.asarray(self.memory, like=like))

    def reset(self, ids) -> None:
        self.memory[ids] = 0.0

    def __call__(self, s: TaskState) -> np.ndarray:
        xp = namespace(s.foot_vel)
        alpha = math.exp(-s.dt / self.tau)
        accel = xp.norm(s.foot_vel - s.last_foot_vel, axis=2) / s.dt  # [N, F]
        excess = xp.sum(xp.maximum(accel - self.limit, 0.0), axis=1)
        self.memory = alpha * self.memory + excess
        return self.memory * 1.0


@dataclass(frozen=True)
class TermSpec:
    """How a term is built and which sign its weight must have."""

    kind: str  # "reward" (weight >= 0) or "penalty" (weight <= 0)
    make: Callable[..., Callable[[TaskState], np.ndarray]]


def _stateless(fn: Callable[..., np.ndarray]) -> Callable[..., Callable[[TaskState], np.ndarray]]:
    def make(num_envs: int, **params: Any) -> Callable[[TaskState], np.ndarray]:
        return lambda s: fn(s, **params)

    make.__doc__ = fn.__doc__
    make.fn = fn  # type: ignore[attr-defined]
    return make


REWARD_TERMS: dict[str, TermSpec] = {
    "lin_vel_tracking": TermSpec("reward", _stateless(lin_vel_tracking)),
    "ang_vel_tracking": TermSpec("reward", _stateless(ang_vel_tracking)),
    "upright": TermSpec("reward", _stateless(upright)),
    "velocity_slack": TermSpec("reward", _stateless(velocity_slack)),
    "undesired_contact": TermSpec("penalty", _stateless(undesired_contact)),
    "joint_limit": TermSpec("penalty", _stateless(joint_limit)),
    "illegal_footstep": TermSpec("penalty", _stateless(illegal_footstep)),
    "heading_error": TermSpec("penalty", _stateless(heading_error)),
    "opposite_direction": TermSpec("penalty", _stateless(opposite_direction)),
    "action_rate": TermSpec("penalty", _stateless(action_rate)),
    "foot_acceleration": TermSpec("penalty", lambda num_envs, **p: FootAcceleration(num_envs, **p)),
    # shaping terms (the `locomotion` task's set; the paper's table is `locomotion_paper`)
    "alive": TermSpec("reward", _stateless(alive)),
    "termination": TermSpec("penalty", _stateless(termination)),
    "goal_reached": TermSpec("reward", _stateless(goal_reached)),
    "goal_approach": TermSpec("reward", _stateless(goal_approach)),
    "flat_orientation": TermSpec("penalty", _stateless(flat_orientation)),
    "lin_vel_z": TermSpec("penalty", _stateless(lin_vel_z)),
    "ang_vel_xy": TermSpec("penalty", _stateless(ang_vel_xy)),
    "joint_deviation": TermSpec("penalty", _stateless(joint_deviation)),
    "feet_air_time": TermSpec("reward", lambda num_envs, **p: FeetAirTimeBiped(num_envs, **p)),
    "feet_phase": TermSpec("reward", _stateless(feet_phase)),
    "feet_slide": TermSpec("penalty", _stateless(feet_slide)),
}
STATEFUL_TERMS = {"foot_acceleration": FootAcceleration, "feet_air_time": FeetAirTimeBiped}


def term_parameters(name: str) -> set[str]:
    """Names of the parameters a term accepts (for config validation)."""
    import inspect

    make = REWARD_TERMS[name].make
    fn = getattr(make, "fn", None)
    target = fn if fn is not None else STATEFUL_TERMS[name].__init__
    skip = {"s", "self", "num_envs"}
    return {p for p in inspect.signature(target).parameters if p not in skip}
