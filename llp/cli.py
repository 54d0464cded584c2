"""The `llp` command line: run and resume pipelines, inspect them, benchmark, draw pictures.

Heavy imports (torch, ray, prefect, mlflow) happen inside the subcommands, so
`llp --help` and config validation stay fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def _print_json(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")


def _load(args: argparse.Namespace):
    from llp.stages.registry import load_pipeline

    sets = list(args.set)
    if getattr(args, "ablation", None):
        from llp.config.ablation import load_ablation

        sets = load_ablation(args.ablation).sets + sets  # the user's --set still wins
    return load_pipeline(args.profile, sets)


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from llp.config.pipeline import resolved

    print(yaml.safe_dump(resolved(_load(args)), sort_keys=False), end="")
    return 0


def cmd_stages(args: argparse.Namespace) -> int:
    from llp.stages.registry import STAGES, stage_config, stage_kind, stage_spec

    cfg = _load(args)
    for name in cfg.stages:  # the pipeline's stages in the order they run, then the kinds it does not use
        spec, kind = stage_spec(cfg, name), stage_kind(cfg, name)
        outputs = ", ".join(f"{k} -> {v}" for k, v in spec.outputs.items()) or "metrics and pictures"
        what = "in pipeline" if kind == name else f"in pipeline, kind {kind}"
        inputs = spec.inputs(stage_config(cfg, name)) or "none"
        print(f"{name}  ({what})\n    {spec.description}\n    inputs: {inputs}; outputs: {outputs}")
    used = {stage_kind(cfg, name) for name in cfg.stages}
    for kind, spec in STAGES.items():
        if kind not in used:
            print(f"{kind}  (a kind of stage not in this profile)\n    {spec.description}")
    if cfg.skills:
        print("skills: " + "; ".join(f"{s} (references: {d['references']}, expert: {d['expert']})"
                                     for s, d in cfg.skills.items()))  # fmt: skip
    return 0


def _execute(cfg, run_id: str, args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from llp.flows.pipeline import prepare_prefect, run_pipeline
    from llp.flows.run_request import check_run_id, check_run_root, select_stages
    from llp.infra.ray_runtime import check_local_ray

    # what was asked is checked first: the run's name and folder, then the stage selection
    check_run_id(run_id)
    check_run_root(cfg.run_root)
    bad_tags = [t for t in getattr(args, "tag", []) if "=" not in t or not t.split("=", 1)[0].strip()]
    if bad_tags:
        raise ValueError(f"--tag {bad_tags[0]!r}: expected KEY=VALUE (an MLflow tag on the pipeline run)")
    if args.cluster:
        os.environ["RAY_ADDRESS"] = args.cluster
    selected = select_stages(list(cfg.stages), args.from_stage, args.until_stage, args.force)
    from llp.flows.context import parse_faults
    from llp.stages.registry import check_layout

    parse_faults(os.environ.get("LLP_INJECT_FAULT", ""), list(cfg.stages))  # a misspelled drill stops here

    check_layout(cfg, selected)
    run_root = Path(cfg.run_root)
    # a path Ray cannot use, more CPUs or GPUs than there are, or a cluster that does not answer: fail before any work
    check_local_ray(run_root.resolve() / run_id / "ray", cfg.resources.cpu_demand(), cfg.resources.custom_resources(),
                    cfg.resources.gpu_demand())  # fmt: skip
    _check_tracking_server()
    service = prepare_prefect(run_root)
    # a server this command started, or adopted from a run that was killed, is stopped at the end
    started_here = service is not None and (service.proc is not None or service.adopted)
    try:
        if (run_root / run_id / "ledger.json").exists():  # resuming a killed run: record that it crashed
            from llp.flows.run_state import reconcile

            reconcile(run_root.resolve(), run_id, prefect=True)
        tags = dict(t.split("=", 1) for t in getattr(args, "tag", []))
        if getattr(args, "ablation", None):
            tags["llp.ablation"] = args.ablation
        tags = tags or None
        result = run_pipeline(
            cfg, run_id, from_stage=args.from_stage, until_stage=args.until_stage, force=args.force, tags=tags
        )
    except (KeyboardInterrupt, SystemExit) as err:  # Ctrl-C or SIGTERM: the ledger and MLflow already say so
        code = 130 if isinstance(err, KeyboardInterrupt) else (err.code if isinstance(err.code, int) else 1)
        code = 143 if code == 15 else code  # Ray's handler exits with the bare signal number
        from llp.infra import processes

        if processes.SIGTERM_RECEIVED:  # whatever a library made of the exception on its way up
            code = 143
        print(f"\nllp: pipeline run {run_id} interrupted; `llp resume {run_id}` continues it", file=sys.stderr)
        return code
    finally:
        if started_here and not args.keep_servers:
            service.stop()
        elif started_here:
            from llp.infra.services import keep_prefect

            keep_prefect(run_root.resolve() / "prefect")
    _print_status(run_root, run_id)
    if result.state == "completed":
        for stage, outputs in result.outputs.items():
            for name, uri in outputs.items():
                print(f"\n{stage} -> {name}: {uri} (alias run-{run_id})")
        print(f"look: `llp status {run_id}`; MLflow as linked above (plots/, evaluation/ artifacts)")
    if result.state != "completed":
        print(f"\nllp: pipeline run {run_id} failed: {result.error}", file=sys.stderr)
        print(f"llp: fix the cause, then `llp resume {run_id}` re-runs only unfinished stages", file=sys.stderr)
        return 1
    return 0


def _check_tracking_server() -> None:
    """An MLflow server named by MLFLOW_TRACKING_URI must answer now, not after minutes of retries."""
    import os

    from llp.infra.services import healthy

    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if uri.startswith(("http://", "https://")) and not any(healthy(uri.rstrip("/") + "/health") for _ in range(3)):
        raise ValueError(
            f"MLFLOW_TRACKING_URI={uri}: no MLflow server answers there (GET /health); start it or unset it"
        )


def cmd_run(args: argparse.Namespace) -> int:
    from llp.flows.pipeline import new_run_id

    cfg = _load(args)  # validates everything before any Ray, Prefect or MLflow state exists
    return _execute(cfg, args.run_id or new_run_id(), args)


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
    import os
    import tempfile
    import time
    from pathlib import Path

    import mlflow
    from mlflow import MlflowClient

    from llp.flows.compare import collect, find_runs, log_comparison, write_report

    _check_tracking_server()
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


def cmd_submit(args: argparse.Namespace) -> int:
    """Send `llp run` to a Ray cluster's job server; the driver runs on the head."""
    from llp.flows.pipeline import new_run_id
    from llp.flows.run_request import check_run_id, select_stages
    from llp.flows.submit import entrypoint, passed_env, submit

    if args.resume and not args.run_id:
        raise ValueError("--resume continues a run: name it with --run-id")
    cfg = _load(args)  # the same checks as `llp run`, here, before anything is sent
    run_id = check_run_id(args.run_id or new_run_id())
    select_stages(list(cfg.stages), None, args.until_stage, args.force)
    env = passed_env(args.env)
    command = entrypoint(args.profile, args.set, run_id, args.until_stage, args.force, resume=args.resume)
    return submit(args.address, command, run_id, env, args.follow)


