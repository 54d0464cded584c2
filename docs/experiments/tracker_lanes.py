"""Can one tracking expert label every height of a grown library? Each round's tracker and the last round's,
on the same trials from the first frame of each round's proposal (the motion that round's tracker was trained
on, as phase A of the skill stage gives it). Phase A learns from the last round's tracker on the tallest
reference only; if that tracker also carries the lower heights, phase A could label all of them. Usage (from the
repository root), on the run directory of a run that grew the library:

    python docs/experiments/tracker_lanes.py /tmp/RUN/runs/RUN_ID [--trials 32] \
        [--set stages.reference_augmentation.seed=climb_step_45 ...]

Pass the run's own `--set` values.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: its stages and flows


def main() -> None:
    from skill_starts import run_parser, tracking_offset

    args = run_parser(__doc__).parse_args()

    from llp.config.pipeline import load_pipeline
    from llp.learn.models import Actor
    from llp.motion.tracking_env import TrackingEnv
    from llp.skills.library import skill_references
    from llp.skills.trials import run_trials
    from stages.registry import stage_config
    from stages.skill_expert import skill_env

    pipeline = load_pipeline(args.profile, args.sets)
    cfg = stage_config(pipeline, args.stage)
    aug = stage_config(pipeline, cfg.library)
    refs = [r for r in skill_references(args.run_dir / "references" / cfg.library, cfg.skill) if r.round > 0]
    offset = tracking_offset(aug)
    rounds = args.run_dir / "checkpoints" / cfg.library
    last = refs[-1].round
    print(f"{args.trials} trials from each proposal's first frame; success as the tracking task's")
    print(f"{'reference':24s} {'its own tracker':>16s} {f'round {last} tracker':>16s}")
    for ref in refs:
        env_cfg = skill_env(cfg, [ref])
        env_cfg = replace(env_cfg, task=replace(env_cfg.task, action_offset=offset, start_posture="reference"))
        env, shares = TrackingEnv(env_cfg, 1), []  # for the observation widths
        for r in (ref.round, last):
            actor = Actor(aug.actor, env.obs_dims(), env.num_actions)
            actor.load_state_dict(torch.load(rounds / f"round{r}.pt", weights_only=False)["actor"])
            trials = run_trials(env_cfg, actor.eval(), args.trials, seed=7)
            shares.append(sum(t["success"] for t in trials) / len(trials))
        name = f"{ref.id} ({100 * ref.obstacle.height:.0f} cm)"
        print(f"{name:24s} {100 * shares[0]:15.0f}% {100 * shares[1]:15.0f}%", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # skill_starts beside it
    main()
