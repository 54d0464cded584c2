"""AMP's reference transitions: a motion's and a policy's, in the terrain env's AMP features."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llp.config.files import named
from llp.config.schema import build
from llp.motion.amp_data import box_ground, motion_features, policy_transitions
from llp.sim.robot import RobotConfig, default_joint_positions, load_robot_spec
from llp.sim.tasks import env_config


@pytest.fixture(scope="module")
def robot():
    return build(RobotConfig, named("robot", "lightbot0_like"), "robot")


def _env(n: int = 3):
    from llp.sim.env import ParkourEnv

    small = {"terrain": {"num_levels": 1, "tile_length": 6.0, "tile_width": 6.0, "tile_types": ["flat"]}}
    cfg = env_config(overrides={**small, "observations": {"policy": ["proprio", "command", "height_scan"],
                                                          "amp": ["amp_features"]}})  # fmt: skip
    return ParkourEnv(cfg, n, seed=2)


def test_a_motion_at_constant_velocity_and_turn_rate_gives_exactly_those_velocities(robot):
    """The base moves at 0.5 m/s along world x while turning at 0.8 rad/s and one joint swings at 1 rad/s:
    the features read those velocities in the env's frames (linear in the yaw frame, angular in the body's)."""
    model = load_robot_spec(robot).compile()
    joints = [int(model.actuator_trnid[a, 0]) for a in range(model.nu)]
    default = np.asarray(default_joint_positions(robot, model, joints))
    fps, T = 50.0, 20
    t = np.arange(T) / fps
    q = np.zeros((T, model.nq))
    q[:, 0], q[:, 2] = 0.5 * t, 0.6
    yaw = 0.8 * t
    q[:, 3], q[:, 6] = np.cos(yaw / 2), np.sin(yaw / 2)
    q[:, model.jnt_qposadr[joints]] = default
    knee = model.jnt_qposadr[joints[3]]
    q[:, knee] += 1.0 * t
    f = motion_features(q, fps, robot)
    width = 10 + 2 * len(joints)
    assert f.shape == (T - 1, width)
    np.testing.assert_allclose(f[:, 0], 0.6)
    np.testing.assert_allclose(f[:, 1:4], [[0, 0, -1]] * (T - 1), atol=1e-12)
    expected = np.stack([0.5 * np.cos(yaw[1:]), -0.5 * np.sin(yaw[1:]), 0 * t[1:]], axis=1)
    np.testing.assert_allclose(f[:, 4:7], expected, atol=1e-9)
    np.testing.assert_allclose(f[:, 7:10], [[0, 0, 0.8]] * (T - 1), atol=1e-9)
    joint_pos, joint_vel = f[:, 10 : 10 + len(joints)], f[:, 10 + len(joints) :]
    np.testing.assert_allclose(joint_pos[:, 3], t[1:], atol=1e-12)
    np.testing.assert_allclose(np.delete(joint_pos, 3, axis=1), 0.0, atol=1e-12)
    np.testing.assert_allclose(joint_vel[:, 3], 0.05, atol=1e-9)
    with pytest.raises(ValueError, match="positions a frame"):
        motion_features(q[:, :-1], fps, robot)


def test_a_motion_s_features_are_laid_out_as_the_env_s(robot):
    """States the env visited, fed back as a motion: height, gravity and joint positions are the env's own
    AMP features exactly (the velocities are a step's mean there, not its last instant)."""
    env = _env()
    env.reset()
    gen = torch.Generator().manual_seed(0)
    states, features = [env.qpos[0].copy()], []
    for _ in range(6):
        result = env.step(0.3 * torch.randn(env.num_envs, env.num_actions, generator=gen))
        states.append(env.qpos[0].copy())
        features.append(result.obs["amp"]["amp_features"][0].numpy())
    mine = motion_features(np.stack(states), 1.0 / env.cfg.policy_dt, robot)
    theirs = np.stack(features)
    positional = np.r_[0:4, 10 : 10 + env.num_actions]
    np.testing.assert_allclose(mine[:, positional], theirs[:, positional], atol=1e-5)
    assert mine.shape == theirs.shape


def test_the_box_is_the_ground_over_its_footprint():
    from llp.motion.scene import ObstacleBox

    ground = box_ground(ObstacleBox(kind="climb", height=0.3, depth=0.6, width=1.2, front_x=2.0))
    xy = np.array([[1.9, 0.0], [2.1, 0.0], [2.5, 0.5], [2.7, 0.0], [2.3, 0.7]])
    np.testing.assert_allclose(ground(xy), [0.0, 0.3, 0.3, 0.0, 0.0])


def test_a_policy_s_transitions_chain_state_to_state_and_skip_episode_ends():
    env = _env(n=4)

    class Still:
        def initial_memory(self, n):
            from llp.learn.memory import Memory

            return Memory()

        def observe(self, obs):
            return obs

        def step(self, obs, memory):
            return torch.zeros(4, env.num_actions), memory, None

    pairs = policy_transitions(env, Still(), steps=5)
    width = 10 + 2 * env.num_actions
    assert pairs.shape == (20, 2 * width)  # nothing ended in 5 steps of standing
    rows = pairs.reshape(5, 4, 2 * width)
    torch.testing.assert_close(rows[1:, :, :width], rows[:-1, :, width:])  # next state = the next pair's first
    with pytest.raises(ValueError, match="amp/amp_features"):
        from llp.sim.env import ParkourEnv

        policy_transitions(ParkourEnv(env_config(), 1, seed=0), Still(), steps=1)
