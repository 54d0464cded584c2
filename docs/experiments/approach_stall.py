"""Where registered policies get to on the course from its approach: mean position relative to the course's
first trigger, and mean forward speed, over time (16 envs, 10 s, the local profile's final protocol, MuJoCo).
Usage (from the repository root):

    python docs/experiments/approach_stall.py RUN_ROOT models:/llp-transition-policy/1 models:/llp-depth-student/1

RUN_ROOT holds the registry (runs/ of a pipeline run).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from registry_policies import final_protocol, load_policy, parse_args


def main() -> None:
    args, root = parse_args(__doc__, "--envs", 16)
    from llp.sim.env import ParkourEnv
    from llp.skills.protocol import course_trials_env

    protocol = final_protocol()
    n = args.envs
    for model in args.models:
        frozen = load_policy(root, model)
        trials = dataclasses.replace(protocol, env=course_trials_env(protocol.course_env, (0.0, 0.0)))
        cfg = trials.env_config(action_joints=frozen.spec.get("action_joints"), policy_spec=frozen.spec)
        cfg = dataclasses.replace(cfg, terminations=dataclasses.replace(cfg.terminations, goal_stall_s=0.0))
        env = ParkourEnv(cfg, n, seed=11)
        policy, obs = frozen.load(), env.observe()
        memory = policy.initial_memory(n)
        trigger = env.tile_trigger0[env.tile_ids]
        ended = np.zeros(n, dtype=bool)
        xs, speeds, commands = [], [], []
        with torch.no_grad():
            for _ in range(500):
                action, memory, _ = policy.step(policy.observe(obs), memory)
                result = env.step(action)
                obs = result.obs
                xs.append(np.where(ended, np.nan, env.qpos[:, 0] - trigger))
                speeds.append(np.where(ended, np.nan, result.info["base_velocity"][:, 0]))
                commands.append(env.command[:, 0].copy())
                ended |= (result.terminated | result.truncated).numpy()
                memory = memory.reset(result.terminated | result.truncated)
        xs, speeds, commands = np.array(xs), np.array(speeds), np.array(commands)
        print(model)
        for s in (50, 100, 200, 300, 400):
            print(f"  {s * cfg.policy_dt:4.1f} s: position {np.nanmean(xs[s - 1]):+.2f} m, speed over the last 0.5 s "
                  f"{np.nanmean(speeds[s - 25 : s]):.2f} m/s, command {commands[s - 1].mean():.2f} m/s")  # fmt: skip


if __name__ == "__main__":
    main()
