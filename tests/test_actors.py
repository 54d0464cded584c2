"""Ray actor pools: a simulator actor that dies is replaced and its rollout redone; layouts train."""

from __future__ import annotations

import os
import signal

import pytest
import torch

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    from llp.infra.ray_runtime import init_ray, shutdown_ray

    init_ray(tmp_path_factory.mktemp("ray"), num_cpus=2)
    yield
    shutdown_ray()


def _env(**overrides):
    from llp.config.schema import merge
    from llp.sim.tasks import env_config

    small = {"terrain": {"num_levels": 2, "tile_length": 6.0, "tile_width": 6.0}}
    return env_config(overrides=merge(small, overrides))


def _spec(envs=4, env=None, **parts):
    from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
    from llp.learn.spec import TrainSpec

    return TrainSpec(
        env=env or _env(),
        envs_per_actor=envs,
        seed=0,
        actor=ActorConfig(obs=["policy/proprio", "policy/command", "policy/height_scan"], hidden_dims=[16]),
        critic=CriticConfig(obs=["critic/proprio", "critic/privileged"], hidden_dims=[16]),
        ppo=parts.pop("ppo", None) or PPOConfig(num_steps=4, num_epochs=1, num_minibatches=1),
        **parts,
    )


@pytest.mark.fault
def test_dead_simulator_actor_is_replaced_and_the_iteration_redone(ray_local):
    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig

    pool = TrainingPool(ResourcesConfig(sim_actors=2, sim_actor_cpus=0.5), _spec())
    try:
        pool.iteration()
        before = pool.sim_pids()
        os.kill(before[0], signal.SIGKILL)
        metrics = pool.iteration()  # the rollout of the dead actor is retried on its replacement
        after = pool.sim_pids()
        assert after[0] != before[0] and after[1] == before[1]
        assert metrics["perf/env_steps"] == 2 * 4 * 4
        assert "loss/surrogate" in metrics
    finally:
        pool.close()


@pytest.mark.fault
def test_a_simulator_killed_mid_rollout_is_replaced_and_only_that_rollout_is_redone(ray_local):
    import threading
    import time

    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig
    from llp.learn.configs import PPOConfig

    spec = _spec(ppo=PPOConfig(num_steps=200, num_epochs=1, num_minibatches=1))  # a rollout long enough to hit
    pool = TrainingPool(ResourcesConfig(sim_actors=2, sim_actor_cpus=0.5), spec)
    try:
        pool.iteration()
        before = pool.sim_pids()
        t0 = time.perf_counter()
        pool.iteration()
        rollout_s = time.perf_counter() - t0
        out = {}
        worker = threading.Thread(target=lambda: out.update(metrics=pool.iteration()))
        worker.start()
        time.sleep(min(0.3, rollout_s / 3))  # inside the rollout of the iteration in flight
        os.kill(before[0], signal.SIGKILL)
        worker.join(120)
        assert not worker.is_alive() and out["metrics"]["perf/env_steps"] == 2 * 200 * 4
        assert out["metrics"]["faults/sim_replacements"] == 1.0
        after = pool.sim_pids()
        assert after[0] != before[0] and after[1] == before[1]
    finally:
        pool.close()


def test_two_data_parallel_learners_average_their_gradients_and_stay_identical(ray_local, tmp_path):
    """Each learner learns from a different simulator's rollout; only averaged gradients (and agreed learning
    rates and normaliser statistics) keep their networks equal, and a checkpoint restores both."""
    import ray
    import torch

    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig
    from llp.learn.configs import PPOConfig

    spec = _spec(ppo=PPOConfig(num_steps=4, num_epochs=2, num_minibatches=2, schedule="adaptive"))
    pool = TrainingPool(ResourcesConfig(sim_actors=2, sim_actor_cpus=0.4, learners=2, learner_cpus=0.1), spec)
    try:
        start = {k: v.clone() for k, v in ray.get(pool.learners[0].actor_state.remote()).items()}
        for _ in range(3):
            metrics = pool.iteration()
        assert metrics["perf/env_steps"] == 2 * 4 * 4 and "loss/surrogate" in metrics
        first, second = ray.get([learner.actor_state.remote() for learner in pool.learners])
        assert first.keys() == second.keys()
        for name in first:
            assert torch.equal(first[name], second[name]), name  # identical copies, normalisers included
        assert any(not torch.equal(start[k], first[k]) for k in first)  # and they learned
        path = pool.save(str(tmp_path / "dp.pt"), 2, [])
        pool.iteration()
        assert pool.load(path)["iteration"] == 2
        first, second = ray.get([learner.actor_state.remote() for learner in pool.learners])
        assert all(torch.equal(first[k], second[k]) for k in first)
    finally:
        pool.close()


