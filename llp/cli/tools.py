"""Benchmarks, motion seeds and reference libraries: bench, seeds, refs."""

from __future__ import annotations

import argparse
import json
import sys

from llp.cli.common import print_result


def cmd_bench(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if args.what == "gpu" else "cpu")
    if args.what == "sim":
        from llp.bench.sim import run

        result = run(robot=args.robot, num_envs=args.num_envs, steps=args.steps, backend=args.backend,
                     device=device, depth_steps=min(40, args.steps))  # fmt: skip
    elif args.what == "learner":
        from llp.bench.learner import run

        result = run(device=device, num_envs=args.num_envs)
    elif args.what == "gpu":
        from llp.bench.gpu import run

        try:
            counts = tuple(int(c) for c in args.counts.split(","))
        except ValueError:
            raise SystemExit(f"--counts {args.counts!r}: env counts separated by commas, such as 4096,16384") from None
        if not counts or min(counts) < 1:
            raise SystemExit(f"--counts {args.counts!r}: every env count must be at least 1")
        try:
            result = run(device=device, num_envs=counts, steps=args.steps, iterations=args.iterations)
        except ValueError as e:
            raise SystemExit(str(e)) from None
    elif args.what == "rllib":
        from llp.bench.rllib import run

        result = run(iterations=args.iterations, num_envs=args.num_envs)
    elif args.what == "faults":
        from llp.bench.faults import run

        result = run(args.scenario or None)
        if args.json:
            print(json.dumps(result))
        else:
            for name, r in result["scenarios"].items():
                verdict = "recovered" if r["recovered"] else "NOT RECOVERED"
                print(f"{name:<17} {verdict:<14} recovery {r['recovery_s']} s, iterations lost "
                      f"{r['iterations_lost']}  ({r['detail']})")  # fmt: skip
        return 0 if result["all_recovered"] else 1
    else:
        from llp.bench.pipeline import run

        result = run()
    print_result(result, args.json)
    return 0


def cmd_seeds(args: argparse.Namespace) -> int:
    """Author the shipped motion seeds, check them, and store them as round 0 of a reference library."""
    from pathlib import Path

    from llp.motion.library import ReferenceLibrary
    from llp.motion.seeds import seed_reference, seed_spec, shipped_seeds

    names = args.names or shipped_seeds()
    specs = [seed_spec(n) for n in names]  # every seed validated before any is solved
    library = ReferenceLibrary(args.out)
    for spec in specs:
        ref = seed_reference(spec, physics=not args.kinematic)
        if any(e.id == ref.id for e in library.entries):
            print(f"{ref.id}: already in {args.out}, kept")
        else:
            library.add(ref)
        words = {True: "passed", None: "not run", False: "FAILED"}
        verdicts = "; ".join(f"{a.name}: {words[a.passed]}{' (' + a.reason + ')' if a.passed is False else ''}"
                             for a in ref.acceptance)  # fmt: skip
        print(f"{ref.id}: {len(ref.qpos)} frames at {ref.fps:g} fps over a {100 * ref.obstacle.height:.0f} cm "
              f"{ref.obstacle.kind} box; {verdicts}")  # fmt: skip
        if args.pictures:
            from llp.config.files import named
            from llp.config.schema import build
            from llp.motion.pictures import reference_strip
            from llp.sim.robot import RobotConfig

            robot_cfg = build(RobotConfig, named("robot", spec.robot), "robot")
            print(f"  picture: {reference_strip(ref, robot_cfg, Path(args.pictures) / f'{ref.id}.png')}")
    print(f"library: {args.out} ({len(library)} entries); browse it with `llp refs {args.out}`")
    return 0 if all(library.get(s.id + ".r0").accepted for s in specs) else 1


def cmd_refs(args: argparse.Namespace) -> int:
    """The entries of a reference library with their provenance."""
    from pathlib import Path

    from llp.motion.library import INDEX, LibraryError, ReferenceLibrary

    folder = Path(args.library)
    if not (folder / INDEX).is_file():
        grown = Path(args.run_root) / args.library / "references" / "reference_augmentation"
        if not (grown / INDEX).is_file():
            print(f"llp: {args.library!r} is neither a reference library (no {INDEX}) nor a pipeline run under "
                  f"{args.run_root}/ whose reference_augmentation stage wrote one; `llp seeds --out DIR` or "
                  f"`llp run --until-stage reference_augmentation` makes one", file=sys.stderr)  # fmt: skip
            return 2
        folder = grown
    try:
        library = ReferenceLibrary(folder)
    except LibraryError as err:
        print(f"llp: {err}", file=sys.stderr)
        return 2
    if args.lineage:
        try:
            chain = library.lineage(args.lineage)
        except KeyError as err:
            print(f"llp: {err.args[0]}", file=sys.stderr)
            return 2
        print(" <- ".join(f"{e.id} (round {e.round}, {round(100 * e.obstacle.height, 1):g} cm)" for e in chain))
        return 0
    print(library.table())
    return 0
