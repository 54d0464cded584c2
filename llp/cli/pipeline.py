"""Pipeline runs: config, stages, run, submit, resume, status, ui."""

from __future__ import annotations

import argparse
import os
import sys

from llp.cli.common import check_tracking_server, pipeline_config


def cmd_config(args: argparse.Namespace) -> int:
    import yaml

    from llp.config.pipeline import resolved

    print(yaml.safe_dump(resolved(pipeline_config(args)), sort_keys=False), end="")
    return 0


def cmd_stages(args: argparse.Namespace) -> int:
    from llp.stages.registry import STAGES, stage_config, stage_kind, stage_spec

    cfg = pipeline_config(args)
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
    check_tracking_server()
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


def cmd_run(args: argparse.Namespace) -> int:
    from llp.flows.pipeline import new_run_id

    cfg = pipeline_config(args)  # validates everything before any Ray, Prefect or MLflow state exists
    return _execute(cfg, args.run_id or new_run_id(), args)


def cmd_submit(args: argparse.Namespace) -> int:
    """Send `llp run` to a Ray cluster's job server; the driver runs on the head."""
    from llp.flows.pipeline import new_run_id
    from llp.flows.run_request import check_run_id, select_stages
    from llp.flows.submit import entrypoint, passed_env, submit

    if args.resume and not args.run_id:
        raise ValueError("--resume continues a run: name it with --run-id")
    cfg = pipeline_config(args)  # the same checks as `llp run`, here, before anything is sent
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
