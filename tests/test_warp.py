"""The warp backend (MuJoCo Warp, here on the CPU with a few envs) against the mujoco backend: the same task
config must mean the same thing on both: observation layout, actions, rewards, sensors, terminations, resets,
randomisation and the statistics of a short rollout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llp.config.schema import ConfigError, merge
from llp.sim.env import ParkourEnv
from llp.sim.tasks import env_config
from tests.test_sim import QUIET

FLAT = {"terrain": {"tile_types": ["flat"], "num_levels": 1}}


def pair(num_envs: int, seed: int = 0, overrides: dict | None = None) -> dict[str, ParkourEnv]:
    """The same config and seed on each backend."""
    return {
        backend: ParkourEnv(env_config(overrides=merge(overrides or {}, {"backend": backend})), num_envs, seed=seed)
        for backend in ("mujoco", "warp")
    }


@pytest.fixture(scope="module")
def randomized():
    """The locomotion task as the teacher trains it: randomisation, pushes and the curriculum on."""
    return pair(3, seed=5)


def test_both_backends_lay_out_observations_actions_and_rewards_alike_and_start_in_the_same_state(randomized):
    m, w = randomized["mujoco"], randomized["warp"]
    assert w.batch.__class__.__name__ == "WarpBatch" and m.batch.__class__.__name__ == "Batch"
    assert w.obs_dims() == m.obs_dims()
    assert w.joint_names == m.joint_names and w.action_joint_names == m.action_joint_names
    np.testing.assert_array_equal(w.default_joint_pos, m.default_joint_pos)
    assert w.reward_names == m.reward_names
    # the same draws (spawn, joint noise, randomised physics, commands) give the same first observation
    np.testing.assert_array_equal(w.friction, m.friction)
    np.testing.assert_array_equal(w.added_mass, m.added_mass)
    first_m, first_w = m.observe(), w.observe()
    for group, terms in first_m.items():
        for term, value in terms.items():
            torch.testing.assert_close(first_w[group][term], value, atol=2e-4, rtol=0, msg=f"{group}/{term}")


def test_an_action_sets_the_same_pd_targets_and_every_reward_term_keeps_its_sign(randomized):
    actions = torch.linspace(-12.0, 12.0, 3 * randomized["mujoco"].num_actions).reshape(3, -1)  # some clipped
    for backend, env in randomized.items():
        result = env.step(actions)
        clipped = actions.clamp(-env.cfg.action_clip, env.cfg.action_clip).numpy()
        targets = env.default_joint_pos[env.action_joints] + env.cfg.robot.action_scale * clipped
        np.testing.assert_allclose(env.ctrl[:, env.action_joints], targets, atol=1e-5, err_msg=backend)
        weighted = result.info["weighted_terms"].numpy()
        for i, name in enumerate(env.reward_names):
            weight = env.cfg.rewards[name].weight
            assert (np.sign(weight) * weighted[:, i] >= -1e-9).all(), (backend, name)


def test_each_world_simulates_its_own_randomised_physics(randomized):
    w = randomized["warp"]
    assert w._randomized
    base = w.scene.base_body
    np.testing.assert_allclose(w.batch.params("body_mass")[:, base], w._base_mass0 + w.added_mass, rtol=1e-6)
    friction = w.batch.params("geom_friction")[:, w._physics_robot_geoms, 0]
    np.testing.assert_allclose(friction, np.repeat(w.friction[:, None], friction.shape[1], axis=1), rtol=1e-6)
    gain = w.batch.params("actuator_gainprm")[:, :, 0]
    np.testing.assert_allclose(gain, w._gain0[None, :] * w.motor_strength[:, None], rtol=1e-6)


def test_the_height_scan_reads_a_known_box_on_the_warp_backend():
    env = ParkourEnv(
        env_config(overrides=merge(QUIET, {"backend": "warp", "terrain": {
            "tile_types": ["climb"], "num_levels": 1, "climb_heights": [0.60]}})), 1, seed=0)  # fmt: skip
    tile = env.terrain.tiles[0]
    box = tile.obstacles[0]
    x_front = box.center[0] - box.depth / 2
    env.set_base_pose(0, np.array([x_front - 0.4, tile.origin[1], env.cfg.robot.base_height]), yaw=0.0)
    scan = env.observe()["policy"]["height_scan"][0].numpy()
    pts = env.scan_points
    assert np.allclose(scan[pts[:, 0] > 0.43], 0.60, atol=0.01)
    assert np.allclose(scan[pts[:, 0] < 0.37], 0.0, atol=0.01)


def test_a_short_fixed_policy_rollout_has_the_same_statistics_on_both_backends():
    """Zero actions (the default pose under PD) for 1 s on flat ground, four envs: the robot stands on both."""
    envs = pair(4, seed=2, overrides=merge(QUIET, FLAT))
    stats = {}
    for backend, env in envs.items():
        zeros = torch.zeros(4, env.num_actions)
        heights, ends, terms = [], 0, []
        for _ in range(50):
            r = env.step(zeros)
            heights.append(env.state().base_height.copy())
            ends += int((r.terminated | r.truncated).sum())
            terms.append(r.info["weighted_terms"].numpy().sum(axis=0))
        stats[backend] = {"height": float(np.mean(heights)), "ends": ends, "terms": np.sum(terms, axis=0)}
    m, w = stats["mujoco"], stats["warp"]
    assert m["ends"] == w["ends"] == 0
    # measured here: 0.4366 m on both; every term's sum equal to 4 digits but opposite_direction's (a threshold
    # on the base velocity): -1.10 and -1.06
    assert abs(w["height"] - m["height"]) < 0.002  # metres, mean base height over the second
    np.testing.assert_allclose(w["terms"], m["terms"], atol=0.1, rtol=0.02)  # each term's sum over 4 env-seconds


def test_a_fall_terminates_on_both_backends():
    """Every joint driven to its limit (actions at the clip) for up to 2 s: the robot falls, and the episode
    ends as terminated, not truncated, on both backends."""
    for backend, env in pair(2, seed=1, overrides=merge(QUIET, FLAT)).items():
        push = torch.full((2, env.num_actions), env.cfg.action_clip)
        push[:, ::2] *= -1
        fell = np.zeros(2, dtype=bool)
        for _ in range(100):
            r = env.step(push)
            fell |= r.terminated.numpy()
            assert not (r.truncated.numpy() & ~fell).any(), backend
            if fell.all():
                break
        assert fell.all(), backend


def test_resetting_one_world_leaves_the_others_untouched():
    cfg = env_config(overrides={"backend": "warp", "randomization": {"push_interval_s": None}})
    a, b = ParkourEnv(cfg, 3, seed=1), ParkourEnv(cfg, 3, seed=1)
    zeros = torch.zeros(3, a.num_actions)
    for _ in range(3):
        a.step(zeros)
        b.step(zeros)
    x = b.qpos[1].copy()
    b.set_base_pose(1, np.array([x[0] + 100.0, x[1], x[2]]))  # off its tile: truncated and reset next step
    ra, rb = a.step(zeros), b.step(zeros)
    assert rb.truncated[1] and not bool((ra.terminated | ra.truncated).any())
    others = [0, 2]
    for _ in range(3):
        a.step(zeros)
        b.step(zeros)
    np.testing.assert_array_equal(a.qpos[others], b.qpos[others])
    np.testing.assert_array_equal(a.qvel[others], b.qvel[others])


def test_an_unknown_backend_or_device_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match="backend.*allowed values: mujoco, warp"):
        env_config(overrides={"backend": "bullet"})
    with pytest.raises(ConfigError, match="device.*cpu only"):
        env_config(overrides={"device": "cuda"})
    with pytest.raises(ConfigError, match="device.*cpu, cuda, cuda:N"):
        env_config(overrides={"backend": "warp", "device": "gpu0"})


def test_the_pipelines_sim_section_reaches_every_env_config_a_stage_builds_and_its_own_override_wins():
    from llp.config.pipeline import load_pipeline
    from llp.motion.tracking import tracking_task
    from llp.sim.backend import simulating_on
    from llp.stages.common import checked_env_config

    assert load_pipeline("smoke", ["sim.backend=warp"]).sim.backend == "warp"
    assert env_config().backend == "mujoco" and tracking_task().backend == "mujoco"
    with simulating_on("warp", "cpu"):
        assert checked_env_config("locomotion", "lightbot0_like", {}, "env").backend == "warp"
        assert tracking_task().backend == "warp"
        assert env_config(overrides={"backend": "mujoco"}).backend == "mujoco"  # a stage's own setting
    assert env_config().backend == "mujoco"  # only inside the block


@pytest.mark.slow
def test_the_smoke_pipeline_completes_on_the_warp_backend(tmp_path, llp):
    """`llp run --profile smoke --set sim.backend=warp`: every stage, Warp on the CPU (about 10 min here)."""
    import json

    root = tmp_path / "runs"
    result = llp("run", "--profile", "smoke", "--set", "sim.backend=warp", "--set", f"run_root={root}",
                 "--run-id", "w", timeout=1800)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ledger = json.loads((root / "w" / "ledger.json").read_text())
    assert ledger["state"] == "completed"
    assert all(s["state"] == "completed" for s in ledger["stages"].values()), ledger["stages"]
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    for stage in ledger["stages"].values():
        assert client.get_run(stage["mlflow_run"]).data.params["sim.backend"] == "warp"


def test_llp_bench_sim_measures_the_warp_backend_against_its_own_physics(llp):
    import json

    result = llp("bench", "sim", "--backend", "warp", "--num-envs", "2", "--steps", "10", "--json", timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert (report["backend"], report["device"], report["num_envs"]) == ("warp", "cpu", 2)
    assert report["physics_policy_steps_per_s"] > 0 and report["env_policy_steps_per_s"] > 0
    assert 0 < report["ratio"] <= 1.5 and report["depth_resolution"] == [64, 36]
    bad = llp("bench", "sim", "--backend", "bullet", "--json", timeout=120)
    assert bad.returncode == 2 and "backend" in bad.stderr and "Traceback" not in bad.stderr