def test_learners_must_divide_the_simulators():
    from llp.config.resources import ResourcesConfig
    from llp.config.schema import ConfigError

    with pytest.raises(ConfigError, match="must divide sim_actors"):
        ResourcesConfig(sim_actors=3, learners=2).validate("resources")


def test_colocated_layout_trains_in_one_actor(ray_local):
    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig

    pool = TrainingPool(ResourcesConfig(mode="colocated", sim_actor_cpus=0.5), _spec())
    try:
        m1, m2 = pool.iteration(), pool.iteration()
        assert m1["perf/env_steps"] == m2["perf/env_steps"] == 16
        assert len(pool.sim_pids()) == 1
    finally:
        pool.close()


class _Labeller(torch.nn.Module):
    """An instrumented teacher: its action is a fixed linear map of what it observed, so a label tells which
    state it was computed from."""

    def __init__(self, obs_dim: int, num_actions: int):
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        self.weight = torch.nn.Parameter(torch.randn(num_actions, obs_dim, generator=gen), requires_grad=False)

    def forward(self, x):
        return x @ self.weight.T


def _frozen_labeller(obs_dim: int, num_actions: int):
    import io

    from llp.learn.export import PolicySpec
    from llp.learn.spec import FrozenPolicy

    module = _Labeller(obs_dim, num_actions).eval()
    buffer = io.BytesIO()
    torch.export.save(torch.export.export(module, (torch.zeros(2, obs_dim),)), buffer)
    spec = PolicySpec(obs=["policy/proprio"], obs_dim=obs_dim, num_frames=1, num_actions=num_actions)
    return module, FrozenPolicy("models:/instrumented/1", buffer.getvalue(), spec.to_dict())


def test_a_teacher_on_a_simulator_actor_labels_that_actor_s_student_states_for_its_group_only(ray_local):
    import ray

    from llp.actors.pool import TrainingPool
    from llp.actors.simulator import SimulatorWorker
    from llp.config.resources import ResourcesConfig
    from llp.learn.configs import PPOConfig
    from llp.learn.learner import build_networks
    from llp.learn.spec import TeacherSpec

    env = _env()
    probe = SimulatorWorker(_spec(envs=8, env=env), 0)
    dims = probe.env.obs_dims()
    proprio, actions = dims["policy"]["proprio"], probe.env.num_actions
    module, frozen = _frozen_labeller(proprio, actions)
    spec = _spec(
        envs=8,
        env=env,
        teachers=[TeacherSpec(frozen, tile_types=["stairs_up"])],
        ppo=PPOConfig(num_steps=4, num_epochs=1, num_minibatches=1, dagger_coef=1.0),
    )
    sim = ray.remote(SimulatorWorker).options(num_cpus=0.5).remote(spec, 0)
    actor, critic = build_networks(spec, dims, actions)
    rollout, _ = ray.get(sim.collect.remote({"actor": actor.state_dict(), "critic": critic.state_dict()}))
    columns = ray.get(sim.spaces.remote())["columns"]
    group = torch.tensor([env.terrain.tile_types[c] == "stairs_up" for c in columns])
    assert 0 < int(group.sum()) < 8
    # the student's first observation term is proprio: the teacher's label is its map of exactly that state
    seen = rollout.actor_obs[..., :proprio]
    expected = module(seen)
    assert torch.allclose(rollout.teacher_actions[:, group], expected[:, group], atol=1e-5)
    assert float(rollout.teacher_actions[:, ~group].abs().max()) == 0.0  # other groups get no label
    # and the learner of a decoupled pool trains on those labels
    pool = TrainingPool(ResourcesConfig(sim_actors=2, sim_actor_cpus=0.5), spec)
    try:
        metrics = pool.iteration()
        assert metrics["loss/dagger"] > 0
    finally:
        pool.close()