def cmd_resume(args: argparse.Namespace) -> int:
    from pathlib import Path

    import yaml

    from llp.config.pipeline import PipelineConfig, apply_sets
    from llp.config.schema import build
    from llp.flows.run_request import check_run_id
    from llp.stages.registry import check_pipeline

    check_run_id(args.run, label="run")
    root = Path(args.run_root)
    config_file = root / args.run / "config.yaml"
    if not config_file.exists():
        runs = sorted(p.parent.name for p in root.glob("*/config.yaml"))
        print(f"llp: no pipeline run {args.run!r} under {root}/ (runs: {', '.join(runs) or 'none'})", file=sys.stderr)
        return 2
    data = yaml.safe_load(config_file.read_text())
    # the run lives where it was found: a relative run_root in its config would start it over in this folder
    data["run_root"] = str(root.resolve())
    cfg = check_pipeline(build(PipelineConfig, apply_sets(data, args.set)))
    _keep_selection(root / args.run / "ledger.json", list(cfg.stages), args)
    return _execute(cfg, args.run, args)


def _keep_selection(ledger_file, stages: list[str], args: argparse.Namespace) -> None:
    """A resumed run keeps the stages it was started with, unless --from-stage or --until-stage is given again
    (then those choose, as for `llp run`). Before, a run of one stage resumed as the whole pipeline."""
    from llp.flows.ledger import Ledger

    if args.from_stage is not None or args.until_stage is not None:  # either given: the selection is the user's
        return
    chosen = Ledger(ledger_file).data.get("stages_selected") if ledger_file.exists() else None
    if not chosen or not set(chosen) <= set(stages):
        return
    if chosen[0] != stages[0]:
        args.from_stage = chosen[0]
    if chosen[-1] != stages[-1]:
        args.until_stage = chosen[-1]
    if chosen != stages:
        print(f"[llp] resuming the stages run {args.run} was started with: {chosen[0]} .. {chosen[-1]} "
              "(--from-stage / --until-stage choose others)")  # fmt: skip


