"""`llp bench sim`: simulator throughput against raw physics, in one process.

physics_policy_steps_per_s: the env's own batch (same models, same N, same backend)
stepped ``decimation`` times per policy step with nothing else (the robots hold
their default pose: zero actions).
env_policy_steps_per_s: the full env step: physics, policy observations
(proprioception, command, 187-point height scan), every reward and termination
term, resets. The two are timed in alternating blocks so that load on a shared
machine hits both alike; times are CPU seconds of this one-threaded process; ratios are what to
compare across machines.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from llp.sim.env import ParkourEnv
from llp.sim.tasks import env_config


def _in_isaaclab(kwargs: dict) -> dict:
    """``run(**kwargs)`` in Isaac Lab's environment (the env server's interpreter); its report."""
    import json
    import os
    import subprocess

    from llp.sim.backend import REPO_ROOT, isaaclab_python

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([str(isaaclab_python()), "-m", "llp.bench.sim", json.dumps(kwargs)], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"the isaaclab bench failed in {isaaclab_python()}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _time_blocks(fn_a, fn_b, block: int, rounds: int, clock=time.process_time) -> tuple[float, float]:
    """CPU seconds of this process spent in ``fn_a`` and ``fn_b``, run in alternating blocks.

    CPU time rather than wall time: on a shared virtual machine, time stolen by
    neighbours would otherwise land on whichever block it happened to hit. On a GPU (``clock``:
    wall time), each call returns once the device is done (the env reads its state back).
    """
    t_a = t_b = 0.0
    for _ in range(rounds):
        t0 = clock()
        for _ in range(block):
            fn_a()
        t1 = clock()
        for _ in range(block):
            fn_b()
        t2 = clock()
        t_a += t1 - t0
        t_b += t2 - t1
    return t_a, t_b


def measure(env: ParkourEnv, steps: int, rounds: int = 10) -> tuple[float, float]:
    """(physics policy steps/s, env policy steps/s) for ``env``, each over ``steps`` policy steps."""
    zeros = torch.zeros(env.num_envs, env.num_actions)
    decimation = env.cfg.decimation
    for _ in range(10):
        env.step(zeros)
    block = max(1, steps // rounds)
    clock = time.perf_counter if env.cfg.device != "cpu" else time.process_time
    t_phys, t_env = _time_blocks(lambda: env.batch.step(nstep=decimation), lambda: env.step(zeros), block, rounds,
                                 clock)  # fmt: skip
    n = block * rounds * env.num_envs
    return n / t_phys, n / t_env


def run(
    robot: str = "lightbot0_like",
    num_envs: int = 64,
    steps: int = 200,
    depth_steps: int = 40,
    task: str = "locomotion",
    seed: int = 0,
    backend: str = "mujoco",
    device: str = "cpu",
) -> dict:
    from llp.sim.backend import in_isaaclab

    if backend == "isaaclab" and not in_isaaclab():  # measured where it runs: in Isaac Lab's own interpreter
        return _in_isaaclab(dict(robot=robot, num_envs=num_envs, steps=steps, depth_steps=depth_steps, task=task,
                                 seed=seed, backend=backend, device=device))  # fmt: skip
    torch.set_num_threads(1)
    sim = {"backend": backend, "device": device}
    cfg = env_config(task, robot, sim)
    env = ParkourEnv(cfg, num_envs, seed=seed, threads=1)
    physics, full = measure(env, steps)
    env.close()
    report = {
        "robot": robot,
        "backend": backend,
        "device": device,
        "num_envs": num_envs,
        "num_actions": env.num_actions,
        "threads": 1,
        "physics_policy_steps_per_s": round(physics, 1),
        "env_policy_steps_per_s": round(full, 1),
        "ratio": round(full / physics, 3),
        "height_scan_points": int(env.scan_points.shape[0]),
        "reward_terms": len(env.reward_names),
    }
    if depth_steps:  # the same with a depth image every policy step
        groups = {g: list(t) for g, t in cfg.observations.items()}
        groups["policy"] = [*groups["policy"], "depth"]
        depth_cfg = env_config(task, robot, {"observations": groups, **sim})
        depth_env = ParkourEnv(depth_cfg, num_envs, seed=seed, threads=1)
        depth_physics, depth_full = measure(depth_env, depth_steps)
        images = depth_env.depth_images()
        report |= {
            "depth_resolution": [int(images.shape[2]), int(images.shape[1])],
            "depth_physics_policy_steps_per_s": round(depth_physics, 1),
            "depth_env_policy_steps_per_s": round(depth_full, 1),
            "depth_ratio": round(depth_full / depth_physics, 3),
            "depth_hit_fraction": round(float(np.mean(images < depth_cfg.depth_camera.far)), 3),
        }
    return report


if __name__ == "__main__":  # python -m llp.bench.sim '{"backend": "isaaclab", ...}': one report as JSON
    import json
    import sys

    print(json.dumps(run(**json.loads(sys.argv[1]))))
