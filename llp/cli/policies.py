"""A policy on fresh trials, in pictures and in video: evaluate, render, play."""

from __future__ import annotations

import argparse
import json
import sys

from llp.cli.common import check_tracking_server, pipeline_config


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Evaluate any registered policy on fresh trials (the evaluate stage's protocol, outside a pipeline)."""
    import dataclasses
    import time
    from pathlib import Path

    from llp.flows.progress import ProgressBar
    from llp.infra.ray_runtime import check_local_ray, init_ray, shutdown_ray
    from llp.skills.protocol import EvaluateConfig, evaluate_policy
    from llp.stages.registry import stage_config

    cfg = pipeline_config(args)
    # the protocol of the pipeline's final evaluation (terrain and courses), else the teacher's (terrain)
    if "evaluate_final" in cfg.stages:
        eval_cfg = stage_config(cfg, "evaluate_final").protocol
    else:
        eval_cfg = stage_config(cfg, "evaluate") if "evaluate" in cfg.stages else EvaluateConfig()
    if args.trials is not None:
        if args.trials < 1:
            print("llp: --trials must be >= 1", file=sys.stderr)
            return 2
        eval_cfg = dataclasses.replace(eval_cfg, trials=args.trials, transition_trials=args.trials)
    run_root = Path(cfg.run_root).resolve()
    out_dir = run_root / "evaluations" / time.strftime("%Y%m%d-%H%M%S")
    check_local_ray(out_dir / "ray", cfg.resources.sim_actors * cfg.resources.sim_actor_cpus)
    check_tracking_server()
    policy = None  # the stand-still baseline
    if args.model != "stand-still":
        from llp.flows import tracking
        from llp.learn.spec import FrozenPolicy

        uri = tracking.registered_model(run_root, cfg.experiment, args.model)  # a missing model fails before Ray
        policy = FrozenPolicy(uri, *tracking.download_policy(uri))
    init_ray(out_dir / "ray")
    try:
        from llp.sim.backend import simulating_on

        with simulating_on(cfg.sim.backend, cfg.sim.device):  # --set sim.backend=warp: the trials on MuJoCo Warp
            report = evaluate_policy(policy, eval_cfg, cfg.resources, args.seed, ProgressBar("evaluate", 1).trials)
    finally:
        shutdown_ray()
    from llp.evaluation.pictures import success_figure

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    success_figure(report).savefig(out_dir / "success.png", dpi=120)
    _print_report(report)
    print(f"report: {out_dir / 'report.json'}\npicture: {out_dir / 'success.png'}")
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "records"}))
    return 0


def _print_report(report: dict) -> None:
    head = ("setting", "difficulty", "trials", "success", "95% CI", "fall", "stuck", "timeout", "track", "stand")
    rows = [head]
    for r in [*report["settings"], {**report, "tile_type": "all", "difficulty": "", "outcomes": report["outcomes"]}]:
        n = sum(r["outcomes"].values())
        rows.append(
            (
                r["tile_type"],
                r["difficulty"],
                str(n),
                f"{100 * r['success_rate']:.1f}%",
                f"[{100 * r['success_ci95'][0]:.1f}, {100 * r['success_ci95'][1]:.1f}]",
                str(r["outcomes"]["fall"]),
                str(r["outcomes"]["stuck"]),
                str(r["outcomes"]["timeout"]),
                f"{r['tracking_kernel']:.3f}",
                f"{r['standing_tracking_kernel']:.3f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    print(f"\n{report['model']}: {report['trials']} trials")
    print("(track: the velocity-tracking kernel; stand: the kernel of a robot standing still on the same commands)")
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))
    regions = report.get("tracking_by_command") or {}
    if regions:
        from llp.sim.command_regions import SIDEWAYS_M_S

        print(f"the tracking trials (flat, rough) by command (sideways: |vy| >= {SIDEWAYS_M_S} m/s):")
        for region, r in regions.items():
            n = sum(r["outcomes"].values())
            print(f"  {region}: {r['outcomes']['success']}/{n} up ({100 * r['success_rate']:.1f}%), "
                  f"{r['outcomes']['fall']} fell")  # fmt: skip
    ends = [(r, r["ends_to_goal_m"]) for r in report["settings"] if r.get("ends_to_goal_m")]
    if ends:
        print("where the goal trials ended (distance left to the goal, m: least / median / most):")
        for r, by_outcome in ends:
            cells = [f"{o} {e['trials']}: {e['min']:.2f} / {e['median']:.2f} / {e['max']:.2f}"
                     for o, e in by_outcome.items()]  # fmt: skip
            print(f"  {r['tile_type']} {r['difficulty']}: " + "   ".join(cells))


