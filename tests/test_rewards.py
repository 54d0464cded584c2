"""Each reward term on hand-made states, with values worked out by hand."""

import math

import numpy as np
import pytest

from llp.sim import rewards as R
from llp.sim.task_state import TaskState


def state(**kw) -> TaskState:
    return TaskState(dt=0.02, **{k: np.asarray(v, dtype=float) for k, v in kw.items()})


def test_velocity_tracking_gaussian_kernel():
    s = state(
        command=[[1.0, 0.0, 0.5], [0.5, 0.0, 0.0]],
        base_lin_vel=[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
        base_ang_vel=[[0, 0, 0.0], [0, 0, 0.5]],
    )
    assert np.allclose(R.lin_vel_tracking(s, sigma=0.25), [1.0, math.exp(-0.25 / 0.25)])
    assert np.allclose(R.ang_vel_tracking(s, sigma=0.25), [math.exp(-0.25 / 0.25), math.exp(-0.25 / 0.25)])


def test_upright():
    s = state(projected_gravity=[[0, 0, -1.0], [0, math.sin(0.5), -math.cos(0.5)], [0, 0, 1.0]])
    assert np.allclose(R.upright(s), [1.0, math.cos(0.5), 0.0])


def test_velocity_slack_ratio_window_sign_and_gate():
    cmd = [[1.0, 0, 0]] * 4 + [[0.05, 0, 0]]
    vel = [[0.2, 0, 0], [0.3, 0, 0], [1.5, 0, 0], [-1.0, 0, 0], [0.05, 0, 0]]
    s = state(command=cmd, base_lin_vel=vel)
    # ratios 0.2 (slow), 0.3 (edge), 1.5 (edge), -1.0 (against), tiny command gated off
    assert R.velocity_slack(s).tolist() == [0.0, 1.0, 1.0, 0.0, 0.0]


def test_undesired_contact_counts_non_foot_bodies_over_threshold():
    s = TaskState(
        dt=0.02,
        body_contact_force=np.array([[0.5, 2.0, 50.0, 3.0]]),
        undesired_bodies=np.array([True, True, False, True]),
    )
    assert R.undesired_contact(s, threshold=1.0).tolist() == [2.0]  # body 2 is a foot


def test_joint_limit_sums_excess_beyond_soft_limits():
    s = state(joint_pos=[[0.0, 1.2, -1.5]], joint_soft_limits=[[-1, 1], [-1, 1], [-1, 1]])
    assert np.allclose(R.joint_limit(s), [0.2 + 0.5])


def test_illegal_footstep_fraction_of_rays_over_a_drop():
    # left foot planted at z=0 with 4 rays, 2 of them over a 0.5 m pit; right foot in the air over the pit
    s = state(
        foot_pos=[[[0, 0, 0.0], [0, 0, 0.3]]],
        foot_ray_heights=[[[0.0, 0.0, -0.5, -0.5], [-0.5, -0.5, -0.5, -0.5]]],
        foot_contact_force=[[80.0, 0.0]],
    )
    assert np.allclose(R.illegal_footstep(s, depth=0.1), [0.5])
    # 5 cm below the sole is not a drop
    s.foot_ray_heights[:] = -0.05
    assert np.allclose(R.illegal_footstep(s, depth=0.1), [0.0])


def test_heading_error_wraps():
    s = state(heading_target=[3.0, 0.5], yaw=[-3.0, 0.0])
    assert np.allclose(R.heading_error(s), [2 * math.pi - 6.0, 0.5])


def test_opposite_direction():
    s = state(command=[[1, 0, 0], [1, 0, 0], [0.01, 0, 0]], base_lin_vel=[[-0.2, 0, 0], [0.2, 0, 0], [-1, 0, 0]])
    assert R.opposite_direction(s).tolist() == [1.0, 0.0, 0.0]


def test_action_rate():
    s = state(actions=[[1.0, 2.0]], last_actions=[[0.0, 0.0]])
    assert R.action_rate(s).tolist() == [5.0]


def test_foot_acceleration_memory_is_per_env_and_cleared_only_on_reset():
    term = R.FootAcceleration(num_envs=2, limit=30.0, tau=0.06)
    term.memory[:] = [20.0, 40.0]
    still = np.zeros((2, 2, 3))
    term.reset(np.array([0]))  # only env 0 resets
    out = term(state(foot_vel=still, last_foot_vel=still))
    alpha = math.exp(-0.02 / 0.06)
    assert np.allclose(out, [0.0, 40 * alpha])
    assert math.isclose(out[1], 28.6613, abs_tol=1e-4)


def test_foot_acceleration_adds_excess_over_limit_summed_over_feet():
    term = R.FootAcceleration(num_envs=1, limit=30.0, tau=0.06)
    last = np.zeros((1, 2, 3))
    vel = np.array([[[1.0, 0, 0], [0.4, 0, 0]]])  # 50 m/s^2 and 20 m/s^2 over dt = 0.02
    assert np.allclose(term(state(foot_vel=vel, last_foot_vel=last)), [20.0])


def test_every_penalty_is_declared_as_one():
    penalties = {n for n, t in R.REWARD_TERMS.items() if t.kind == "penalty"}
    assert penalties == {
        "undesired_contact",
        "joint_limit",
        "illegal_footstep",
        "heading_error",
        "opposite_direction",
        "action_rate",
        "foot_acceleration",
        "termination",
        "flat_orientation",
        "lin_vel_z",
        "ang_vel_xy",
        "joint_deviation",
        "feet_slide",
    }


@pytest.mark.parametrize("name", sorted(R.REWARD_TERMS))
def test_term_parameters_are_what_config_accepts(name):
    """Config validation takes exactly the parameters a term's factory names, each with a default (a config may
    leave any out), and refuses any other name for that term."""
    import inspect

    from llp.config.schema import ConfigError
    from llp.sim.tasks import env_config

    params = R.term_parameters(name)
    make = R.REWARD_TERMS[name].make
    target = getattr(make, "fn", None) or R.STATEFUL_TERMS[name].__init__
    signature = inspect.signature(target).parameters
    assert all(signature[p].default is not inspect.Parameter.empty for p in params), name
    weight = 1.0 if R.REWARD_TERMS[name].kind == "reward" else -1.0
    with pytest.raises(ConfigError, match="no_such_parameter"):
        env_config(overrides={"rewards": {name: {"weight": weight, "params": {"no_such_parameter": 1.0}}}})


def test_term_parameters_of_known_terms():
    assert R.term_parameters("feet_air_time") == {"threshold", "contact_force", "min_command"}
    assert R.term_parameters("feet_phase") == {"swing_height", "sigma", "min_command"}
    assert R.term_parameters("lin_vel_tracking") == {"sigma"}


def test_undesired_contact_spares_hands_on_obstacle_tiles():
    # bodies: torso, hand, foot, hand; env 0 walks on stairs, env 1 climbs a platform
    s = TaskState(
        dt=0.02,
        body_contact_force=np.array([[0.0, 5.0, 50.0, 5.0], [0.0, 5.0, 50.0, 5.0]]),
        undesired_bodies=np.array([True, True, False, True]),
        hand_bodies=np.array([False, True, False, True]),
        on_obstacle_tile=np.array([False, True]),
    )
    assert R.undesired_contact(s).tolist() == [2.0, 0.0]  # default: hands allowed on obstacle tiles only
    assert R.undesired_contact(s, allow_hands="always").tolist() == [0.0, 0.0]
    assert R.undesired_contact(s, allow_hands="never").tolist() == [2.0, 2.0]


def test_heading_error_is_zero_without_a_heading_command():
    # env 0 walks with a heading command, env 1 was told to stand still
    s = state(heading_target=[1.0, 1.0], yaw=[0.0, 0.0])
    s.heading_active = np.array([True, False])
    assert np.allclose(R.heading_error(s), [1.0, 0.0])


def test_env_marks_standing_envs_as_having_no_heading():
    import torch

    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    cfg = env_config(
        overrides={
            "terrain": {"num_levels": 1, "tile_length": 6.0, "tile_width": 6.0, "border": 1.0},
            "commands": {"heading_fraction": 1.0},
        }
    )
    env = ParkourEnv(cfg, 4, seed=0)
    env.command[:2] = 0.0  # standing still
    env.command[2:, 0] = 0.5
    env.heading_target[:] = env.state().yaw + 1.0
    env.step(torch.zeros(4, env.num_actions))
    s = env.state()
    assert s.heading_active.tolist() == [False, False, True, True]
    weight = cfg.rewards["heading_error"].weight
    weighted = R.heading_error(s) * weight
    assert weighted[0] == 0.0 and weighted[1] == 0.0 and (weighted[2:] < 0).all()


def test_feet_air_time_biped_rewards_single_stance_time_capped_and_gated():
    term = R.FeetAirTimeBiped(num_envs=2, threshold=0.05)
    cmd = np.array([[0.5, 0.0, 0.0], [0.05, 0.0, 0.0]])  # env 1's command is below the 0.1 m/s gate

    def step(forces):
        return term(TaskState(dt=0.02, foot_contact_force=np.array(forces, dtype=float), command=cmd))

    # both feet down: double support earns nothing, but the contact timers run
    assert step([[10, 10], [10, 10]]).tolist() == [0.0, 0.0]
    # left foot lifts: in single stance, min(left air 0.02, right contact 0.04) = 0.02
    assert step([[0, 10], [0, 10]]) == pytest.approx([0.02, 0.0])
    assert step([[0, 10], [0, 10]]) == pytest.approx([0.04, 0.0])  # min(0.04, 0.06)
    assert step([[0, 10], [0, 10]]) == pytest.approx([0.05, 0.0])  # min(0.06, 0.08) capped at 0.05
    term.reset(np.array([0]))
    assert step([[0, 10], [0, 10]]) == pytest.approx([0.02, 0.0])  # env 0's timers restarted, alone


def test_termination_alive_orientation_and_joint_deviation_by_hand():
    s = state(
        projected_gravity=[[0.0, 0.0, -1.0], [0.6, 0.0, -0.8]],
        base_lin_vel=[[0, 0, 0.5], [0, 0, 0.0]],
        base_ang_vel=[[0.1, 0.2, 3.0], [0, 0, 0.0]],
        joint_pos=[[0.1, -0.2, 0.3], [0.0, 0.0, 0.0]],
        default_joint_pos=[0.0, 0.0, 0.1],
    )
    s.terminated = np.array([False, True])
    s.joint_names = ["waist_yaw", "left_knee", "left_hip_roll"]
    assert R.termination(s).tolist() == [0.0, 1.0]
    assert R.alive(s).tolist() == [1.0, 1.0]
    assert R.flat_orientation(s) == pytest.approx([0.0, 0.36])
    assert R.lin_vel_z(s) == pytest.approx([0.25, 0.0])
    assert R.ang_vel_xy(s) == pytest.approx([0.05, 0.0])
    # waist and hip roll only: |0.1| + |0.3 - 0.1| = 0.3; env 1: |0| + |0 - 0.1| = 0.1
    assert R.joint_deviation(s, joints=".*(waist|hip_roll).*") == pytest.approx([0.3, 0.1])


def test_the_default_task_extends_the_paper_set_and_the_paper_set_is_the_paper_s_table():
    from llp.sim.tasks import env_config

    paper, shaped = env_config("locomotion_paper"), env_config("locomotion")
    assert {n: t.weight for n, t in paper.rewards.items()} == {
        "lin_vel_tracking": 2.0,
        "ang_vel_tracking": 2.0,
        "upright": 1.0,
        "velocity_slack": 1.5,
        "undesired_contact": -2.0,
        "joint_limit": -10.0,
        "illegal_footstep": -1.0,
        "heading_error": -1.0,
        "opposite_direction": -1.0,
        "action_rate": -0.1,
        "foot_acceleration": -0.01,
    }
    # shaping adds terms; the one paper weight it changes is action_rate (documented in locomotion.yaml)
    changed = {n for n, t in paper.rewards.items() if shaped.rewards[n].weight != t.weight}
    assert changed == {"action_rate"} and shaped.rewards["action_rate"].weight == -0.01
    assert shaped.rewards["termination"].weight == -200.0 and not shaped.only_positive_rewards


def test_feet_phase_follows_the_clock_above_the_ground_under_each_foot():
    # env 0: left foot mid-swing (phase pi/2) 0.1 m above a 0.075 m step, right foot planted on the floor
    # env 1: both feet planted at the same phases; env 2: as env 0 but under a stand-still command
    ground = [[[0.075] * 3, [0.0] * 3]] * 3
    s = state(
        gait_phase=[[math.pi / 2, 3 * math.pi / 2]] * 3,
        foot_pos=[[[0, 0, 0.175], [0, 0, 0.0]], [[0, 0, 0.075], [0, 0, 0.0]], [[0, 0, 0.175], [0, 0, 0.0]]],
        foot_ray_heights=ground,
        command=[[0.5, 0, 0], [0.5, 0, 0], [0, 0, 0]],
    )
    assert np.allclose(R.feet_phase(s, swing_height=0.1, sigma=0.01), [1.0, math.exp(-0.01 / 0.01), 0.0])


def test_feet_slide_sums_the_horizontal_speed_of_loaded_feet():
    # env 0: the left foot slides at 0.3 m/s under load, the right one lifts at 1 m/s (not in contact)
    s = state(foot_vel=[[[0.3, 0.0, 0.0], [0.6, 0.8, 1.0]]], foot_contact_force=[[80.0, 0.0]])
    assert np.allclose(R.feet_slide(s), [0.3])
    s = state(foot_vel=[[[0.3, 0.4, 0.0], [0.0, 0.1, 0.0]]], foot_contact_force=[[80.0, 20.0]])
    assert np.allclose(R.feet_slide(s), [0.6])


def test_the_gait_clock_advances_at_the_stride_frequency_with_the_feet_half_a_cycle_apart():
    import torch

    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    cfg = env_config("locomotion", overrides={"terrain": {"num_levels": 1, "tile_length": 6.0, "tile_width": 6.0}})
    env = ParkourEnv(cfg, 2, seed=0)
    assert env.obs_dims()["policy"]["gait_clock"] == 4
    assert np.all((env.gait_freq >= 1.25) & (env.gait_freq <= 1.5))
    env.gait_freq[:] = 1.25  # 0.8 s per stride: 40 policy steps of 0.02 s
    for _ in range(10):
        result = env.step(torch.zeros(2, env.num_actions))
    phase = env.gait_phase()
    assert np.allclose(phase[:, 0], 2 * np.pi * 10 / 40) and np.allclose(phase[:, 1], np.pi + 2 * np.pi * 10 / 40)
    clock = result.obs["policy"]["gait_clock"].numpy()  # [cos L, cos R, sin L, sin R]
    assert np.allclose(clock, np.concatenate([np.cos(phase), np.sin(phase)], axis=1), atol=1e-5)


def test_goal_terms_reward_the_step_that_reaches_the_goal_and_the_speed_towards_it():
    s = TaskState(dt=0.02, goal_reached=np.array([True, False, False]), goal_approach=np.array([0.01, -0.004, 0.5]))
    assert R.goal_reached(s).tolist() == [1.0, 0.0, 0.0]
    np.testing.assert_allclose(R.goal_approach(s), [0.5, -0.2, 1.0])  # m/s, the last clipped at 1 m/s


def test_env_measures_goal_approach_as_the_distance_gained_each_step_and_nothing_off_goal_tiles():
    import torch

    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    terrain = {"num_levels": 1, "tile_length": 6.0, "tile_width": 6.0, "border": 1.0, "tile_types": ["climb", "flat"]}
    rewards = {"goal_approach": {"weight": 1.0}, "goal_reached": {"weight": 10.0}}
    env = ParkourEnv(env_config(overrides={"terrain": terrain, "rewards": rewards}), 6, seed=1)
    env.reset()
    on_goal = env.tile_has_goal[env.tile_ids]
    assert on_goal.any() and not on_goal.all()
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        before = env.goal_distance.copy()
        env.step(0.3 * torch.randn(6, env.num_actions, generator=gen))
        s = env.state()
        now = np.linalg.norm(env.tile_goal[env.tile_ids] - env.qpos[:, 0:2], axis=1)
        np.testing.assert_allclose(s.goal_approach[on_goal], (before - now)[on_goal], atol=1e-9)
        assert (s.goal_approach[~on_goal] == 0).all() and not s.goal_reached.any()