def _amp_spec(envs=4):
    from llp.learn.configs import AMPConfig
    from llp.learn.spec import AMPSpec

    env = _env(
        observations={
            "policy": ["proprio", "command", "height_scan"],
            "critic": ["proprio", "command", "height_scan", "privileged"],
            "amp": ["amp_features", "progress"],
        }
    )
    width = 10 + 2 * 21
    gen = torch.Generator().manual_seed(3)
    references = [torch.randn(256, 2 * width, generator=gen) for _ in range(2)]
    amp = AMPSpec(AMPConfig(hidden_dims=[16], triggers=[0.0], style_coef=5.0), references)
    return _spec(envs=envs, env=env, amp=amp)


@pytest.mark.parametrize("mode", ["decoupled", "colocated"])
def test_amp_style_reward_reaches_the_advantages_on_the_ray_path(ray_local, mode):
    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig

    pool = TrainingPool(ResourcesConfig(mode=mode, sim_actors=2, sim_actor_cpus=0.5), _amp_spec())
    try:
        metrics = pool.iteration()
    finally:
        pool.close()
    assert metrics["amp/style_reward"] > 0
    assert metrics["amp/advantage_change"] > 1e-4  # the advantages PPO used are not those without the style
    assert "amp/phase0_loss" in metrics  # locomotion tiles have no course: every sample is in the walk phase


def test_the_paper_reward_set_loads_and_trains(ray_local):
    """The paper's table unchanged (task locomotion_paper): the pool trains on it and reports its terms."""
    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig
    from llp.sim.tasks import env_config

    env = env_config(
        "locomotion_paper", overrides={"terrain": {"num_levels": 2, "tile_length": 6.0, "tile_width": 6.0}}
    )
    pool = TrainingPool(ResourcesConfig(mode="colocated", sim_actor_cpus=0.5), _spec(env=env))
    try:
        metrics = [pool.iteration() for _ in range(2)][-1]
    finally:
        pool.close()
    terms = {k.split("/", 1)[1] for k in metrics if k.startswith("reward_terms/")}
    assert terms == set(env.rewards) and "termination" not in terms
    assert all(v == v for k, v in metrics.items() if k.startswith("loss/"))  # finite losses


LEGS = [".*(hip|knee|ankle).*"]


def test_a_leg_only_teacher_sees_and_labels_a_whole_body_student_as_in_its_own_env():
    """The merge's locomotion group: a teacher that drives the 12 leg joints labels a student that drives all 21.
    One env is stepped by the teacher's actions, the other by the same actions converted: same joint targets,
    same physics, and the teacher reads the same observations (its own last action) in both."""
    import numpy as np

    from llp.learn.rollout import Teacher
    from llp.sim.env import ParkourEnv

    leg = ParkourEnv(_env(robot={"policy_joints": LEGS}), 2, seed=0)
    whole = ParkourEnv(_env(), 2, seed=0)
    assert (leg.num_actions, whole.num_actions) == (12, 21)
    teacher = Teacher(actor=None, env_ids=torch.arange(2), action_scale=0.25, action_joints=leg.action_joint_names)
    assert teacher.foreign(whole) and not teacher.foreign(leg)
    ids, rng = torch.arange(2), np.random.default_rng(0)
    meaning = ("default", 0.25, leg.action_joint_names)
    obs_leg, obs_whole = leg.reset(), whole.reset()
    for _ in range(6):
        seen = whole.teacher_obs(obs_whole, ids, *meaning)
        for group, terms in obs_leg.items():
            for term, value in terms.items():
                torch.testing.assert_close(seen[group][term], value, atol=1e-5, rtol=0)
        a = torch.from_numpy(rng.normal(0, 0.5, size=(2, 12)).astype(np.float32))
        converted = whole.convert_actions(a, ids, *meaning)
        arms = np.setdiff1d(np.arange(21), leg.action_joints)
        assert converted.shape == (2, 21) and torch.all(converted[:, arms] == 0)  # the teacher's env holds the arms
        obs_leg, obs_whole = leg.step(a).obs, whole.step(converted).obs
        np.testing.assert_allclose(whole.ctrl, leg.ctrl, atol=1e-6)
    np.testing.assert_allclose(whole.qpos, leg.qpos, atol=1e-8)
    with pytest.raises(ValueError, match="does not have"):
        whole.convert_actions(a, ids, "default", 0.25, ["tail_joint"])


