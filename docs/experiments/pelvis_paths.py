"""Where a skill's climb goes wrong: the pelvis over time (metres past the box's front edge, height above the floor,
pitch) in the skill stage's standing start (the tracking env) and on the course from the skill's start (the
terrain env, `llp evaluate`'s trials), at one height, medians over the trials alive at each time. Usage (from the
repository root), with the run root of a run whose library and skill are registered there:

    python docs/experiments/pelvis_paths.py RUN_ROOT models:/llp-skill-climb-step/3 --height 0.6 [--trials 32] \
        [--start 2.2 2.3] [--speed 0.17]

The stage's env is phase B's (walking starts off, the course's contact rule on, heights not held), as in
docs/experiments/2026-12-08-climb-phase-b.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: its actors and stages

TIMES = (0.0, 0.4, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.3, 2.8)


def pitch(q: np.ndarray) -> np.ndarray:
    w, x, y, z = q[..., 3], q[..., 4], q[..., 5], q[..., 6]
    return np.arcsin(np.clip(2 * (w * y - z * x), -1, 1))


def table(name: str, paths: list[np.ndarray], ok: list[bool], dt: float = 0.02) -> None:
    print(f"{name}: {sum(ok)}/{len(ok)} succeed")
    for t in TIMES:
        f = int(round(t / dt))
        rows = np.array([p[min(f, len(p) - 1)] for p in paths])
        alive = sum(f < len(p) for p in paths)
        x, p, z = np.median(rows, axis=0)
        print(f"  t={t:.1f} s  alive {alive:2d}  past the front {x:+.2f} m  height {z:.2f} m  pitch {p:+.2f} rad")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_root", type=Path)
    parser.add_argument("model")
    parser.add_argument("--height", type=float, default=0.6)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--start", type=float, nargs=2, default=[2.2, 2.3])
    parser.add_argument("--speed", type=float, default=0.17)
    args = parser.parse_args()

    from actors.evaluator import EvaluatorWorker
    from llp.config.pipeline import load_pipeline
    from llp.evaluation.protocol import plan_trials, settings_for
    from llp.evaluation.trials import TrialRules, run_trials
    from llp.flows import tracking
    from llp.learn.spec import FrozenPolicy
    from llp.skills.library import skill_references
    from llp.skills.protocol import course_trials_env
    from llp.skills.trials import run_trials as stage_trials
    from stages.registry import stage_config
    from stages.skill_expert import generalization_env, phase_b_starts

    skill, final = "stages.skill_climb_step.", "stages.evaluate_final.protocol.course_env."
    sets = [f"run_root={args.run_root}", f"{final}terrain.climb_heights=[{args.height}]",
            f"{final}commands.goal_speed=[{args.speed},{args.speed}]", f"{skill}teacher=",
            f"{skill}generalization.env.walking_starts=0", f"{skill}generalization.env.terminations.end_body_z=1.0",
            f"{skill}generalization.env.terminations.body_contact=true"]  # fmt: skip
    pipeline = load_pipeline("local", sets)
    cfg = stage_config(pipeline, "skill_climb_step")
    library = glob.glob(f"{args.run_root}/*/references/reference_augmentation")[0]
    refs = [r for r in skill_references(library, "climb_step") if abs(r.obstacle.height - args.height) < 0.01]
    standing = phase_b_starts(cfg, generalization_env(cfg, refs, None), None)["standing start"]
    uri = tracking.registered_model(args.run_root.resolve(), pipeline.experiment, args.model)
    policy = FrozenPolicy(uri, *tracking.download_policy(uri))
    records = stage_trials(standing, policy.load(), args.trials, seed=11)
    front = refs[0].obstacle.front_x
    paths = [np.stack([r["qpos"][:, 0] - front, pitch(r["qpos"]), r["qpos"][:, 2]], axis=1) for r in records]
    table(f"the stage's standing start, {args.height} m", paths, [r["success"] for r in records])

    protocol = stage_config(pipeline, "evaluate_final").protocol
    course = dataclasses.replace(protocol, env=course_trials_env(protocol.course_env, tuple(args.start)),
                                 traverse_types=[], courses={}, trials=args.trials)  # fmt: skip
    env_cfg = course.env_config(action_joints=policy.spec.get("action_joints"), policy_spec=policy.spec)
    settings = settings_for(env_cfg.terrain, args.trials, args.trials, [])
    trials = [t for t in plan_trials(settings, 7) if settings[t.setting].kind == "goal"]
    worker = EvaluatorWorker(env_cfg, len(trials), 7, policy.program, policy.spec)  # one wave: env = trial
    env, box_front = worker.env, env_cfg.terrain.approach_length
    logs: list[list] = [[] for _ in trials]
    ended: set[int] = set()
    terminations = env._terminations

    def logged(state):  # the pelvis each step, until each env's trial ends
        terminated, truncated, success = terminations(state)
        for i in set(range(len(trials))) - ended:
            q = env.qpos[i]
            logs[i].append([q[0] - env.terrain.tiles[env.tile_ids[i]].spawn[0] - box_front, pitch(q[None])[0], q[2]])
            if terminated[i] or truncated[i] or success[i]:
                ended.add(i)
        return terminated, truncated, success

    env._terminations = logged
    outcomes = run_trials(env, worker.policy, settings, trials, TrialRules(duration_s=protocol.duration_s))
    table(f"the course, {args.height} m", [np.array(g) for g in logs], [r.outcome == "success" for r in outcomes])


if __name__ == "__main__":
    main()