def _print_status(run_root, run_id: str) -> None:
    import datetime

    from llp.flows.ledger import Ledger
    from llp.flows.run_state import driver_alive

    ledger = Ledger(run_root / run_id / "ledger.json").data
    state = ledger.get("state")
    if state == "running" and driver_alive(ledger.get("driver")) is None and ledger.get("driver"):
        state = f"running (on {ledger['driver']['host']}, pid {ledger['driver']['pid']})"
    elif state in ("failed", "crashed", "interrupted") and ledger.get("error"):
        state = f"{state}: {ledger['error'][:200]}"
    print(f"\npipeline run {run_id}  profile {ledger.get('profile')}  state {state}")
    print(f"Prefect flow run: {ledger.get('prefect_flow_run')}  ({ledger.get('prefect_api')})")
    print(f"MLflow: {ledger.get('mlflow_link')}")
    print(f"Ray logs: {ledger.get('ray_logs', '-')}")
    rows = [("stage", "state", "duration", "output", "runs", "MLflow")]
    for name, st in ledger.get("stages", {}).items():
        dur = ""
        if st.get("ended") and st.get("started"):
            dur = str(datetime.timedelta(seconds=int(st["ended"] - st["started"])))
        output = ", ".join(st.get("outputs", {}).values()) or "-"
        link = st.get("mlflow_link") or ""  # a clickable URL with a server, else the run id
        shown = link if link.startswith("http") else (st.get("mlflow_run") or "-")
        rows.append((name, st.get("state", "?"), dur, output, str(st.get("executions", 0)), shown))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def _find_run(root, run: str | None) -> tuple[str | None, int]:
    """The run ``run`` (default: the latest) under ``root``, or None and an exit status after saying why."""
    runs = sorted((p.parent.name for p in root.glob("*/ledger.json")), key=lambda r: (root / r).stat().st_mtime)
    if not runs:
        print(f"llp: no pipeline runs under {root}/", file=sys.stderr)
        return None, 1
    if (run or runs[-1]) not in runs:
        print(f"llp: no pipeline run {run!r} under {root}/ (runs: {', '.join(runs)})", file=sys.stderr)
        return None, 2
    return run or runs[-1], 0


