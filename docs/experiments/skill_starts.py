"""Which of phase B's start conditions a skill's policies meet badly: the tracking expert and the skill policy
at the end of phase A, on the same trials from the motion's first frame of the hardest reference, as phase A's env
gives them and then with phase B's conditions added one at a time (the kept rollout as the reference, the
default standing posture, the course's friction, its sideways start), and each condition alone on phase A's
env (there the tracker's numbers mean something: its actions correct its own reference's joint targets, so on
the kept rollout, which holds its corrections already, they count twice). Usage (from the
repository root), on the run directory of a run that trained the skill stage:

    python docs/experiments/skill_starts.py /tmp/RUN/runs/RUN_ID [--trials 32] [--round N] \
        [--set stages.reference_augmentation.seed=climb_step_45 ...]

The skill policy after phase A (the checkpoint written at the switch to phase B, `phase-switch.pt`, or the
stage's `latest.pt` when it ran without phase B) and after phase B (`latest.pt`). The tracking expert is the
last round's (`--round`: another).
Pass the run's own `--set` values.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: its stages and flows


def run_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of a script that reads a skill run's directory: the run, trials, stage, profile, --set."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--stage", default="skill_climb_step")
    parser.add_argument("--profile", default="local")
    parser.add_argument("--set", action="append", default=[], dest="sets")
    return parser


def main() -> None:
    parser = run_parser(__doc__)
    parser.add_argument("--round", type=int, default=None)
    args = parser.parse_args()

    from llp.config.pipeline import load_pipeline
    from llp.learn.models import Actor
    from llp.motion.tracking_env import TrackingEnv
    from llp.skills.groups import lanes_env
    from llp.skills.library import course_conditions, skill_references
    from llp.skills.trials import run_trials
    from stages.registry import stage_config
    from stages.skill_expert import skill_env

    pipeline = load_pipeline(args.profile, args.sets)
    cfg = stage_config(pipeline, args.stage)
    aug = stage_config(pipeline, cfg.library)
    refs = skill_references(args.run_dir / "references" / cfg.library, cfg.skill)
    ref = refs[-1]
    phase_a = skill_env(cfg, [ref])
    course = course_conditions()
    rows = {
        "phase A's env: the proposal its tracker followed, in its first pose": phase_a,
        "the kept rollout as the reference": lanes_env(phase_a.task, [ref]),
    }
    task = phase_a.task
    for name, change in (("+ the default standing posture", {"start_posture": "default"}),
                         ("+ the course's friction", {"friction": course["friction"]}),
                         ("+ the course's sideways start", {"lateral_m": course["lateral_m"]})):  # fmt: skip
        task = replace(task, **change)
        rows[name] = lanes_env(task, [ref])
    alone = {"the default standing posture": {"start_posture": "default"},
             "the course's friction": {"friction": course["friction"]},
             "the course's sideways start": {"lateral_m": course["lateral_m"]}}  # fmt: skip
    for what, change in alone.items():
        name = f"phase A's env, only {what}"
        rows[name] = replace(phase_a, task=replace(phase_a.task, **change))  # on the proposal, in its first pose

    checkpoints = args.run_dir / "checkpoints"
    switch = checkpoints / args.stage / "phase-switch.pt"
    latest = torch.load(checkpoints / args.stage / "latest.pt", weights_only=False)["actor"]
    students = [("phase A", torch.load(switch, weights_only=False)["actor"]), ("phase B", latest)] if switch.exists() \
        else [("phase A", latest)]  # fmt: skip
    last_round = args.round or ref.round
    tracker_state = torch.load(checkpoints / cfg.library / f"round{last_round}.pt", weights_only=False)["actor"]
    offset = tracking_offset(aug)
    source = switch.name if switch.exists() else "latest.pt"
    print(f"{ref.id} ({100 * ref.obstacle.height:.1f} cm); phase A from {source}; the tracker of round "
          f"{last_round}; {args.trials} trials each")  # fmt: skip
    print(f"{'start':72s} tracker", *(f"skill ({name})" for name, _ in students))
    for name, env_cfg in rows.items():
        shares = []
        for actor_cfg, state, env_task in (
            (aug.actor, tracker_state, replace(env_cfg.task, action_offset=offset)),
            *((cfg.actor, state, env_cfg.task) for _, state in students),
        ):
            run_cfg = replace(env_cfg, task=env_task)
            env = TrackingEnv(run_cfg, 1)
            actor = Actor(actor_cfg, env.obs_dims(), env.num_actions)
            actor.load_state_dict(state)
            trials = run_trials(run_cfg, actor.eval(), args.trials, seed=7)
            shares.append(sum(t["success"] for t in trials) / len(trials))
        print(f"{name:72s}", "  ".join(f"{100 * x:5.0f}%" for x in shares), flush=True)


def tracking_offset(aug_cfg) -> str:
    """The tracking expert's action offset (its task's, with the stage's overrides)."""
    from llp.motion.tracking import tracking_task

    return tracking_task(aug_cfg.task, aug_cfg.robot, aug_cfg.env).action_offset


if __name__ == "__main__":
    main()
