"""One registered policy on flat ground on several simulators: how many of its episodes end in a fall.

The same envs, seeds, commands and task code on each engine; only the physics differs. Randomisation and
pushes are off, so a fall is the engines' difference, not a draw. A policy trained on one engine falling
more on another is the sim-to-sim gap that a transfer to a robot would meet first.

    python -m llp.bench.sim2sim --model models:/llp-locomotion-teacher/1 --run-root runs \\
        --engine mujoco --engine warp --engine isaaclab --engine warp@isaaclab

Engines: a ``sim.backend`` (``mujoco``, ``warp``, ``isaaclab``), or ``warp@isaaclab``: our MuJoCo Warp backend
run under Isaac Lab's environment, with the MuJoCo and MuJoCo Warp versions that Newton pins there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch


def make_env(cfg, engine: str, num_envs: int, seed: int):
    from llp.sim.backend import isaaclab_python
    from llp.sim.hosted import parkour_env

    if engine == "warp@isaaclab":
        from llp.sim.remote_env import RemoteVecEnv

        kwargs = {"cfg": dataclasses.replace(cfg, backend="warp"), "num_envs": num_envs, "seed": seed}
        return RemoteVecEnv("llp.sim.env:ParkourEnv", kwargs, python=str(isaaclab_python()))
    return parkour_env(dataclasses.replace(cfg, backend=engine), num_envs, seed=seed)


def falls(frozen, engine: str, num_envs: int = 32, seconds: float = 10.0, seed: int = 5) -> dict:
    """Episodes of ``frozen`` on flat tiles for ``seconds`` on ``engine``; which envs fell, and when."""
    from llp.skills.protocol import EvaluateConfig

    spec = frozen.spec
    evaluate = EvaluateConfig(env={"terrain": {"tile_types": ["flat"], "num_levels": 1}})
    cfg = evaluate.env_config(action_joints=spec.get("action_joints"), policy_spec=spec)
    still = dataclasses.replace(cfg.randomization, friction=None, added_mass=None, motor_strength=None,
                                push_interval_s=None)  # fmt: skip
    cfg = dataclasses.replace(cfg, randomization=still)
    env = make_env(cfg, engine, num_envs, seed)
    policy = frozen.load()
    obs = env.observe() if not hasattr(env, "proc") else env.call("observe")
    memory = policy.initial_memory(num_envs)
    fell_at = np.full(num_envs, -1)
    steps = int(round(seconds / cfg.policy_dt))
    with torch.no_grad():
        for step in range(steps):
            action, memory, _ = policy.step(policy.observe(obs), memory)
            result = env.step(action)
            obs = result.obs
            new = result.terminated.numpy() & (fell_at < 0)
            fell_at[new] = step
            memory = memory.reset(result.terminated | result.truncated)
    env.close()
    first = fell_at >= 0
    return {"engine": engine, "envs": num_envs, "seconds": seconds, "fell": int(first.sum()),
            "fell_at_s": sorted(round(float(s) * cfg.policy_dt, 2) for s in fell_at[first])}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="models:/NAME/VERSION")
    parser.add_argument("--run-root", default="runs", help="the run root whose registry holds it")
    parser.add_argument("--experiment", default="llp")
    parser.add_argument("--engine", action="append", required=True)
    parser.add_argument("--envs", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    root = Path(args.run_root).resolve()
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    from llp.flows import tracking
    from llp.learn.spec import FrozenPolicy

    uri = tracking.registered_model(root, args.experiment, args.model)
    frozen = FrozenPolicy(uri, *tracking.download_policy(uri))
    for engine in args.engine:
        print(json.dumps({"model": args.model, **falls(frozen, engine, args.envs, args.seconds)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
