"""Comparing runs: the ablations, a sweep of them (Ray Tune), runs side by side."""

from __future__ import annotations

import argparse
import os
import sys

from llp.cli.common import check_tracking_server


def cmd_ablations(args: argparse.Namespace) -> int:
    from llp.config.ablation import LEFT_OUT, available, load_ablation

    for name in available():
        a = load_ablation(name)
        print(f"{name}  ({a.stage})\n    {a.description}\n    sets: {'; '.join(a.sets)}")
    print("\nleft out (their stages are absent):")
    for name, why in LEFT_OUT.items():
        print(f"  {name}: {why}")
    return 0


def cmd_ablate(args: argparse.Namespace) -> int:
    """Ablations x seeds as one Ray Tune sweep of pipeline runs; prints one row per trial."""
    import time
    from pathlib import Path

    from llp.config.ablation import load_ablation
    from llp.flows.ablate import BASELINE, check_sweep_id, run_sweep
    from llp.flows.run_request import check_run_root
    from llp.stages.registry import load_pipeline

    root = Path(args.run_root)
    check_run_root(str(root))
    if args.resume:
        sweep, names, seeds = args.resume, [], []
        check_sweep_id(sweep)
    else:
        if not args.names:
            raise ValueError("name at least one ablation (see `llp ablations`)")
        if args.seeds < 1:
            raise ValueError(f"--seeds {args.seeds}: must be >= 1")
        if args.concurrent < 1:
            raise ValueError(f"--concurrent {args.concurrent}: must be >= 1")
        cfg = load_pipeline(args.profile, list(args.set) + [f"run_root={root}"])  # every trial's config is checked
        if args.until_stage or args.from_stage:
            from llp.flows.run_request import select_stages

            select_stages(list(cfg.stages), args.from_stage, args.until_stage)
        for name in args.names:  # before the sweep starts
            if name == BASELINE:
                raise ValueError(f"{BASELINE!r} is always in the sweep (unless --no-baseline); name ablations")
            load_pipeline(args.profile, load_ablation(name).sets + list(args.set) + [f"run_root={root}"])
        names = ([] if args.no_baseline else [BASELINE]) + list(dict.fromkeys(args.names))
        seeds = list(range(args.seeds))
        sweep = args.sweep_id or time.strftime("sweep-%Y%m%d-%H%M%S")
        check_sweep_id(sweep)
        print(f"[llp] sweep {sweep}: {len(names)} setting(s) x {len(seeds)} seed(s) = {len(names) * len(seeds)} "
              f"pipeline runs ({args.profile}), {args.concurrent} at a time; state in {root}/sweeps/{sweep}",
              flush=True)  # fmt: skip
    rows = run_sweep(names, seeds, args.profile, list(args.set), root, sweep, resume=bool(args.resume),
                     concurrent=args.concurrent, until_stage=args.until_stage,
                     from_stage=args.from_stage)  # fmt: skip
    print("| setting | seed | run | trial | stages executed |\n|---|---|---|---|---|")
    for r in rows:
        ran = ", ".join(f"{k} {v}" for k, v in r["executions"].items()) or "-"
        print(f"| {r['ablation']} | {r['seed']} | {r['run_id']} | {r['status']} | {ran} |")
    failed = [r for r in rows if r["status"] != "done"]
    for r in failed:
        print(f"llp: trial {r['run_id']} failed: {r['error']}", file=sys.stderr)
    if failed:
        print(f"llp: `llp ablate --resume {sweep} --run-root {root}` runs only the unfinished trials", file=sys.stderr)
        return 1
    print(f"compare them: `llp compare llp.sweep={sweep} --run-root {root}`")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Pipeline runs side by side from MLflow: Markdown and HTML with plots, logged as a comparison run."""
    import tempfile
    import time
    from pathlib import Path

    import mlflow
    from mlflow import MlflowClient

    from llp.flows.compare import collect, find_runs, log_comparison, write_report

    check_tracking_server()
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        store = Path(args.run_root) / "mlflow.db"
        if not store.is_file():
            raise ValueError(f"no MLFLOW_TRACKING_URI and no local MLflow store at {store}: set one or --run-root")
        uri = f"sqlite:///{store.resolve()}"
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(uri)
    runs = find_runs(client, args.experiment, args.runs)
    out = Path(args.out or Path(args.run_root) / "compare" / time.strftime("%Y%m%d-%H%M%S"))
    with tempfile.TemporaryDirectory() as tmp:
        results = [collect(client, run, Path(tmp)) for run in runs]
    missing = [r.run_id for r in results if r.report is None and r.student_report is None]
    if len(missing) == len(results):
        raise ValueError(f"none of {', '.join(missing)} has an evaluation report (run its evaluate stage first)")
    paths = write_report(results, out)
    comparison = log_comparison(client, args.experiment, results, out)
    print(paths["markdown"].read_text().split("## Learning curves")[0].rstrip())
    if missing:
        print(f"\n(no evaluation report yet: {', '.join(missing)})")
    print(f"\nreport: {paths['html']} and {paths['markdown']}; MLflow comparison run {comparison} (artifacts: report/)")
    return 0
