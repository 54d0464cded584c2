"""The `llp` command line: run and resume pipelines, inspect them, benchmark, draw pictures.

Heavy imports (torch, ray, prefect, mlflow) happen inside the subcommands, so
`llp --help` and config validation stay fast.
"""

from __future__ import annotations

import argparse
import json
import sys


def _print_json(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")


def cmd_bench(args: argparse.Namespace) -> int:
    if args.what == "sim":
        from llp.bench.sim import run

        result = run(robot=args.robot, num_envs=args.num_envs, steps=args.steps)
    elif args.what == "learner":
        from llp.bench.learner import run

        result = run()
    elif args.what == "rllib":
        from llp.bench.rllib import run

        result = run(iterations=args.iterations, num_envs=args.num_envs)
    else:
        from llp.bench.pipeline import run

        result = run()
    _print_json(result, args.json)
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from llp.sim.pictures import render_depth, render_terrain

    if args.what == "terrain":
        path = render_terrain(args.out, task=args.task, tile_types=args.tile_types, seed=args.seed)
    else:
        path = render_depth(args.out, task=args.task, tile_type=args.tile_type, seed=args.seed)
    print(path)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llp", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="measure throughput (last line: one JSON object with --json)")
    b.add_argument("what", choices=["sim", "learner", "rllib", "pipeline"])
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--robot", default="lightbot0_like", help="sim: robot config name (conf/robot/)")
    b.add_argument("--num-envs", type=int, default=64)
    b.add_argument("--steps", type=int, default=200, help="sim: policy steps per measurement")
    b.add_argument("--iterations", type=int, default=6, help="rllib: training iterations per library")
    b.set_defaults(fn=cmd_bench)

    r = sub.add_parser("render", help="write a PNG of a terrain layout or of a depth image")
    r.add_argument("what", choices=["terrain", "depth"])
    r.add_argument("--out", required=True, help="PNG path to write")
    r.add_argument("--task", default="locomotion")
    r.add_argument("--tile-types", nargs="*", default=None, help="terrain: tile types (default: all)")
    r.add_argument("--tile-type", default="climb", help="depth: the tile the robot stands on")
    r.add_argument("--seed", type=int, default=0)
    r.set_defaults(fn=cmd_render)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from llp.config.schema import ConfigError

    try:
        return args.fn(args)
    except ConfigError as err:
        print(f"llp: config error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
