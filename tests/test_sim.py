"""Simulator behaviour: sensors against known geometry, per-env resets, determinism, standing, second robot."""

import numpy as np
import pytest
import torch

from llp.sim.env import ParkourEnv
from llp.sim.sensors import DepthCamera, DepthCameraConfig
from llp.sim.tasks import env_config

QUIET = {
    "randomization": {
        "friction": None,
        "added_mass": None,
        "motor_strength": None,
        "push_interval_s": None,
        "init_joint_noise": 0.0,
        "spawn_jitter": 0.0,
    },
    "curriculum": {"enabled": False},
}


def make_env(num_envs=1, seed=0, **overrides) -> ParkourEnv:
    from llp.config.schema import merge

    return ParkourEnv(env_config(overrides=merge(QUIET, overrides)), num_envs, seed=seed)


def test_height_scan_reads_a_060_box_and_flat_ground():
    env = make_env(terrain={"tile_types": ["climb"], "num_levels": 1, "climb_heights": [0.60]})
    tile = env.terrain.tiles[0]
    box = tile.obstacles[0]
    assert box.height == pytest.approx(0.60)
    x_front = box.center[0] - box.depth / 2
    base_x = x_front - 0.4  # scan reaches 0.8 m ahead: half of it over the box
    env.set_base_pose(0, np.array([base_x, tile.origin[1], env.cfg.robot.base_height]), yaw=0.0)
    scan = env.observe()["policy"]["height_scan"][0].numpy()
    pts = env.scan_points
    over_box = pts[:, 0] > 0.4 + 0.03
    over_ground = pts[:, 0] < 0.4 - 0.03
    assert over_box.sum() > 20 and over_ground.sum() > 100
    assert np.allclose(scan[over_box], 0.60, atol=0.01)
    assert np.allclose(scan[over_ground], 0.0, atol=0.01)


def test_height_scan_follows_the_base_yaw():
    env = make_env(terrain={"tile_types": ["climb"], "num_levels": 1, "climb_heights": [0.60]})
    tile = env.terrain.tiles[0]
    box = tile.obstacles[0]
    x_front = box.center[0] - box.depth / 2
    # facing away from the box (yaw = pi): the box is now behind, i.e. at negative scan x
    env.set_base_pose(0, np.array([x_front - 0.4, tile.origin[1], env.cfg.robot.base_height]), yaw=np.pi)
    scan = env.observe()["policy"]["height_scan"][0].numpy()
    pts = env.scan_points
    assert np.allclose(scan[pts[:, 0] < -0.43], 0.60, atol=0.01)
    assert np.allclose(scan[pts[:, 0] > -0.37], 0.0, atol=0.01)