def cmd_render(args: argparse.Namespace) -> int:
    from llp.sim.pictures import render_depth, render_depth_noise, render_terrain

    if args.what == "gait":
        return _render_gait(args)
    if args.what == "terrain":
        path = render_terrain(args.out, task=args.task, tile_types=args.tile_types, seed=args.seed)
    elif args.what == "depth-noise":
        path = render_depth_noise(args.out, task=args.task, tile_type=args.tile_type, seed=args.seed)
    else:
        path = render_depth(args.out, task=args.task, tile_type=args.tile_type, seed=args.seed)
    print(path)
    return 0


def _render_gait(args: argparse.Namespace) -> int:
    """A policy's gait as a strip of stick figures, on the evaluation env of the profile."""
    from pathlib import Path

    from llp.evaluation.pictures import gait_strip
    from llp.evaluation.trials import StandStill
    from llp.flows import tracking
    from llp.learn.export import load_pt2
    from llp.sim.env import ParkourEnv
    from llp.skills.protocol import EvaluateConfig
    from llp.stages.registry import stage_config

    if not args.model:
        print("llp: render gait needs --model (a models:/ URI or stand-still)", file=sys.stderr)
        return 2
    cfg = pipeline_config(args)
    eval_cfg = stage_config(cfg, "evaluate") if "evaluate" in cfg.stages else EvaluateConfig()
    program, spec = None, None
    if args.model != "stand-still":
        uri = tracking.registered_model(Path(cfg.run_root).resolve(), cfg.experiment, args.model)
        program, spec = tracking.download_policy(uri)
    joints = None if spec is None else spec.get("action_joints")
    env = ParkourEnv(eval_cfg.env_config(action_joints=joints, policy_spec=spec), 1, seed=args.seed)
    if args.tile_type not in env.cfg.terrain.tile_types:
        print(
            f"llp: --tile-type {args.tile_type!r} is not a tile of the task {env.cfg.terrain.tile_types}",
            file=sys.stderr,
        )
        return 2
    policy = StandStill(env.num_actions) if spec is None else load_pt2(program, spec)
    fig = gait_strip(env, policy, args.tile_type, args.level)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(out)
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    """A video of a registered policy (or the stand-still baseline) on one tile, rendered offscreen."""
    from pathlib import Path

    from llp.skills.protocol import EvaluateConfig
    from llp.stages.registry import stage_config

    out = Path(args.out)
    if out.suffix.lower() != ".mp4":
        print(f"llp: --out {args.out!r}: expected a .mp4 path", file=sys.stderr)
        return 2
    if args.gif and Path(args.gif).suffix.lower() != ".gif":
        print(f"llp: --gif {args.gif!r}: expected a .gif path", file=sys.stderr)
        return 2
    if not args.seconds > 0:
        print("llp: --seconds must be positive", file=sys.stderr)
        return 2
    try:
        width, height = (int(v) for v in args.size.lower().split("x"))
        assert 16 <= width <= 1920 and 16 <= height <= 1080
    except (ValueError, AssertionError):
        print(f"llp: --size {args.size!r}: expected WIDTHxHEIGHT within 16x16..1920x1080", file=sys.stderr)
        return 2
    cfg = pipeline_config(args)
    eval_cfg = stage_config(cfg, "evaluate") if "evaluate" in cfg.stages else EvaluateConfig()
    terrain = eval_cfg.env_config().terrain
    if args.terrain not in terrain.tile_types:
        print(f"llp: --terrain {args.terrain!r} is not a tile of the task {terrain.tile_types}", file=sys.stderr)
        return 2
    if not 0 <= args.level < terrain.num_levels:
        print(f"llp: --level {args.level}: the task's levels are 0..{terrain.num_levels - 1}", file=sys.stderr)
        return 2
    frozen = None
    if args.model != "stand-still":
        from llp.flows import tracking
        from llp.learn.spec import FrozenPolicy

        uri = tracking.registered_model(Path(cfg.run_root).resolve(), cfg.experiment, args.model)
        frozen = FrozenPolicy(uri, *tracking.download_policy(uri))
    from llp.evaluation.video import policy_clip, write_gif, write_mp4

    clip = policy_clip(frozen, eval_cfg, args.terrain, args.level, args.seconds, (width, height), args.seed)
    write_mp4(clip.frames, clip.fps, out)
    outcome = "fell" if clip.fell else f"{clip.distance_m:.2f} m from the spawn"
    print(f"{out}: {len(clip.frames)} frames, {width}x{height} at {clip.fps:.0f} fps; {outcome}")
    if args.gif:
        print(write_gif(clip.frames, clip.fps, args.gif))
    return 0