def cmd_status(args: argparse.Namespace) -> int:
    from pathlib import Path

    root = Path(args.run_root)
    run, code = _find_run(root, args.run)
    if run is None:
        return code
    from llp.flows.ledger import Ledger
    from llp.flows.run_state import crashed, reconcile

    if crashed(Ledger(root / run / "ledger.json")):
        reconcile(root.resolve(), run)  # ledger and MLflow say crashed from now on
    _print_status(root, run)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    """Prefect's and MLflow's UIs for one run; stops what it started on Ctrl-C (or after --for seconds)."""
    import time
    from pathlib import Path

    root = Path(args.run_root)
    run, code = _find_run(root, args.run)
    if run is None:
        return code
    import signal

    from llp.flows.ui import open_ui

    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background (SIG_IGN)

    print(f"llp: starting the UIs for run {run} ...", flush=True)
    session = open_ui(root, run)
    try:
        print(f"Prefect: {session.prefect_url}\nMLflow:  {session.mlflow_url}", flush=True)
        what = ", ".join(s.name + (" (left by a killed run)" if s.adopted else "") for s in session.started)
        what = what or "nothing (both servers were already up)"
        print(f"started here: {what}; Ctrl-C stops it", flush=True)
        deadline = time.time() + args.seconds if args.seconds else None
        while deadline is None or time.time() < deadline:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        session.close()
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Evaluate any registered policy on fresh trials (the evaluate stage's protocol, outside a pipeline)."""
    import dataclasses
    import time
    from pathlib import Path

    from llp.flows.progress import ProgressBar
    from llp.infra.ray_runtime import check_local_ray, init_ray, shutdown_ray
    from llp.skills.protocol import EvaluateConfig, evaluate_policy
    from llp.stages.registry import stage_config

    cfg = _load(args)
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
    _check_tracking_server()
    policy = None  # the stand-still baseline
    if args.model != "stand-still":
        from llp.flows import tracking
        from llp.learn.spec import FrozenPolicy

        tracking.configure(run_root, cfg.experiment, create=False)
        uri = tracking.resolve_model_uri(args.model)  # a missing model fails here, before Ray starts
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
    ends = [(r, r["ends_to_goal_m"]) for r in report["settings"] if r.get("ends_to_goal_m")]
    if ends:
        print("where the goal trials ended (distance left to the goal, m: least / median / most):")
        for r, by_outcome in ends:
            cells = [f"{o} {e['trials']}: {e['min']:.2f} / {e['median']:.2f} / {e['max']:.2f}"
                     for o, e in by_outcome.items()]  # fmt: skip
            print(f"  {r['tile_type']} {r['difficulty']}: " + "   ".join(cells))


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
    _print_json(result, args.json)
    return 0


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
    cfg = _load(args)
    eval_cfg = stage_config(cfg, "evaluate") if "evaluate" in cfg.stages else EvaluateConfig()
    program, spec = None, None
    if args.model != "stand-still":
        tracking.configure(Path(cfg.run_root).resolve(), cfg.experiment, create=False)
        program, spec = tracking.download_policy(tracking.resolve_model_uri(args.model))
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


def cmd_seeds(args: argparse.Namespace) -> int:
    """Author the shipped motion seeds, check them, and store them as round 0 of a reference library."""
    from pathlib import Path

    from llp.motion.library import ReferenceLibrary
    from llp.motion.seeds import seed_reference, seed_spec, shipped_seeds

    names = args.names or shipped_seeds()
    specs = [seed_spec(n) for n in names]  # every seed validated before any is solved
    library = ReferenceLibrary(args.out)
    for spec in specs:
        ref = seed_reference(spec)
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
    cfg = _load(args)
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

        tracking.configure(Path(cfg.run_root).resolve(), cfg.experiment, create=False)
        uri = tracking.resolve_model_uri(args.model)  # a missing model fails here, before any rendering
        frozen = FrozenPolicy(uri, *tracking.download_policy(uri))
    from llp.evaluation.video import policy_clip, write_gif, write_mp4

    clip = policy_clip(frozen, eval_cfg, args.terrain, args.level, args.seconds, (width, height), args.seed)
    write_mp4(clip.frames, clip.fps, out)
    outcome = "fell" if clip.fell else f"{clip.distance_m:.2f} m from the spawn"
    print(f"{out}: {len(clip.frames)} frames, {width}x{height} at {clip.fps:.0f} fps; {outcome}")
    if args.gif:
        print(write_gif(clip.frames, clip.fps, args.gif))
    return 0


PROFILE_HELP = (
    "conf/profile/<name>.yaml. local (the default): a walking teacher, the climb reference grown two rounds, "
    "the evaluation, the climb-and-step expert, the merge of both, transition training, a depth student and its "
    "export, about 180 min on 2 cores; smoke: "
    "every stage for a few iterations, about 4 min (the tests); cluster: the paper's budgets, for a Ray cluster "
    "with GPUs (days)"
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llp", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def pipeline_options(q: argparse.ArgumentParser, profile: bool = True) -> None:
        if profile:
            q.add_argument("--profile", default="local", help=PROFILE_HELP)
        q.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY.PATH=VALUE",
            help="override one config value (repeatable), e.g. stages.locomotion_teacher.iterations=10",
        )

    def execution_options(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--cluster",
            metavar="ADDRESS",
            help="run the stages' actors on the Ray cluster whose head is at ADDRESS (HOST:PORT of its GCS; "
            "the same as RAY_ADDRESS); this process stays the driver",
        )
        q.add_argument("--from-stage", help="start at this stage (earlier outputs come from the registry)")
        q.add_argument("--until-stage", help="stop after this stage")
        q.add_argument("--force", action="append", default=[], metavar="STAGE", help="re-run STAGE even if cached")
        q.add_argument(
            "--keep-servers",
            action="store_true",
            help="leave the Prefect server this command started running for later commands",
        )

    q = sub.add_parser("run", help="run the LLP pipeline (cached stages are skipped)")
    pipeline_options(q)
    execution_options(q)
    q.add_argument("--run-id", help="name of the run (default: a timestamp)")
    q.add_argument("--ablation", metavar="NAME",
                   help="change one training condition (conf/ablation/NAME.yaml; see `llp ablations`)")  # fmt: skip
    q.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra MLflow tag on the pipeline run (repeatable), e.g. llp.sweep=S1")  # fmt: skip
    q.set_defaults(fn=cmd_run)

    q = sub.add_parser("ablate", help="run ablations x seeds as one Ray Tune sweep that shares untouched stages")
    q.add_argument("names", nargs="*", help="ablations (see `llp ablations`); the sweep adds the baseline")
    q.add_argument("--seeds", type=int, default=1, metavar="K", help="seeds 0..K-1 per setting (default 1)")
    q.add_argument("--profile", default="local", help=PROFILE_HELP)
    q.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override one config value in every trial (repeatable)")  # fmt: skip
    q.add_argument("--run-root", default="runs", help="where the trials' runs and the sweep live (default runs)")
    q.add_argument("--sweep-id", help="name of the sweep (default: a timestamp)")
    q.add_argument("--resume", metavar="SWEEP", help="continue an interrupted sweep: only unfinished trials run")
    q.add_argument("--concurrent", type=int, default=1, metavar="N",
                   help="trials at once (default 1: on one machine, trials would share its cores)")  # fmt: skip
    q.add_argument("--no-baseline", action="store_true", help="leave the unchanged recipe out of the sweep")
    q.add_argument("--until-stage", help="every trial stops after this stage (a resumed sweep keeps it)")
    q.add_argument(
        "--from-stage",
        help="every trial starts at this stage; earlier stages' outputs are the newest "
        "registered versions (the same for every trial)",
    )
    q.set_defaults(fn=cmd_ablate)

    q = sub.add_parser("ablations", help="list the ablations (conf/ablation/) and the paper's that are left out")
    q.set_defaults(fn=cmd_ablations)

    q = sub.add_parser("submit", help="send a pipeline run to a Ray cluster as a Ray job (the driver runs on its head)")
    pipeline_options(q)
    q.add_argument("--address", default="http://127.0.0.1:8265",
                   help="the Ray job server (the dashboard address) of the cluster")  # fmt: skip
    q.add_argument("--run-id", help="name of the run (default: a timestamp)")
    q.add_argument("--until-stage", help="stop after this stage")
    q.add_argument("--force", action="append", default=[], metavar="STAGE", help="re-run STAGE even if cached")
    q.add_argument("--env", action="append", default=[], metavar="NAME",
                   help="pass this variable to the job (no credentials), e.g. MLFLOW_TRACKING_URI")  # fmt: skip
    q.add_argument("--follow", action="store_true", help="stream the job's output; exit with its status")
    q.add_argument("--resume", action="store_true",
                   help="continue the run --run-id on the head (`llp resume` there), not start one")  # fmt: skip
    q.set_defaults(fn=cmd_submit)

    q = sub.add_parser("compare", help="pipeline runs side by side from MLflow (tables, plots, the paper's numbers)")
    q.add_argument("runs", nargs="+", metavar="RUN_OR_TAG",
                   help="a pipeline run id, or KEY=VALUE of a tag (e.g. llp.ablation=paper_rewards)")  # fmt: skip
    q.add_argument("--run-root", default="runs", help="for the local MLflow store when MLFLOW_TRACKING_URI is unset")
    q.add_argument("--experiment", default="llp", help="MLflow experiment")
    q.add_argument("--out", help="report folder (default runs/compare/<time>)")
    q.set_defaults(fn=cmd_compare)

    q = sub.add_parser("resume", help="continue a pipeline run from its first unfinished stage")
    q.add_argument("run", help="run id (a folder under runs/)")
    q.add_argument("--run-root", default="runs")
    pipeline_options(q, profile=False)
    execution_options(q)
    q.set_defaults(fn=cmd_resume)

    q = sub.add_parser("status", help="table of a run's stages: state, duration, output model, MLflow run")
    q.add_argument("run", nargs="?", help="run id (default: the latest)")
    q.add_argument("--run-root", default="runs")
    q.set_defaults(fn=cmd_status)

    q = sub.add_parser("ui", help="open Prefect's and MLflow's UIs for a run (prints both URLs)")
    q.add_argument("run", nargs="?", help="run id (default: the latest)")
    q.add_argument("--run-root", default="runs")
    q.add_argument("--for", dest="seconds", type=float, help="stop after this many seconds (default: Ctrl-C)")
    q.set_defaults(fn=cmd_ui)

    q = sub.add_parser("stages", help="list the pipeline's stages")
    pipeline_options(q)
    q.set_defaults(fn=cmd_stages)

    q = sub.add_parser("config", help="print the resolved, validated pipeline config")
    pipeline_options(q)
    q.set_defaults(fn=cmd_config)

    q = sub.add_parser("evaluate", help="evaluate a registered policy on fresh trials (success with 95%% CIs)")
    q.add_argument(
        "--model",
        required=True,
        help="models:/NAME/VERSION, models:/NAME/latest, models:/NAME@ALIAS, or stand-still (the trivial baseline: "
        "zero actions, the default pose held by PD, on the same trials). The deployable policy "
        "(llp-deployable-policy) runs its ONNX file in closed loop, as a robot would",
    )
    q.add_argument("--trials", type=int, help="trials per setting (default: the profile's stages.evaluate.trials)")
    q.add_argument("--seed", type=int, default=12345, help="seed of the trial plan")
    q.add_argument("--json", action="store_true", help="last line: the report as one JSON object")
    pipeline_options(q)
    q.set_defaults(fn=cmd_evaluate)

    b = sub.add_parser("bench", help="measure throughput (last line: one JSON object with --json)")
    b.add_argument("what", choices=["sim", "learner", "gpu", "rllib", "pipeline", "faults"])
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--robot", default="lightbot0_like", help="sim: robot config name (conf/robot/)")
    b.add_argument("--num-envs", type=int, default=64)
    b.add_argument("--steps", type=int, default=200, help="sim: policy steps per measurement")
    b.add_argument("--iterations", type=int, default=6,
                   help="rllib: training iterations per library; gpu: co-located iterations per env count")  # fmt: skip
    b.add_argument("--device", default=None,
                   help="learner: where the update runs; sim, gpu: where warp runs (cpu, cuda; gpu's default: cuda, "
                   "the others' cpu)")  # fmt: skip
    b.add_argument("--counts", default="4096,16384,32768", help="gpu: env counts to measure, comma-separated")
    b.add_argument("--backend", default="mujoco", help="sim: physics engine (mujoco, warp)")
    b.add_argument("--scenario", action="append", metavar="NAME",
                   help="faults: run only this scenario (repeatable; default: all)")  # fmt: skip
    b.set_defaults(fn=cmd_bench)

    v = sub.add_parser("play", help="render a video (MP4, optionally GIF) of a policy walking on one tile")
    v.add_argument("--model", required=True, help="models:/ URI of the policy, or stand-still")
    v.add_argument("--terrain", default="flat", help="tile type (default flat)")
    v.add_argument("--level", type=int, default=0, help="difficulty level of the tile")
    v.add_argument("--seconds", type=float, default=6.0, help="length of the clip (it ends early on a fall)")
    v.add_argument("--size", default="480x360", help="WIDTHxHEIGHT in pixels")
    v.add_argument("--out", required=True, help="MP4 path to write")
    v.add_argument("--gif", help="also write this GIF (half size, half frame rate)")
    v.add_argument("--seed", type=int, default=0)
    pipeline_options(v)
    v.set_defaults(fn=cmd_play)

    m = sub.add_parser("seeds", help="author the shipped motion seeds, check them, store them in a reference library")
    m.add_argument("names", nargs="*", help="seeds to author (default: all in conf/seeds/)")
    m.add_argument("--out", default="runs/references", help="library folder (default runs/references)")
    m.add_argument("--pictures", help="also write a PNG strip of key frames per seed into this folder")
    m.set_defaults(fn=cmd_seeds)

    m = sub.add_parser("refs", help="table of a reference library's entries with their provenance")
    m.add_argument("library", help="library folder (as `llp seeds` writes it), or a pipeline run id")
    m.add_argument("--run-root", default="runs", help="where pipeline runs live (default runs)")
    m.add_argument("--lineage", metavar="ID", help="print one entry's chain of parents back to its seed")
    m.set_defaults(fn=cmd_refs)

    r = sub.add_parser(
        "render", help="write a PNG of a terrain layout, a depth image (clean, or beside the camera model's) or a gait"
    )
    r.add_argument("what", choices=["terrain", "depth", "depth-noise", "gait"])
    r.add_argument("--model", help="gait: models:/ URI of the policy, or stand-still")
    r.add_argument("--level", type=int, default=0, help="gait: difficulty level of the tile")
    r.add_argument("--out", required=True, help="PNG path to write")
    r.add_argument("--task", default="locomotion")
    r.add_argument("--tile-types", nargs="*", default=None, help="terrain: tile types (default: all)")
    r.add_argument("--tile-type", default="climb", help="depth, depth-noise, gait: the tile the robot stands on")
    r.add_argument("--seed", type=int, default=0)
    pipeline_options(r)
    r.set_defaults(fn=cmd_render)
    return p


def main(argv: list[str] | None = None) -> int:
    import signal

    # a terminated `llp run` still stops the servers it started and marks its run failed
    from llp.infra.processes import exit_on_sigterm

    signal.signal(signal.SIGTERM, exit_on_sigterm)
    args = build_parser().parse_args(argv)
    if not os.environ.get("RAY_ADDRESS") and not getattr(args, "cluster", None):
        # a local Ray authenticates its clients with a token it generates (read when ray is first imported, so set
        # here): another user of this machine who reaches one of its ports is refused. Clusters keep their own.
        os.environ.setdefault("RAY_AUTH_MODE", "token")
    from llp.config.schema import ConfigError

    try:
        return args.fn(args)
    except ConfigError as err:
        print(f"llp: config error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        if args.command in ("run", "resume", "submit", "ablate", "compare", "evaluate", "seeds", "refs", "play",
                            "render", "bench"):  # fmt: skip
            print(f"llp: {err}", file=sys.stderr)
            return 2
        raise
    except OSError as err:  # a full disk, a folder removed underneath: one line that names the file
        if args.command in ("run", "resume", "evaluate", "seeds", "refs", "play", "render"):
            where = f": {err.filename}" if err.filename else ""
            print(f"llp: {err.strerror or err}{where}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
