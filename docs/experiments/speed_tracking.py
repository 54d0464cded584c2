"""How fast registered policies walk on flat ground when asked to: mean forward speed over seconds 2-8 at held
forward commands of 0.3, 0.5, 0.65 and 0.8 m/s (8 envs each, heading held, MuJoCo, the local profile's final
protocol with flat tiles only). Usage (from the repository root):

    python docs/experiments/speed_tracking.py RUN_ROOT models:/llp-locomotion-teacher/1 models:/llp-depth-student/1

RUN_ROOT holds the registry (runs/ of a pipeline run).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from registry_policies import final_protocol, load_policy, parse_args

SPEEDS = (0.3, 0.5, 0.65, 0.8)


def main() -> None:
    args, root = parse_args(__doc__, "--envs-per-speed", 8)
    from llp.sim.env import ParkourEnv

    protocol = final_protocol()
    wanted = np.repeat(SPEEDS, args.envs_per_speed)
    n = len(wanted)
    for model in args.models:
        frozen = load_policy(root, model)
        cfg = protocol.env_config(action_joints=frozen.spec.get("action_joints"), policy_spec=frozen.spec)
        cfg = dataclasses.replace(
            cfg,
            terrain=dataclasses.replace(cfg.terrain, tile_types=["flat"], num_levels=1),
            terminations=dataclasses.replace(cfg.terminations, goal_stall_s=0.0),
            commands=dataclasses.replace(cfg.commands, resample_s=100.0),  # held for the whole run
        )
        env = ParkourEnv(cfg, n, seed=5)
        w, x, y, z = env.qpos[:, 3:7].T
        yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))  # keep the heading it spawned with
        env.command_envs(np.arange(n), np.stack([wanted, np.zeros(n)], 1), yaw)
        policy, obs = frozen.load(), env.observe()
        memory = policy.initial_memory(n)
        ended = np.zeros(n, dtype=bool)
        speeds = []
        with torch.no_grad():
            for _ in range(int(8.0 / cfg.policy_dt)):
                action, memory, _ = policy.step(policy.observe(obs), memory)
                result = env.step(action)
                obs = result.obs
                speeds.append(np.where(ended, np.nan, result.info["base_velocity"][:, 0]))
                ended |= (result.terminated | result.truncated).numpy()
                memory = memory.reset(result.terminated | result.truncated)
        late = np.array(speeds)[int(2.0 / cfg.policy_dt) :]
        cells = "  ".join(f"{s:.2f} -> {np.nanmean(late[:, wanted == s]):.2f}" for s in SPEEDS)
        print(f"{model}: command -> speed, m/s: {cells}  (ended early: {int(ended.sum())} of {n})")


if __name__ == "__main__":
    main()
