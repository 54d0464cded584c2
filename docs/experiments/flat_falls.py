"""Where a registered policy falls on flat ground: the evaluation's flat trials, in one process, with each
trial's command, when it fell and which fall test fired; optionally with the command held back for the first
seconds (the robot stands first), or with env overrides. Usage (from the repository root):

    python docs/experiments/flat_falls.py RUN_ROOT models:/llp-locomotion-teacher/1 [--trials 200]
        [--stand-first 2.0] [--env '{"randomization": {"added_mass": null}}']

RUN_ROOT holds the registry (runs/ of a pipeline run). The trials are the protocol's (plan seed 12345), 10 s
each, on the task's command ranges; ``stand-still`` is the trivial baseline.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
from pathlib import Path

import numpy as np

from llp.evaluation.protocol import Setting, plan_trials
from llp.evaluation.trials import StandStill, TrialRules, run_trials
from llp.flows import tracking
from llp.learn.deployable import load_program
from llp.sim.command_regions import command_region
from llp.sim.env import ParkourEnv
from llp.skills.protocol import EvaluateConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_root", type=Path)
    parser.add_argument("model")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--stand-first", type=float, default=0.0, help="seconds of zero command before the trial's")
    parser.add_argument("--env", default="{}", help="env overrides, JSON")
    args = parser.parse_args()

    env_over = {"terrain": {"tile_types": ["flat"]}, **json.loads(args.env)}
    cfg = EvaluateConfig(task="locomotion", robot="lightbot0_like", env=env_over, traverse_types=[])
    program = spec = None
    if args.model != "stand-still":
        program, spec = tracking.download_policy(tracking.registered_model(args.run_root, "llp", args.model))
    env_cfg = cfg.env_config(action_joints=None if spec is None else spec.get("action_joints"), policy_spec=spec)
    env_cfg = dataclasses.replace(env_cfg, terminations=dataclasses.replace(env_cfg.terminations, goal_stall_s=0.0))
    n = args.trials
    env = ParkourEnv(env_cfg, n, seed=1)
    policy = load_program(program, spec) if program is not None else StandStill(env.num_actions)

    fell_at, why, step = np.full(n, np.nan), [""] * n, [0]
    terminations, command_envs, env_step = env._terminations, env.command_envs, env.step
    given: dict[int, tuple[np.ndarray, float]] = {}

    def record_falls(s):  # which of the env's fall tests fired, the step an episode first ended in a fall
        out = terminations(s)
        t = env.cfg.terminations
        contact = s.body_contact_force[:, s.termination_bodies] > t.contact_threshold
        tests = {"contact": contact.any(axis=1), "tilt": s.projected_gravity[:, 2] > -np.cos(t.max_tilt),
                 "low": s.base_height < t.min_base_height}  # fmt: skip
        for i in np.nonzero(out[0] & np.isnan(fell_at))[0]:
            fell_at[i] = step[0] * env.dt
            why[i] = "+".join(name for name, hit in tests.items() if hit[i])
        return out

    def remember_commands(ids, vel, heading):
        yaw = env.course_state()["yaw"]
        for k, i in enumerate(ids):
            given[int(i)] = (vel[k].copy(), float(heading[k] - yaw[i]))
        return command_envs(ids, vel, heading)

    hold = int(round(args.stand_first / env.dt))

    def stand_first(actions):
        if hold and step[0] in (0, hold):  # zero command, then the trial's own (its heading relative to now)
            yaw = env.course_state()["yaw"]
            ids = np.arange(n)
            vel = np.array([given[i][0] if step[0] else np.zeros(2) for i in ids])
            command_envs(ids, vel, yaw + np.array([given[i][1] if step[0] else 0.0 for i in ids]))
        result = env_step(actions)
        step[0] += 1
        return result

    env._terminations, env.command_envs, env.step = record_falls, remember_commands, stand_first
    settings = [Setting("flat", 0, "-", "tracking", n)]
    records = run_trials(env, policy, settings, plan_trials(settings, 12345), TrialRules())
    falls = [r for r in records if r.outcome == "fall"]
    print(f"{args.model}: {n - len(falls)}/{n} still up after 10 s; {len(falls)} fell")
    for r in falls:
        (vx, vy), turn = given[r.index]
        print(f"  trial {r.index:3d}: fell at {fell_at[r.index]:.2f} s ({why[r.index]}); command vx {vx:+.2f} "
              f"vy {vy:+.2f} m/s, heading {turn:+.2f} rad from the spawn's")  # fmt: skip
    regions = collections.defaultdict(lambda: [0, 0])
    for r in records:
        regions[command_region(r.command)][0] += 1
        regions[command_region(r.command)][1] += r.outcome == "fall"
    for region, (count, fell) in regions.items():
        print(f"  {region}: {fell}/{count} fell")
    turns = collections.defaultdict(lambda: [0, 0])  # by how far the trial's heading is from the spawn's
    for r in records:
        turn = (given[r.index][1] + np.pi) % (2 * np.pi) - np.pi  # wrapped to [-pi, pi)
        band = "under 1 rad" if abs(turn) < 1.0 else "1-2 rad" if abs(turn) < 2.0 else "over 2 rad"
        turns[band][0] += 1
        turns[band][1] += r.outcome == "fall"
    for band in ("under 1 rad", "1-2 rad", "over 2 rad"):
        print(f"  turn {band}: {turns[band][1]}/{turns[band][0]} fell")
    early = sum(fell_at[r.index] - args.stand_first <= 2.5 for r in falls)
    print(f"  {early} of {len(falls)} falls within 2.5 s of the command; tests fired: "
          f"{collections.Counter(why[r.index] for r in falls).most_common()}")  # fmt: skip


if __name__ == "__main__":
    main()
