"""Where along a reference its tracker can take over: a growth round's tracker rolled out from start frames drawn
along the whole motion (as training's reference-state initialisation, with the start's velocities and noise),
its success and its falls binned by the start time. Usage (from the repository root), on the run directory of a
reference-augmentation run (`llp run ... --until-stage reference_augmentation`):

    python docs/experiments/start_profile.py /tmp/RUN/runs/RUN_ID [--round 1] [--episodes 512] [--bin 0.2] \
        [--set stages.reference_augmentation.seed=climb_step_45 ...]

Pass the run's own `--set` values: the tracking task is rebuilt from the config as the stage built it. Success is
the stage's: the end of the motion reached, held, the pelvis within its distance of the reference.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: its stages package


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--round", type=int, default=1)
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--bin", type=float, default=0.2, help="seconds of start time per row")
    parser.add_argument("--profile", default="local")
    parser.add_argument("--set", action="append", default=[], dest="sets")
    args = parser.parse_args()

    from llp.config.pipeline import load_pipeline
    from llp.learn.models import Actor
    from llp.motion.library import ReferenceLibrary
    from llp.motion.tracking import TrackingEnvConfig, tracking_task
    from llp.motion.tracking_env import TrackingEnv
    from stages.registry import stage_config

    cfg = stage_config(load_pipeline(args.profile, args.sets), "reference_augmentation")
    task = replace(tracking_task(cfg.task, cfg.robot, cfg.env), start_at_zero=0.0)
    library = ReferenceLibrary(args.run_dir / "references" / "reference_augmentation")
    ref = library.get(f"{cfg.seed}.r{args.round}", with_motion=True)
    motion = ref.tracked if ref.tracked is not None else ref.qpos  # what the round's tracker followed
    env_cfg = TrackingEnvConfig(task=task, qpos=motion, fps=ref.fps, obstacle=ref.obstacle, contacts=ref.contacts,
                                reference_id=ref.id)  # fmt: skip
    env = TrackingEnv(env_cfg, args.envs, seed=12345)
    actor = Actor(cfg.actor, env.obs_dims(), env.num_actions)
    state = torch.load(args.run_dir / "checkpoints" / "reference_augmentation" / f"round{args.round}.pt",
                       weights_only=False)  # fmt: skip
    actor.load_state_dict(state["actor"])
    actor.eval()

    dt = 1.0 / ref.fps
    starts, wins, ends = [], [], []
    obs, memory = env.reset(), actor.initial_memory(args.envs)
    with torch.no_grad():
        while len(starts) < args.episodes:
            began, frame = env.start_frame.copy(), env.frame.copy()
            mean, memory, _ = actor.step(actor.observe(obs), memory)
            result = env.step(mean)
            obs = result.obs
            done = (result.terminated | result.truncated).numpy()
            if done.any():
                ids = np.flatnonzero(done)
                starts += list(began[ids] * dt)
                wins += list(result.info["episode"]["success"])
                ends += list(np.where(result.terminated.numpy()[ids], (frame[ids] + 1) * dt, np.nan))
    starts, wins, ends = np.array(starts), np.array(wins, dtype=bool), np.array(ends)
    print(f"{ref.id} at {100 * ref.obstacle.height:.1f} cm: {len(starts)} episodes from start frames along its "
          f"{len(motion) * dt:.2f} s; success {100 * wins.mean():.0f}%")  # fmt: skip
    print("start (s)     episodes  success  fell at (s, median / range)")
    edges = np.arange(0.0, len(motion) * dt + args.bin, args.bin)
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = (starts >= lo) & (starts < hi)
        if not inside.any():
            continue
        fell = ends[inside & ~np.isnan(ends)]
        when = f"{np.median(fell):.2f} / {fell.min():.2f}-{fell.max():.2f}" if len(fell) else "-"
        print(f"{lo:4.1f}-{hi:4.1f}     {inside.sum():8d}  {100 * wins[inside].mean():6.0f}%  {when}")


if __name__ == "__main__":
    main()
