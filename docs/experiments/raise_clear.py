"""Which of a growth round's successful rollouts could the next round grow: the round's trials replayed from its
checkpoint (the stage's trial seed: the same trials), each successful rollout checked as the stage checks the
one it keeps, then raised by the next step and checked as a proposal. Usage (from the repository root), on the
run directory of a reference-augmentation run (`llp run ... --until-stage reference_augmentation`):

    python docs/experiments/raise_clear.py /tmp/RUN/runs/RUN_ID [--round 1] [--no-clear] \
        [--set stages.reference_augmentation.seed=climb_step_45 ...]

Pass the run's own `--set` values. `--no-clear` raises without keeping the body off the taller box (the growth
before the collision-avoiding IK). `--kept` replays nothing: it raises the round's kept rollout (the library's
entry) with and without that clearance and says where the two proposals differ.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: its stages and flows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--round", type=int, default=1)
    parser.add_argument("--no-clear", action="store_true")
    parser.add_argument("--kept", action="store_true")
    parser.add_argument("--profile", default="local")
    parser.add_argument("--set", action="append", default=[], dest="sets")
    args = parser.parse_args()

    from flows.stage_run import stage_seed
    from llp.config.files import named
    from llp.config.pipeline import load_pipeline
    from llp.config.schema import build
    from llp.learn.models import Actor
    from llp.motion.library import ReferenceLibrary
    from llp.motion.retarget import Retargeter
    from llp.motion.scene import SceneModel
    from llp.motion.seeds import physics_checks, seed_retarget_config, seed_spec
    from llp.motion.tracking import TrackingEnvConfig, tracking_task
    from llp.motion.tracking_env import TrackingEnv
    from llp.sim.robot import RobotConfig
    from llp.skills.trials import run_trials
    from stages.reference_augmentation import _proposal
    from stages.registry import stage_config

    pipeline = load_pipeline(args.profile, args.sets)
    cfg = stage_config(pipeline, "reference_augmentation")
    if args.kept:
        return kept_with_and_without_clearance(args.run_dir, cfg, args.round)
    task = tracking_task(cfg.task, cfg.robot, cfg.env)
    library = ReferenceLibrary(args.run_dir / "references" / "reference_augmentation")
    ref = library.get(f"{cfg.seed}.r{args.round}", with_motion=True)
    env_cfg = TrackingEnvConfig(task=task, qpos=ref.tracked, fps=ref.fps, obstacle=ref.obstacle,
                                contacts=ref.contacts, reference_id=ref.id)  # fmt: skip
    env = TrackingEnv(env_cfg, 1)
    actor = Actor(cfg.actor, env.obs_dims(), env.num_actions)
    state = torch.load(args.run_dir / "checkpoints" / "reference_augmentation" / f"round{args.round}.pt",
                       weights_only=False)  # fmt: skip
    actor.load_state_dict(state["actor"])
    actor.eval()
    trials = run_trials(
        env_cfg, actor, cfg.trials, seed=stage_seed(pipeline, "reference_augmentation") + 7919 * args.round
    )
    wins = sorted((t for t in trials if t["success"]), key=lambda t: t["tracking_error_m"])
    print(f"{ref.id} at {100 * ref.obstacle.height:.1f} cm: {len(wins)} of {len(trials)} trials succeed")

    spec = seed_spec(cfg.seed)
    rcfg = seed_retarget_config(spec)
    robot = build(RobotConfig, named("robot", cfg.robot), "robot")
    grower = Retargeter(seed_retarget_config(spec, growth=True), robot)
    if args.no_clear:
        grower.clear_of = lambda obstacle: grower  # the raise's IK without the box
    scene = SceneModel(robot, ref.obstacle, rcfg.contact_frames)
    clean = grows = 0
    for k, win in enumerate(wins):
        motion = win["qpos"][: len(ref.tracked)]
        own = physics_checks(scene, motion, ref.fps, ref.contacts, rcfg)
        raised = _proposal(grower, rcfg, robot, ref, cfg.height_step, (motion, ref.obstacle))[2]
        ok_own, ok_raise = all(a.passed for a in own), all(a.passed for a in raised)
        clean, grows = clean + ok_own, grows + (ok_own and ok_raise)
        why = lambda checks: "; ".join(a.reason for a in checks if not a.passed) or "passes"  # noqa: E731
        print(f"{k + 1:3d}  tracking error {100 * win['tracking_error_m']:.1f} cm  own checks: {why(own)}  |  "
              f"raised {cfg.height_step} m: {why(raised)}")  # fmt: skip
    print(f"{clean} of {len(wins)} pass their own checks; {grows} of those raise clear")


def kept_with_and_without_clearance(run_dir: Path, cfg, round_: int) -> None:
    """The next round's proposal from round ``round_``'s kept rollout, raised with and without keeping the body
    off the taller box: each one's checks, and the frames and joints where they differ."""
    import numpy as np

    from llp.config.files import named
    from llp.config.schema import build
    from llp.motion.library import ReferenceLibrary
    from llp.motion.retarget import Retargeter
    from llp.motion.seeds import seed_retarget_config, seed_spec
    from llp.sim.robot import RobotConfig
    from stages.reference_augmentation import _proposal

    ref = ReferenceLibrary(run_dir / "references" / "reference_augmentation").get(
        f"{cfg.seed}.r{round_}", with_motion=True
    )
    spec = seed_spec(cfg.seed)
    rcfg, robot = seed_retarget_config(spec), build(RobotConfig, named("robot", cfg.robot), "robot")
    raised = {}
    for clear in (True, False):
        grower = Retargeter(seed_retarget_config(spec, growth=True), robot)
        if not clear:
            grower.clear_of = lambda obstacle, g=grower: g
        qpos, _, checks = _proposal(
            grower, rcfg, robot, ref, cfg.height_step, (ref.qpos[: len(ref.tracked)], ref.obstacle)
        )
        raised[clear] = qpos
        verdict = "; ".join(a.reason for a in checks if not a.passed) or "passes"
        print(f"{ref.id} raised {cfg.height_step} m {'with' if clear else 'without'} clearance: {verdict}")
    diff = np.abs(raised[True] - raised[False])
    frames = np.flatnonzero(diff.max(axis=1) > 0.005)
    print(f"they differ by more than 0.005 in {len(frames)} of {len(diff)} frames"
          + (f" ({frames[0] / ref.fps:.2f}-{frames[-1] / ref.fps:.2f} s), at most {diff.max():.3f} in qpos column "
             f"{int(diff.max(axis=0).argmax())}" if len(frames) else ""))  # fmt: skip


if __name__ == "__main__":
    main()
