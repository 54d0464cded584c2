"""AMP's reference transitions, in the terrain env's AMP features (``amp/amp_features``, ``llp.sim.env``):
base height above the ground beneath it, projected gravity, base linear velocity (yaw frame), base angular
velocity (body frame), joint positions minus the default pose, joint velocities x 0.05.

Two sources, as the transition stage's priors need them:

* ``motion_transitions``: a kinematic motion (a library reference over its box; the skill priors). Its
  velocities are finite differences between frames (``mj_differentiatePos``), so they are the mean over a
  frame, where the env reads the velocity at the end of its step.
* ``policy_transitions``: a policy's own rollouts in the terrain env (the walking prior: recorded
  locomotion-teacher rollouts); pairs that straddle an episode's end are dropped.

Each returns [M, 2F]: the features of a state and of the next, side by side (``llp.learn.amp``).
"""

from __future__ import annotations

from collections.abc import Callable

import mujoco
import numpy as np
import torch

JOINT_VELOCITY_SCALE = 0.05  # as the env's amp_features


def motion_features(qpos: np.ndarray, fps: float, robot, ground: Callable[[np.ndarray], np.ndarray] | None = None):
    """[T-1, F] features of frames 1..T-1 of ``qpos`` [T, nq] (the robot model's layout), each with the
    velocity from the frame before; ``ground(xy [T, 2]) -> [T]`` is the height beneath the base (0: flat)."""
    from llp.sim.math3d import rotate_into_yaw_frame, yaw_and_gravity
    from llp.sim.robot import default_joint_positions, load_robot_spec

    qpos = np.asarray(qpos, dtype=np.float64)
    if qpos.ndim != 2 or len(qpos) < 2:
        raise ValueError(f"a motion needs [T >= 2, nq] positions, got shape {list(qpos.shape)}")
    model = load_robot_spec(robot).compile()
    if qpos.shape[1] != model.nq:
        raise ValueError(f"the motion has {qpos.shape[1]} positions a frame, robot {robot.name!r} has {model.nq}")
    joints = [int(model.actuator_trnid[a, 0]) for a in range(model.nu)]
    qadr, vadr = model.jnt_qposadr[joints], model.jnt_dofadr[joints]
    default = np.asarray(default_joint_positions(robot, model, joints))
    qvel = np.zeros((len(qpos) - 1, model.nv))
    for t in range(1, len(qpos)):  # the free joint: linear velocity in the world frame, angular in the body's
        mujoco.mj_differentiatePos(model, qvel[t - 1], 1.0 / fps, qpos[t - 1], qpos[t])
    q = qpos[1:]
    yaw, gravity = yaw_and_gravity(q[:, 3:7])
    height = q[:, 2] - (np.zeros(len(q)) if ground is None else ground(q[:, 0:2]))
    return np.concatenate(
        [
            height[:, None],
            gravity,
            rotate_into_yaw_frame(qvel[:, 0:3], yaw),
            qvel[:, 3:6],
            q[:, qadr] - default,
            qvel[:, vadr] * JOINT_VELOCITY_SCALE,
        ],
        axis=1,
    )


def box_ground(box) -> Callable[[np.ndarray], np.ndarray]:
    """The ground of a library reference's scene: the box's top over its footprint, the floor elsewhere."""

    def ground(xy: np.ndarray) -> np.ndarray:
        x, y = xy[:, 0], xy[:, 1]
        on = (x >= box.front_x) & (x <= box.front_x + box.depth) & (np.abs(y - box.y) <= box.width / 2)
        return np.where(on, box.height, 0.0)

    return ground


def motion_transitions(reference, robot) -> torch.Tensor:
    """[T-2, 2F] consecutive feature pairs of a library reference (its motion over its box)."""
    features = motion_features(reference.qpos, reference.fps, robot, box_ground(reference.obstacle))
    return _pairs(torch.from_numpy(features).float(), torch.zeros(len(features) - 1, dtype=torch.bool))


def policy_transitions(env, policy, steps: int) -> torch.Tensor:
    """[M, 2F] feature pairs of ``policy`` (deterministic: its action mean) driving every env of ``env`` (a
    terrain env that gives ``amp/amp_features``) for ``steps`` steps; pairs across an episode's end dropped."""
    if "amp_features" not in env.obs_dims().get("amp", {}):
        raise ValueError("the env does not give amp/amp_features (add it to the task's amp observation group)")
    obs = env.reset()
    memory = policy.initial_memory(env.num_envs)
    before, after, keep = [], [], []
    with torch.no_grad():
        for _ in range(steps):
            mean, memory, _ = policy.step(policy.observe(obs), memory)
            result = env.step(mean)
            done = result.terminated | result.truncated
            before.append(obs["amp"]["amp_features"])
            after.append(result.obs["amp"]["amp_features"])
            keep.append(~done)
            memory = memory.reset(done)
            obs = result.obs
    pairs = torch.cat([torch.cat(before), torch.cat(after)], dim=1)
    return pairs[torch.cat(keep)]


def _pairs(features: torch.Tensor, cut: torch.Tensor) -> torch.Tensor:
    """Consecutive pairs of ``features`` [T, F], without those marked in ``cut`` [T-1]."""
    pairs = torch.cat([features[:-1], features[1:]], dim=1)
    return pairs[~cut]
