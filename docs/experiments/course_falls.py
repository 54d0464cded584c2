"""Why a policy falls on a skill's course: `llp evaluate`'s course trials from the skill's start, run in this
process, each fall told apart by the terrain env's termination that ended it (a termination body's contact and
which body, the tilt, the base height) and when. Usage (from the repository root), with the run root of a run
that registered the policy:

    python docs/experiments/course_falls.py RUN_ROOT models:/llp-skill-climb-step/1 [--heights 0.45 0.5] \
        [--start 2.2 2.3] [--trials 20] [--seed 7] [--set stages.evaluate_final.protocol.course_env...]

The trials are `llp evaluate`'s for the same --seed, course start and heights (the final evaluation's course).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: its actors and stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_root", type=Path)
    parser.add_argument("model")
    parser.add_argument("--heights", type=float, nargs="+", default=[0.45])
    parser.add_argument("--start", type=float, nargs=2, default=[2.2, 2.3])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profile", default="local")
    parser.add_argument("--set", action="append", default=[], dest="sets", help="as llp evaluate's --set")
    args = parser.parse_args()

    from actors.evaluator import EvaluatorWorker
    from llp.config.pipeline import load_pipeline
    from llp.evaluation.protocol import plan_trials, settings_for
    from llp.evaluation.trials import TrialRules, run_trials
    from llp.flows import tracking
    from llp.learn.spec import FrozenPolicy
    from llp.skills.protocol import course_trials_env
    from stages.registry import stage_config

    heights = "[" + ",".join(str(h) for h in args.heights) + "]"
    sets = [f"run_root={args.run_root}", f"stages.evaluate_final.protocol.course_env.terrain.climb_heights={heights}"]
    pipeline = load_pipeline(args.profile, sets + args.sets)
    protocol = stage_config(pipeline, "evaluate_final").protocol
    uri = tracking.registered_model(args.run_root.resolve(), pipeline.experiment, args.model)
    policy = FrozenPolicy(uri, *tracking.download_policy(uri))
    course = dataclasses.replace(protocol, env=course_trials_env(protocol.course_env, tuple(args.start)),
                                 traverse_types=[], courses={}, trials=args.trials)  # fmt: skip
    env_cfg = course.env_config(action_joints=policy.spec.get("action_joints"), policy_spec=policy.spec)
    settings = settings_for(env_cfg.terrain, args.trials, args.trials, [])
    trials = [t for t in plan_trials(settings, args.seed) if settings[t.setting].kind == "goal"]
    worker = EvaluatorWorker(env_cfg, len(trials), args.seed, policy.program, policy.spec)  # one wave: env = trial
    env, t = worker.env, env_cfg.terminations
    names = [b for b, on in zip(env.scene.contact_bodies, env.termination_bodies, strict=True) if on]
    first_end: dict[int, tuple[float, str]] = {}
    terminations = env._terminations

    def told_apart(state):  # the env's own verdict, and why, the first time each env ends
        terminated, truncated, success = terminations(state)
        for i in np.nonzero(terminated)[0]:
            if int(i) in first_end:
                continue
            force = state.body_contact_force[i, state.termination_bodies]
            why = [f"{name} contact" for name, f in zip(names, force, strict=True) if f > t.contact_threshold]
            why += ["tilt"] * bool(state.projected_gravity[i, 2] > -np.cos(t.max_tilt))
            why += ["base height"] * bool(state.base_height[i] < t.min_base_height)
            first_end[int(i)] = (float(env.episode_length[i] * env.dt), " + ".join(why) or "other")
        return terminated, truncated, success

    env._terminations = told_apart
    records = run_trials(env, worker.policy, settings, trials, TrialRules(duration_s=protocol.duration_s))
    print(
        f"{uri}: {len(trials)} course trials from {args.start[0]}-{args.start[1]} m (the box's front at "
        f"{env_cfg.terrain.approach_length} m), --seed {args.seed}"
    )
    for difficulty in sorted({settings[r.setting].difficulty for r in records}):
        mine = [(i, r) for i, r in enumerate(records) if settings[r.setting].difficulty == difficulty]
        outcomes = collections.Counter(r.outcome for _, r in mine)
        falls = collections.Counter(first_end[i][1] for i, r in mine if r.outcome == "fall")
        when = [first_end[i][0] for i, r in mine if r.outcome == "fall"]
        span = f", at {min(when):.2f}-{max(when):.2f} s" if when else ""
        print(f"  {difficulty}: {dict(outcomes)}; falls by cause {dict(falls)}{span}")


if __name__ == "__main__":
    main()
