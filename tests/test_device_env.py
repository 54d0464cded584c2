"""The device env (``DeviceParkourEnv``): ParkourEnv's task in torch beside MuJoCo Warp, and the co-located layout.

Run here with Warp's CPU kernels and torch on the CPU; on the device machine the same code runs on a GPU
(``llp bench gpu``). Agreement is checked against ``ParkourEnv`` on the same backend from the same state, so
the physics is the same and only the task code differs: float32 torch against float64 numpy.
"""

from __future__ import annotations

import collections
import subprocess
import sys

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.timeout(600)
N = 6


def _cfg(**overrides):
    from llp.config.schema import merge
    from llp.sim.backend import simulating_on
    from llp.sim.tasks import env_config

    small = {"terrain": {"num_levels": 2, "tile_length": 6.0, "tile_width": 6.0}}
    with simulating_on("warp", "cpu"):
        return env_config(overrides=merge(small, overrides))


@pytest.fixture(scope="module")
def pair():
    """A ParkourEnv and a DeviceParkourEnv of the same config on Warp's CPU kernels, the device env holding
    the host env's state."""
    from llp.sim.device_env import DeviceParkourEnv
    from llp.sim.env import ParkourEnv

    terms = {"policy": ["proprio", "command", "height_scan", "gait_clock", "foot_scan"],
             "critic": ["proprio", "privileged", "amp_features", "progress", "group_onehot"]}  # fmt: skip
    cfg = _cfg(observations=terms)
    host, dev = ParkourEnv(cfg, N, seed=1), DeviceParkourEnv(cfg, N, seed=1)
    _copy_state(host, dev)
    return host, dev


def _copy_state(host, dev) -> None:
    """Everything a step reads, from the host env into the device env."""
    f32 = torch.float32
    for name in ("qpos", "qvel", "ctrl"):
        getattr(dev, name)[:] = torch.as_tensor(getattr(host, name))
    for name in ("command", "heading_target", "gait_freq", "command_timer", "push_timer", "friction", "added_mass",
                 "motor_strength", "spawn_xy", "commanded_disp", "foot_vel"):  # fmt: skip
        getattr(dev, name)[:] = torch.as_tensor(getattr(host, name), dtype=f32)
    for name in ("heading_env", "level", "tile_ids", "column", "episode_length"):
        getattr(dev, name)[:] = torch.as_tensor(getattr(host, name))
    dev.goal_distance[:] = torch.as_tensor(np.nan_to_num(host.goal_distance), dtype=f32)
    for name, view in dev._params.items():
        view[:] = torch.as_tensor(host.batch.params(name))
    dev.refresh()


def test_the_device_env_has_the_host_envs_spaces_joints_and_reward_terms(pair):
    host, dev = pair
    assert dev.obs_dims() == host.obs_dims()
    assert dev.num_actions == host.num_actions and dev.action_joint_names == host.action_joint_names
    assert dev.reward_names == host.reward_names
    np.testing.assert_allclose(dev.default_joint_pos.numpy(), host.default_joint_pos, atol=1e-6)
    obs = dev.observe()
    assert all(v.dtype == torch.float32 and v.device == dev.device for terms in obs.values() for v in terms.values())


def test_from_the_same_state_the_observations_and_a_steps_rewards_agree(pair):
    host, dev = pair
    a, b = host.observe(), dev.refresh()
    for group, terms in a.items():
        for term, value in terms.items():
            np.testing.assert_allclose(b[group][term].numpy(), value.numpy(), atol=2e-5, err_msg=f"{group}/{term}")
    actions = torch.randn(N, host.num_actions, generator=torch.Generator().manual_seed(0)) * 0.3
    r_host, r_dev = host.step(actions), dev.step(actions)
    w_host, w_dev = r_host.info["weighted_terms"].numpy(), r_dev.info["weighted_terms"].numpy()
    for i, name in enumerate(host.reward_names):  # per env, per term: 1e-4 of a step's reward or 0.1% of the term
        np.testing.assert_allclose(w_dev[:, i], w_host[:, i], atol=1e-4, rtol=1e-3, err_msg=name)
    assert torch.equal(r_dev.terminated, r_host.terminated) and torch.equal(r_dev.truncated, r_host.truncated)
    np.testing.assert_allclose(r_dev.reward.numpy(), r_host.reward.numpy(), atol=2e-4)