@pytest.mark.parametrize("backend", ["heightmap", "mujoco"])
def test_depth_rays_hit_known_geometry(backend):
    env = make_env(terrain={"tile_types": ["climb"], "num_levels": 1, "climb_heights": [0.60]})
    tile = env.terrain.tiles[0]
    box = tile.obstacles[0]
    cam = DepthCamera(DepthCameraConfig(backend=backend), env.scene.tile_models, env.terrain)
    out = np.zeros((2, 36, 64))
    x_front = box.center[0] - box.depth / 2
    # camera 1: 1.0 m above flat ground looking straight down -> every pixel's z-depth is 1.0
    down = np.eye(3)
    # camera 2: 0.3 m high, 1.2 m before the box's face, looking along +x -> the face is at z-depth 1.2
    forward = np.array([[0.0, 0.0, -1.0], [-1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    pos = np.array([[x_front - 2.0, tile.origin[1], 1.0], [x_front - 1.2, tile.origin[1], 0.3]])
    cam.render(np.array([0, 0]), pos, np.stack([down, forward]), out)
    tol = 1e-6 if backend == "mujoco" else 0.021  # the height grid has 2 cm cells
    assert np.allclose(out[0], 1.0, atol=tol)
    # pixels that look at the face: rows near the image centre (face spans z 0..0.6, camera at 0.3)
    centre = out[1, 14:22, 20:44]
    assert np.allclose(centre, 1.2, atol=tol)


def _step_n(env, n, gen=None):
    out = []
    for _ in range(n):
        a = (
            torch.randn(env.num_envs, env.num_actions, generator=gen) * 0.3
            if gen is not None
            else torch.zeros(env.num_envs, env.num_actions)
        )
        r = env.step(a)
        out.append((r.obs["critic"]["proprio"].clone(), r.reward.clone(), r.terminated.clone()))
    return out


def test_same_seed_gives_identical_rollouts():
    cfg = env_config()  # randomisation and curriculum on
    a, b = ParkourEnv(cfg, 8, seed=3), ParkourEnv(cfg, 8, seed=3)
    ra = _step_n(a, 60, torch.Generator().manual_seed(0))
    rb = _step_n(b, 60, torch.Generator().manual_seed(0))
    for (oa, wa, ta), (ob, wb, tb) in zip(ra, rb):
        assert torch.equal(oa, ob) and torch.equal(wa, wb) and torch.equal(ta, tb)
    c = ParkourEnv(cfg, 8, seed=4)
    rc = _step_n(c, 5, torch.Generator().manual_seed(0))
    assert not torch.equal(ra[4][0], rc[4][0])


def test_reset_of_one_env_leaves_the_others_untouched():
    cfg = env_config(overrides={"randomization": {"push_interval_s": None}})
    a, b = ParkourEnv(cfg, 4, seed=1), ParkourEnv(cfg, 4, seed=1)
    zeros = torch.zeros(4, a.num_actions)
    for _ in range(5):
        a.step(zeros)
        b.step(zeros)
    foot = b.reward_names.index("foot_acceleration")
    # push env 2 of b off its tile: its next step is truncated and only it resets
    x = b.qpos[2].copy()
    b.set_base_pose(2, np.array([x[0] + 100.0, x[1], x[2]]))
    ra, rb = a.step(zeros), b.step(zeros)
    assert rb.truncated[2] and not bool((rb.terminated | rb.truncated)[[0, 1, 3]].any())
    assert not bool((ra.terminated | ra.truncated).any())
    others = [0, 1, 3]
    assert np.array_equal(a.qpos[others], b.qpos[others])
    assert np.array_equal(a.qvel[others], b.qvel[others])
    assert np.array_equal(a.episode_length[others], b.episode_length[others])
    assert np.array_equal(a.episode_count[others], b.episode_count[others])
    assert np.array_equal(a.reward_fns[foot].memory[others], b.reward_fns[foot].memory[others])
    assert b.episode_length[2] == 0 and b.episode_count[2] == 1 and a.episode_count[2] == 0
    assert b.reward_fns[foot].memory[2] == 0.0


def test_robot_holds_its_default_pose_for_one_second_on_flat_ground():
    env = make_env(terrain={"tile_types": ["flat"], "num_levels": 1})
    zeros = torch.zeros(1, env.num_actions)
    for _ in range(50):  # 50 policy steps = 1 s
        r = env.step(zeros)
        assert not bool(r.terminated[0] or r.truncated[0])
    s = env.state()
    assert abs(float(s.base_height[0]) - env.cfg.robot.base_height) < 0.03
    assert float(-s.projected_gravity[0, 2]) > 0.98
    assert np.abs(s.joint_pos[0] - env.default_joint_pos).max() < 0.15


def test_terminated_and_truncated_are_reported_separately_with_final_obs():
    env = make_env(
        num_envs=2, terrain={"tile_types": ["flat"], "num_levels": 1}, terminations={"episode_length_s": 0.1}
    )
    zeros = torch.zeros(2, env.num_actions)
    for _ in range(4):
        r = env.step(zeros)
        assert not bool(r.terminated.any() or r.truncated.any())
    r = env.step(zeros)  # 5 steps x 0.02 s = time limit
    assert r.truncated.all() and not r.terminated.any()
    assert r.final_obs is not None
    # the final observation is the end state, the returned one the fresh start
    assert not torch.equal(r.final_obs["policy"]["proprio"], r.obs["policy"]["proprio"])


def test_second_robot_is_a_config_switch():
    cfg = env_config(robot="g1")
    env = ParkourEnv(cfg, 2, seed=0)
    assert env.num_actions == 29
    assert env.obs_dims()["policy"]["proprio"] == 6 + 3 * 29
    zeros = torch.zeros(2, 29)
    for _ in range(10):
        r = env.step(zeros)
    assert torch.isfinite(r.obs["policy"]["proprio"]).all()


def test_terrain_tiles_know_their_geometry():
    cfg = env_config(
        overrides={
            "terrain": {"tile_types": ["climb", "vault", "course_succession", "stepping_stones"], "num_levels": 7}
        }
    )
    env_terrain = ParkourEnv(cfg, 1).terrain
    climbs = [t.obstacles[0].height for t in env_terrain.tiles if t.type == "climb"]
    assert climbs == pytest.approx([0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75])
    vaults = sorted({t.obstacles[0].height for t in env_terrain.tiles if t.type == "vault"})
    assert vaults == pytest.approx([0.40, 0.45, 0.50])
    for t in env_terrain.tiles:
        if t.type == "course_succession":
            assert [o.kind for o in t.obstacles] == ["box", "platform"]
            assert t.triggers == sorted(t.triggers) and len(t.triggers) == 2
        assert t.goal is not None
        for o in t.obstacles:
            # the height grid agrees with the recorded obstacle height at the obstacle's centre
            if o.kind in ("platform", "box"):
                assert float(env_terrain.height_at(np.array(o.center[:2]))) == pytest.approx(o.height, abs=1e-6)


def test_parkour_env_meets_the_backend_contract():
    """What learning code relies on (llp.sim.interface.VecEnv), by value: observations of the widths obs_dims
    says, per-env rewards and ends, one weighted reward column per reward name, and a final observation."""
    from llp.sim.interface import VecEnv

    env = make_env(num_envs=3)
    assert isinstance(env, VecEnv)
    dims = env.obs_dims()
    obs = env.reset()
    assert {g: {t: v.shape for t, v in terms.items()} for g, terms in obs.items()} == {
        g: {t: (3, w) for t, w in terms.items()} for g, terms in dims.items()
    }
    result = env.step(torch.zeros(3, env.num_actions))
    assert result.reward.shape == (3,) and result.reward.dtype.is_floating_point
    assert result.terminated.shape == result.truncated.shape == (3,) and result.terminated.dtype == torch.bool
    assert tuple(result.info["weighted_terms"].shape) == (3, len(env.reward_names))
    assert torch.allclose(torch.as_tensor(result.info["weighted_terms"]).sum(1).float(), result.reward.float(),
                          atol=1e-5)  # fmt: skip
    assert result.final_obs is None  # nobody ended: no final observation to bootstrap from


def test_curriculum_measures_progress_against_the_integrated_command():
    """Up after 40% of a tile; down when the robot got under half as far as its commands (integrated in the
    world frame, so a heading command that turned it counts by where it pointed) would carry it."""
    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    cfg = env_config("locomotion", overrides={"terrain": {"num_levels": 3, "tile_length": 8.0, "tile_width": 8.0}})
    env = ParkourEnv(cfg, 4, seed=0)
    ids = np.arange(4)
    env.level[:] = 1
    env.tile_ids[:] = env.level * env.num_columns + env.column  # flat/rough/stairs: no goal tiles here
    env.spawn_xy[:] = env.qpos[:, 0:2]
    moved = np.array([3.5, 1.5, 0.2, 1.5])  # metres walked from the spawn
    env.qpos[:, 0] = env.spawn_xy[:, 0] + moved
    # commands that would have carried it: far, 2 m net (a there-and-back heading walk), 4 m, 10 m (capped at 4)
    env.commanded_disp[:] = np.array([[6.0, 0.0], [1.2, 1.6], [0.0, 4.0], [10.0, 0.0]])
    nothing = np.zeros(4, dtype=bool)
    env._update_curriculum(ids, nothing, nothing)
    assert env.level.tolist() == [2, 1, 0, 0]  # promoted; kept (1.5 >= 0.5 x 2); demoted; demoted (1.5 < 2)


def test_goal_tiles_start_episodes_along_the_course_where_goal_starts_says():
    """Each episode draws a range of goal_starts, then a distance in it from the tile's spawn: before the
    platform's edge on the floor, on the platform on its top; the default starts at the spawn, drawing nothing."""
    climb = {"tile_types": ["climb"], "num_levels": 1, "climb_heights": [0.30]}
    at_spawn = make_env(num_envs=4, terrain=climb)
    tile = at_spawn.terrain.tiles[0]
    np.testing.assert_allclose(at_spawn.spawn_xy[:, 0], tile.spawn[0])
    starts = [[1.0, 1.5], [2.8, 3.1]]  # on the approach; on the platform (its edge 2.5 m after the spawn)
    env = make_env(num_envs=64, seed=3, terrain=climb, randomization={"goal_starts": starts})
    along = env.spawn_xy[:, 0] - tile.spawn[0]
    before, on_top = (along >= 1.0) & (along <= 1.5), (along >= 2.8) & (along <= 3.1)
    assert (before | on_top).all() and 16 < before.sum() < 48  # each range about half the time
    height = env.qpos[:, 2] - env.cfg.robot.base_height
    np.testing.assert_allclose(height[before], 0.01, atol=1e-6)
    np.testing.assert_allclose(height[on_top], 0.31, atol=1e-6)  # standing on the 30 cm platform
    np.testing.assert_allclose(env.goal_distance, np.abs(tile.goal[0] - env.spawn_xy[:, 0]), atol=1e-9)
    # steered at the goal from the first observation (straight ahead here): no yaw rate from a stale heading
    np.testing.assert_allclose(env.observe()["policy"]["command"][:, 2].numpy(), 0.0, atol=1e-6)
    with pytest.raises(ValueError, match=r"goal_starts\[0\].*need 0 <= start <= end"):
        make_env(terrain=climb, randomization={"goal_starts": [[2.0, 1.0]]})


def test_a_start_curriculum_moves_each_env_back_after_reaching_the_goal_and_on_after_failing():
    """With goal_start_curriculum, goal_starts are steps from the easiest (nearest the goal) to the hardest:
    every env starts at the first; reaching the goal moves it one step back along the course, failing one step
    forward, within the list; the step each episode began at is in its summary."""
    climb = {"tile_types": ["climb"], "num_levels": 1, "climb_heights": [0.30]}
    steps = [[2.0, 2.1], [1.0, 1.1], [0.0, 0.0]]
    env = make_env(
        num_envs=4, seed=1, terrain=climb, randomization={"goal_starts": steps, "goal_start_curriculum": True}
    )
    tile = env.terrain.tiles[0]
    along = env.spawn_xy[:, 0] - tile.spawn[0]
    assert ((along >= 2.0) & (along <= 2.1)).all()  # all at the first step
    ids = np.arange(4)
    reached = np.array([True, True, False, False])
    for _ in range(3):  # three successes take envs 0-1 to the last step (and no further); failures stay at 0
        env._update_curriculum(ids, np.zeros(4, dtype=bool), reached)
    assert env.start_step.tolist() == [2, 2, 0, 0]
    env._update_curriculum(ids, np.zeros(4, dtype=bool), np.array([False, True, False, True]))
    assert env.start_step.tolist() == [1, 2, 0, 1]
    env._reset_envs(ids)
    along = env.spawn_xy[:, 0] - tile.spawn[0]
    np.testing.assert_allclose(along[[1, 2]], [0.0, along[2]])
    assert 1.0 <= along[0] <= 1.1 and 2.0 <= along[2] <= 2.1 and 1.0 <= along[3] <= 1.1
    summary = env._episode_summary(ids, np.zeros(4, dtype=bool), np.zeros(4, dtype=bool))
    assert summary["start_step"].tolist() == [1, 2, 0, 1]
    assert "start_step" not in make_env(num_envs=2, terrain=climb)._episode_summary(ids[:2], *[np.zeros(2, bool)] * 2)


def test_a_climb_tiles_platform_depth_and_goal_are_set_by_config_and_must_fit_the_tile():
    """The transition course uses the skill's own box (0.6 m deep, 1.2 m wide, the goal 0.4 m onto it): the
    terrain's heights, the recorded obstacle and the goal all follow the config."""
    climb = {"tile_types": ["climb"], "num_levels": 1, "climb_heights": [0.30]}
    box = {**climb, "platform_depth": 0.6, "platform_goal": 0.4, "obstacle_width": 1.2}
    terrain = make_env(terrain=box).terrain
    tile = terrain.tiles[0]
    (platform,) = tile.obstacles
    front = platform.center[0] - platform.depth / 2
    assert (platform.depth, platform.width, platform.height) == pytest.approx((0.6, 1.2, 0.30))
    assert tile.goal[0] == pytest.approx(front + 0.4) and tile.goal[1] == pytest.approx(platform.center[1])
    y = platform.center[1]
    tops = [float(terrain.height_at(np.array([front + dx, y]))) for dx in (-0.1, 0.1, 0.5, 0.7)]
    assert tops == pytest.approx([0.0, 0.30, 0.30, 0.0], abs=1e-6)  # floor, box, box, floor behind it
    default = make_env(terrain=climb).terrain.tiles[0]
    assert default.obstacles[0].depth == pytest.approx(1.5)  # the climb tile's own platform, as before
    with pytest.raises(ValueError, match="platform_goal.*must end within the tile"):
        make_env(terrain={**climb, "platform_goal": 20.0})


def test_a_goal_tile_episode_that_stops_coming_closer_ends_as_a_failure_after_goal_stall_s():
    """goal_stall_s: on a goal tile, no goal_stall_distance of progress towards the goal for that long terminates
    the episode (no bootstrap, the termination reward), counted under episode ends as a stall; progress restarts
    the clock; off by default, and always off in the evaluation's envs (trials judge "stuck" themselves)."""
    from actors.evaluator import EvaluatorWorker

    climb = {"tile_types": ["climb"], "num_levels": 1, "climb_heights": [0.30]}

    def stand(env, steps):  # zero actions: the robot holds its pose at the spawn, 2.9 m from the goal
        ends = []
        for k in range(1, steps + 1):
            r = env.step(torch.zeros(2, env.num_actions))
            if bool(r.terminated.any() or r.truncated.any()):
                ends.append((k, r.terminated.tolist(), r.info["ends"]))
        return ends

    env = make_env(num_envs=2, terrain=climb, terminations={"goal_stall_s": 0.5})
    assert env.stall_steps == 25
    env.step(torch.zeros(2, env.num_actions))
    env.goal_best[1] += 1.0  # as if env 1 had been 1 m further off: its next step counts as progress
    ends = stand(env, 60)  # env 0 ends 25 steps (0.5 s) in; env 1 on its 27th, 25 after its progress
    assert ends[0] == (24, [True, False], {"fall": 0, "stall": 1, "goal": 0, "time_out": 0, "left_tile": 0})
    assert ends[1][0] == 26 and ends[1][1] == [False, True] and ends[1][2]["stall"] == 1
    assert make_env(num_envs=2, terrain=climb).stall_steps == 0
    assert stand(make_env(num_envs=2, terrain=climb), 60) == []  # off by default: standing is not an end
    cfg = env_config(overrides={"terrain": climb, "terminations": {"goal_stall_s": 0.5}})
    assert EvaluatorWorker(cfg, 2, seed=0, program=None, spec=None).env.stall_steps == 0


def test_episode_ends_are_counted_by_the_command_they_ended_on_off_goal_tiles():
    """info["end_details"]: each episode that ends off a goal tile counts under its command's region, and its fall
    too (training's episode_ends/detail/command/<region>/{ended,fell}); goal tiles (whose commands steer to the
    goal) are left out."""
    from llp.sim.command_regions import command_region, slug

    terrain = {"tile_types": ["flat", "climb"], "num_levels": 1, "climb_heights": [0.30]}
    env = make_env(num_envs=5, terrain=terrain, terminations={"min_base_height": 1.0})  # standing counts as fallen
    env.assign_tiles(np.arange(5), np.array([0, 0, 0, 0, 1]), np.zeros(5, dtype=int))
    vel = np.array([[0.0, 0.0], [0.5, 0.0], [-0.2, 0.25], [-0.2, -0.3], [0.5, 0.0]])
    env.command_envs(np.arange(5), vel, env.course_state()["yaw"])
    result = env.step(torch.zeros(5, env.num_actions))
    assert result.terminated.all()  # five falls, one of them on the climb tile
    counts = {region: 0 for region in map(command_region, vel[:4])}
    for region in map(command_region, vel[:4]):
        counts[region] += 1
    assert counts == {"standing": 1, "forward": 1, "backward, sideways": 2}
    expected = {}
    for region, n in counts.items():
        expected[f"command/{slug(region)}/ended"] = n
        expected[f"command/{slug(region)}/fell"] = n
    assert result.info["end_details"] == expected
    assert result.info["ends"]["fall"] == 5


def test_failure_focus_draws_commands_where_the_episodes_fall():
    """commands.failure_focus: that share of the moving commands is drawn again inside one command region,
    picked by the regions' recent fall rates; 0 (the default) leaves every command uniform."""
    from llp.sim.command_regions import REGIONS, command_regions

    flat = {"tile_types": ["flat"], "num_levels": 1}
    env = make_env(num_envs=400, terrain=flat, commands={"failure_focus": 1.0, "standing_fraction": 0.0})
    backward_sideways = REGIONS.index("backward, sideways")
    env.region_fall_rate[:] = 0.0
    env.region_fall_rate[backward_sideways] = 0.5  # only there have episodes fallen
    env._resample_commands(np.arange(400))
    regions = command_regions(env.command[:, 0:2])
    assert (regions == backward_sideways).mean() > 0.95  # uniform: (0.3 / 1.1) * (0.3 / 0.6), about 14%
    assert (env.command[:, 0] >= -0.3).all() and (np.abs(env.command[:, 1]) <= 0.3).all()  # inside the ranges
    uniform = make_env(num_envs=400, terrain=flat, commands={"standing_fraction": 0.0})
    uniform.region_fall_rate[backward_sideways] = 0.5
    uniform._resample_commands(np.arange(400))
    assert 0.05 < (command_regions(uniform.command[:, 0:2]) == backward_sideways).mean() < 0.25
    # the rates follow the ends: a fall there pulls its region's rate up, an episode that ends upright pulls it down
    ended, fell = np.zeros(400, dtype=bool), np.zeros(400, dtype=bool)
    ended[:10] = True
    fell[:10] = True
    before = env.region_fall_rate.copy()
    env._ends_by_command(ended, fell)
    moved = command_regions(env.command[:10, 0:2])
    assert all(env.region_fall_rate[k] > before[k] for k in set(moved) if before[k] < 1.0)
    before = env.region_fall_rate.copy()
    env._ends_by_command(ended, np.zeros(400, dtype=bool))  # the same ten end upright
    assert all(env.region_fall_rate[k] < before[k] for k in set(moved))
    with pytest.raises(ValueError, match="failure_focus"):
        make_env(commands={"failure_focus": 1.5})