def test_the_collector_routes_a_leg_only_teachers_labels_into_the_whole_body_action_space():
    import numpy as np

    from llp.learn.configs import ActorConfig
    from llp.learn.models import Actor
    from llp.learn.rollout import RolloutCollector, Teacher
    from llp.sim.env import ParkourEnv

    leg = ParkourEnv(_env(robot={"policy_joints": LEGS}), 2, seed=0)
    whole = ParkourEnv(_env(), 2, seed=0)
    cfg = ActorConfig(obs=["policy/proprio", "policy/command"])
    student, expert = Actor(cfg, whole.obs_dims(), 21), Actor(cfg, leg.obs_dims(), 12)
    seen = []
    step = expert.step

    def spy(frame, memory):  # what the expert read, and what it answered
        mean, memory, extra = step(frame, memory)
        seen.append((frame.clone(), mean.clone()))
        return mean, memory, extra

    expert.step = spy
    teacher = Teacher(expert, torch.arange(2), "default", 0.25, leg.action_joint_names)
    rollout = RolloutCollector(whole, student, None, 3, teachers=[teacher]).collect()
    labels = rollout.teacher_actions  # [T, N, 21]
    assert labels.shape == (3, 2, 21) and len(seen) == 3
    for t, (frame, mean) in enumerate(seen):
        assert frame.shape[1] == 60 + 3  # proprio with its own 12-joint last action, and the command
        torch.testing.assert_close(labels[t][:, torch.from_numpy(leg.action_joints)], mean)
    arms = torch.from_numpy(np.setdiff1d(np.arange(21), leg.action_joints))
    assert torch.all(labels[:, :, arms] == 0)


def test_the_policy_drives_only_the_configured_joints():
    import numpy as np

    from llp.sim.env import ParkourEnv

    env = ParkourEnv(_env(robot={"policy_joints": LEGS}), 2, seed=0)
    assert env.num_actions == 12
    held = np.setdiff1d(np.arange(21), env.action_joints)
    env.step(torch.ones(2, 12))
    ctrl = env.ctrl
    assert np.allclose(ctrl[:, held], env.default_joint_pos[held])  # waist and arms hold the default pose
    assert np.allclose(ctrl[:, env.action_joints], env.default_joint_pos[env.action_joints] + 0.25)


def test_actors_that_cannot_be_placed_fail_in_bounded_time_naming_what_they_asked_for(ray_local):
    """Ray waits forever for resources no node declares; the pool gives up after placement_timeout_s and says
    what each actor asked for and what the cluster has free."""
    import time

    import ray

    from llp.actors.pool import PlacementError, _wait_placed

    @ray.remote
    class Worker:
        def pid(self) -> int:
            return 1

    fits = [Worker.options(num_cpus=0.1).remote()]
    _wait_placed(fits, "one small actor", 0.1, 0.0, {}, timeout=60)  # placed: returns
    stuck = [Worker.options(num_cpus=0.1, resources={"cpu_sim_node": 1}).remote() for _ in range(2)]
    t0 = time.perf_counter()
    with pytest.raises(PlacementError, match=r"2 of 2 simulator actors were not placed within 3 s: each asks for "
                       r"\{'CPU': 0.1, 'cpu_sim_node': 1\}, and the cluster has free \{.*'CPU'"):  # fmt: skip
        _wait_placed(stuck, "2 simulator actors", 0.1, 0.0, {"cpu_sim_node": 1}, timeout=3)
    assert time.perf_counter() - t0 < 30