def test_a_fall_ends_one_env_and_resets_it_without_touching_the_others():
    from llp.sim.device_env import DeviceParkourEnv

    env = DeviceParkourEnv(_cfg(), 4, seed=2)
    zeros = torch.zeros(4, env.num_actions)
    env.step(zeros)
    env.qpos[0, 2] = env.grid.at(env.qpos[0:1, 0:2])[0] + 0.05  # the base on the ground: fallen
    env.refresh()
    others = env.qpos[1:].clone()
    lengths = env.episode_length.clone()
    result = env.step(zeros)
    assert bool(result.terminated[0]) and not bool(result.terminated[1:].any())
    episode = result.info["episode"]
    assert episode["env_ids"].tolist() == [0] and episode["length"].tolist() == [int(lengths[0]) + 1]
    assert int(env.episode_length[0]) == 0 and env.episode_length[1:].tolist() == (lengths[1:] + 1).tolist()
    assert float(env.qpos[0, 2] - env.grid.at(env.qpos[0:1, 0:2])[0]) > 0.3  # standing at its spawn again
    assert float((env.qpos[1:] - others).abs().max()) < 0.05  # one policy step of motion, not a reset
    assert result.final_obs["policy"]["proprio"].shape == result.obs["policy"]["proprio"].shape


def test_a_leg_only_teacher_in_its_own_layout_labels_on_the_device_as_on_the_host(pair):
    host, dev = pair
    _copy_state(host, dev)
    legs = [n for n in host.joint_names if any(k in n for k in ("hip", "knee", "ankle"))]
    assert 0 < len(legs) < host.num_actions
    ids = torch.tensor([0, 2, 3])
    meaning = ("default", 0.3, legs, "tracking")
    sub_host = {g: {t: v[ids] for t, v in terms.items()} for g, terms in host.observe().items()}
    sub_dev = {g: {t: v[ids] for t, v in terms.items()} for g, terms in dev.refresh().items()}
    a, b = host.teacher_obs(sub_host, ids, *meaning), dev.teacher_obs(sub_dev, ids, *meaning)
    assert b["policy"]["proprio"].shape[1] == a["policy"]["proprio"].shape[1] == 6 + 2 * host.num_actions + len(legs)
    np.testing.assert_allclose(b["policy"]["proprio"].numpy(), a["policy"]["proprio"].numpy(), atol=2e-5)
    actions = torch.randn(3, len(legs), generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(dev.convert_actions(actions, ids, *meaning).numpy(),
                               host.convert_actions(actions, ids, *meaning).numpy(), atol=1e-5)  # fmt: skip
    assert dev.teacher_obs(sub_dev, ids) is sub_dev  # the env's own meaning: nothing to convert


def test_a_collector_with_a_teacher_labels_its_envs_on_the_device_env_reading_back_once_a_step():
    from llp.config.schema import build
    from llp.learn.configs import ActorConfig, CriticConfig
    from llp.learn.models import Actor, Critic
    from llp.learn.rollout import RolloutCollector, Teacher
    from llp.sim.device_env import DeviceParkourEnv
    from tests.test_device import READS, HostTraffic

    env = DeviceParkourEnv(_cfg(), 4, seed=3)
    dims = env.obs_dims()
    obs = ["policy/proprio", "policy/command", "policy/height_scan"]
    torch.manual_seed(0)
    actor = Actor(build(ActorConfig, {"obs": obs, "hidden_dims": [16]}), dims, env.num_actions)
    critic = Critic(build(CriticConfig, {"obs": obs, "hidden_dims": [16]}), dims)
    expert = Actor(build(ActorConfig, {"obs": obs, "hidden_dims": [16], "num_frames": 2}), dims, env.num_actions)
    teacher = Teacher(expert, torch.tensor([1, 3]))
    collector = RolloutCollector(env, actor, critic, 3, teachers=[teacher])
    with HostTraffic(env.device) as traffic:
        rollout = collector.collect()
    assert rollout.teacher_actions.shape == (3, 4, env.num_actions)
    assert rollout.labelled.tolist() == [False, True, False, True]
    assert not rollout.teacher_actions[:, [0, 2]].any() and rollout.teacher_actions[:, [1, 3]].abs().sum() > 0
    reads = collections.Counter(name for name in traffic.seen if name in READS)
    assert reads["aten.nonzero.default"] == 3 and reads["aten._local_scalar_dense.default"] <= 3
    assert collector.pop_metrics()["dagger/label_error"] > 0


def test_depth_images_are_the_exact_geometrys_as_the_host_envs_mujoco_depth_backend_casts_them():
    from llp.sim.device_env import DeviceParkourEnv
    from llp.sim.env import ParkourEnv

    cfg = _cfg(observations={"policy": ["proprio", "depth"]}, camera_model={"perfect": True},
               depth_camera={"backend": "mujoco"}, camera_envs=2)  # fmt: skip
    host, dev = ParkourEnv(cfg, 3, seed=4), DeviceParkourEnv(cfg, 3, seed=4)
    _copy_state(host, dev)
    a, b = host.observe()["policy"]["depth"].numpy(), dev.refresh()["policy"]["depth"].numpy()
    assert a.shape == b.shape == (3, 64 * 36)
    assert 0.2 < a[:2].mean() < 0.99  # the terrain in view, not all misses
    np.testing.assert_allclose(b, a, atol=1e-5)  # (depth / far; the third env has no camera: zeros on both)
    assert not b[2].any() and dev.depth_images().shape == (2, 36, 64)


def test_a_camera_model_and_the_wrong_backend_are_named_before_anything_is_built():
    from llp.sim.device_env import DeviceParkourEnv
    from llp.sim.tasks import env_config

    with pytest.raises(ValueError, match="renders a perfect camera only: set camera_model.perfect"):
        DeviceParkourEnv(_cfg(observations={"policy": ["proprio", "depth"]}, camera_model={"perfect": False}), 2)
    with pytest.raises(ValueError, match="runs on sim.backend warp, not 'mujoco'"):
        DeviceParkourEnv(env_config(), 2)


def test_every_reward_term_gives_the_same_values_on_torch_tensors_as_on_numpy_arrays():
    from llp.sim.rewards import REWARD_TERMS
    from llp.sim.task_state import TaskState

    rng = np.random.default_rng(0)
    n, j, b = 16, 5, 6
    arrays = dict(
        base_lin_vel=rng.normal(size=(n, 3)), base_ang_vel=rng.normal(size=(n, 3)),
        projected_gravity=rng.normal(size=(n, 3)) * 0.3 + [0, 0, -0.9], yaw=rng.uniform(-3, 3, n),
        command=rng.normal(size=(n, 3)) * np.repeat([[1.0], [0.0]], n // 2, axis=0),
        heading_target=rng.uniform(-3, 3, n), heading_active=rng.uniform(size=n) < 0.5,
        joint_pos=rng.normal(size=(n, j)), default_joint_pos=rng.normal(size=j) * 0.1,
        joint_soft_limits=np.stack([-np.ones(j) * 0.5, np.ones(j) * 0.5], axis=1), actions=rng.normal(size=(n, j)),
        last_actions=rng.normal(size=(n, j)), foot_pos=rng.normal(size=(n, 2, 3)) * 0.1,
        foot_vel=rng.normal(size=(n, 2, 3)), last_foot_vel=rng.normal(size=(n, 2, 3)),
        foot_contact_force=rng.uniform(0, 3, size=(n, 2)), foot_ray_heights=rng.normal(size=(n, 2, 9)) * 0.1,
        body_contact_force=rng.uniform(0, 3, size=(n, b)), undesired_bodies=np.arange(b) >= 2,
        hand_bodies=np.arange(b) >= 4, on_obstacle_tile=rng.uniform(size=n) < 0.5,
        termination_bodies=np.arange(b) == 2, base_height=rng.uniform(0.2, 0.8, n),
        terminated=rng.uniform(size=n) < 0.3, gait_phase=rng.uniform(0, 2 * np.pi, (n, 2)),
        goal_reached=rng.uniform(size=n) < 0.3, goal_approach=rng.normal(size=n) * 0.01,
    )  # fmt: skip
    names = [f"j{i}" for i in range(j)]
    as_numpy = TaskState(dt=0.02, joint_names=names, **arrays)
    as_torch = TaskState(dt=0.02, joint_names=names, **{
        k: torch.as_tensor(v, dtype=torch.bool if v.dtype == bool else torch.float32) for k, v in arrays.items()
    })  # fmt: skip
    for name, spec in REWARD_TERMS.items():
        fn_np, fn_t = spec.make(n), spec.make(n)
        if hasattr(fn_t, "place"):
            fn_t.place(as_torch.foot_contact_force)
        for _ in range(2):  # stateful terms: their memory too
            expected, got = fn_np(as_numpy), fn_t(as_torch)
        assert isinstance(got, torch.Tensor) and got.shape == (n,), name
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-5, err_msg=name)


def test_the_colocated_worker_trains_on_the_device_env_and_its_rollouts_stay_on_the_envs_device():
    """One actor, env and learner on the same device (the CPU here); the collection reads back to the host
    once per step (the ended envs) plus, on the CPU only, the check for truncated envs."""
    from llp.actors.colocated import ColocatedWorker
    from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
    from llp.learn.spec import TrainSpec
    from llp.sim.device_env import DeviceParkourEnv
    from tests.test_device import READS, HostTraffic

    spec = TrainSpec(
        env=_cfg(), envs_per_actor=4, seed=0,
        actor=ActorConfig(obs=["policy/proprio", "policy/command", "policy/height_scan"], hidden_dims=[16],
                          num_frames=2),
        critic=CriticConfig(obs=["critic/proprio", "critic/privileged"], hidden_dims=[16]),
        ppo=PPOConfig(num_steps=4, num_epochs=1, num_minibatches=1),
    )  # fmt: skip
    worker = ColocatedWorker(spec, device_task=True)
    assert isinstance(worker.env, DeviceParkourEnv) and worker.learner.device == worker.env.device
    metrics = worker.iteration()
    assert metrics["perf/env_steps"] == 16 and np.isfinite(metrics["loss/surrogate"])
    assert any(k.startswith("reward_terms/") for k in metrics)
    with HostTraffic(worker.env.device) as traffic:
        rollout = worker.collector.collect()
    assert rollout.actions.device == worker.env.device and rollout.rewards.shape == (4, 4, 1)
    reads = collections.Counter(name for name in traffic.seen if name in READS)
    assert reads["aten.nonzero.default"] == 4  # the ended envs, once a step
    assert reads["aten._local_scalar_dense.default"] <= 4  # CPU only: were any truncated?


def test_llp_bench_gpu_runs_its_measures_at_small_counts_on_the_cpu_and_names_a_missing_gpu():
    import json

    def bench(*args):
        return subprocess.run([sys.executable, "-m", "llp.cli", "bench", "gpu", *args], capture_output=True,
                              text=True, timeout=300)  # fmt: skip

    result = bench("--device", "cpu", "--counts", "4", "--steps", "4", "--iterations", "1", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    row = report["per_num_envs"]["4"]
    for key in ("env_policy_steps_per_s", "physics_policy_steps_per_s", "colocated_env_steps_per_s"):
        assert row[key] > 0, key
    assert 0 < row["env_over_physics"] and report["ppo_update_samples_per_s"] > 0
    assert row["host_task_env_policy_steps_per_s"] > 0 and row["device_over_host_task"] > 0
    assert report["targets"]["colocated_env_steps_per_s"] == 300_000
    if not torch.cuda.is_available():
        missing = bench()
        assert missing.returncode != 0 and "torch sees no GPU" in missing.stderr
        assert "Traceback" not in missing.stderr
