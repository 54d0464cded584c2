"""Ray actor pools: a simulator actor that dies is replaced and its rollout redone; layouts train."""

from __future__ import annotations

import os
import signal

import pytest

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    from llp.infra.ray_runtime import init_ray, shutdown_ray

    init_ray(tmp_path_factory.mktemp("ray"), num_cpus=2)
    yield
    shutdown_ray()


def _spec(envs=4):
    from llp.actors.pool import PoolSpec
    from llp.config.files import env_config
    from llp.config.schema import to_dict

    env = to_dict(env_config(overrides={"terrain": {"num_levels": 2, "tile_length": 6.0, "tile_width": 6.0}}))
    return PoolSpec(
        env,
        {"obs": ["policy/proprio", "policy/command", "policy/height_scan"], "hidden_dims": [16]},
        {"obs": ["critic/proprio", "critic/privileged"], "hidden_dims": [16]},
        {"num_steps": 4, "num_epochs": 1, "num_minibatches": 1},
        envs,
        0,
    )


def test_dead_simulator_actor_is_replaced_and_the_iteration_redone(ray_local):
    from llp.actors.pool import TrainingPool
    from llp.config.pipeline import ResourcesConfig

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


def test_colocated_layout_trains_in_one_actor(ray_local):
    from llp.actors.pool import TrainingPool
    from llp.config.pipeline import ResourcesConfig

    pool = TrainingPool(ResourcesConfig(mode="colocated", sim_actor_cpus=0.5), _spec())
    try:
        m1, m2 = pool.iteration(), pool.iteration()
        assert m1["perf/env_steps"] == m2["perf/env_steps"] == 16
        assert len(pool.sim_pids()) == 1
    finally:
        pool.close()
