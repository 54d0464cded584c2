"""`llp bench pipeline`: what the spine costs around the science.

* a smoke pipeline, then the same pipeline again: ``cached_rerun_s`` (wall time of
  the second `llp run`, a fresh process, Prefect server already up) and
  ``stages_executed_on_rerun``; ``cached_rerun_cold_s`` also starts the server;
* ``overhead_fraction``: share of the first run's wall time spent outside the
  stages' own compute (process start, imports, Prefect, MLflow, Ray start-up);
* rollout throughput of 1 vs 2 simulator actors (collection only, 64 envs each):
  ``scaling_2_actors`` = aggregate env-steps/s with 2 actors / with 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _llp(args: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "llp"), *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"llp {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0


def _rollout_rates(envs: int, rounds: int) -> tuple[float, float]:
    """Aggregate rollout env-steps/s of one simulator actor and of two in parallel, measured in alternating
    rounds on the same two actors so that machine noise hits both alike."""
    from llp.actors.pool import TrainingPool
    from llp.config.resources import ResourcesConfig
    from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
    from llp.learn.spec import TrainSpec
    from llp.sim.tasks import env_config

    spec = TrainSpec(
        env=env_config(),
        envs_per_actor=envs,
        seed=0,
        actor=ActorConfig(
            obs=["policy/proprio", "policy/command", "policy/height_scan"], num_frames=5, hidden_dims=[256, 128, 64]
        ),
        critic=CriticConfig(
            obs=["critic/proprio", "critic/command", "critic/height_scan", "critic/privileged"],
            hidden_dims=[256, 128, 64],
        ),
        ppo=PPOConfig(num_steps=24),
    )
    pool = TrainingPool(ResourcesConfig(sim_actors=2, sim_actor_cpus=0.9), spec)
    try:
        pool.collect_only()  # warm-up: actor start, first rollout
        time_one = time_two = 0.0
        steps_one = steps_two = 0
        for _ in range(rounds):
            t0 = time.perf_counter()
            steps_one += pool.collect_only(actors=1)
            t1 = time.perf_counter()
            steps_two += pool.collect_only(actors=2)
            t2 = time.perf_counter()
            time_one += t1 - t0
            time_two += t2 - t1
        return steps_one / time_one, steps_two / time_two
    finally:
        pool.close()


def run(rounds: int = 8, envs: int = 64) -> dict:
    from llp.infra.services import start_prefect

    with tempfile.TemporaryDirectory(prefix="llp-bench-") as tmp:
        root = Path(tmp)
        env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PREFECT_API_URL")}
        sets = ["--profile", "smoke", "--set", f"run_root={root}"]
        # cold: the command starts (and stops) its own Prefect server
        first_s = _llp(["run", *sets, "--run-id", "first"], env)
        cold_s = _llp(["run", *sets, "--run-id", "rerun-cold"], env)
        prefect = start_prefect(root / "prefect")
        try:
            warm_env = {**env, "PREFECT_API_URL": prefect.url}
            rerun_s = _llp(["run", *sets, "--run-id", "rerun"], warm_env)
        finally:
            prefect.stop()
        first = json.loads((root / "first" / "ledger.json").read_text())
        rerun = json.loads((root / "rerun" / "ledger.json").read_text())
        compute = sum(s.get("compute_s", 0.0) for s in first["stages"].values())
        executed = sum(s.get("executions", 0) for s in rerun["stages"].values())

    from llp.infra.ray_runtime import init_ray, shutdown_ray

    with tempfile.TemporaryDirectory(prefix="llp-ray-") as tmp:
        init_ray(Path(tmp), num_cpus=os.cpu_count())
        try:
            one, two = _rollout_rates(envs, rounds)
        finally:
            shutdown_ray()
    return {
        "smoke_pipeline_s": round(first_s, 1),
        "stage_compute_s": round(compute, 1),
        "overhead_fraction": round(1.0 - compute / first_s, 3),
        "cached_rerun_s": round(rerun_s, 1),
        "cached_rerun_cold_s": round(cold_s, 1),
        "stages_executed_on_rerun": executed,
        "sim_actors": 2,
        "envs_per_actor": envs,
        "rollout_steps_per_s_1_actor": round(one, 1),
        "rollout_steps_per_s_2_actors": round(two, 1),
        "scaling_2_actors": round(two / one, 3),
    }
