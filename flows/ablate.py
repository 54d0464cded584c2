"""`llp ablate`: named ablations x seeds as one Ray Tune sweep of pipeline runs.

Each Tune trial is one pipeline run (``llp run --ablation NAME --set seed=S``, or the unchanged recipe for
``baseline``) in the sweep's run root, its actors on the sweep's own Ray instance. All trials share one
stage cache, so a stage whose config and inputs an ablation leaves alone runs once per sweep and is
``cached`` in every other trial. Tune keeps the sweep's state under ``<run_root>/sweeps/<id>``: after an
interruption or a failed trial, ``llp ablate --resume ID`` restores it (``Tuner.restore`` with errored
trials resumed) and only the trials that did not finish run again; a trial that resumes continues its
pipeline run (``llp resume``), so even its finished stages are not redone.

Every trial's MLflow pipeline run is tagged ``llp.sweep``, ``llp.ablation`` and ``llp.seed``;
``llp compare llp.sweep=ID`` puts them side by side.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

BASELINE = "baseline"  # the recipe as configured: the column every ablation is read against
DRIVER_ENV = "driver_env.json"  # settings a trial takes from the `llp ablate` that runs it (no credentials)
SWEEP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


def trial_run_id(sweep: str, ablation: str, seed: int) -> str:
    return f"{sweep}-{ablation}-s{seed}"


def pipeline_trial(config: dict) -> None:
    """One Tune trial: run (or resume) its pipeline with the sweep's Ray as the cluster; report the outcome."""
    import ray
    from ray import tune

    run_root = Path(config["run_root"])
    run_id = trial_run_id(config["sweep"], config["ablation"], config["seed"])
    base = [sys.executable, "-m", "llp.cli"]
    address = ray.get_runtime_context().gcs_address
    resuming = (run_root / run_id / "config.yaml").is_file()  # an earlier attempt of this trial: continue its run
    if resuming:
        cmd = [*base, "resume", run_id, "--run-root", str(run_root), "--cluster", address]
    else:
        cmd = [*base, "run", "--profile", config["profile"], "--run-id", run_id, "--cluster", address]
        cmd += ["--set", f"run_root={run_root}", "--set", f"seed={config['seed']}"]
        cmd += ["--tag", f"llp.sweep={config['sweep']}"]
        if config["ablation"] == BASELINE:
            cmd += ["--tag", f"llp.ablation={BASELINE}"]
        else:
            cmd += ["--ablation", config["ablation"]]
        for s in config["sets"]:
            cmd += ["--set", s]
    if config.get("until_stage"):  # the sweep's last stage, for a first run and a resumed one alike
        cmd += ["--until-stage", config["until_stage"]]
    if config.get("from_stage"):  # the sweep's first stage; upstream outputs are the newest registered versions
        cmd += ["--from-stage", config["from_stage"]]
    sweep_dir = run_root / "sweeps" / config["sweep"]
    # the worker inherited the environment of the `llp ablate` that started Ray, except the Prefect API (kept
    # from actors); that command left it in a file, so that nothing but non-secret settings is ever stored
    env = {**os.environ, **json.loads((sweep_dir / DRIVER_ENV).read_text()), "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)  # the pipeline is given the sweep's address explicitly
    if not env.get("PREFECT_API_URL"):
        env.pop("PREFECT_API_URL", None)
    log = sweep_dir / "logs" / f"{run_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        code = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    ledger = run_root / run_id / "ledger.json"
    book = json.loads(ledger.read_text()) if ledger.is_file() else {}
    if code != 0:
        raise RuntimeError(f"pipeline run {run_id} failed (exit {code}); its log: {log}")
    stages = book.get("stages", {})
    tune.report({
        "run_id": run_id,
        "executed": sum(s.get("executions", 0) for s in stages.values()),
        **{f"executions/{name}": s.get("executions", 0) for name, s in stages.items()},
        **{f"state/{name}": s.get("state", "") for name, s in stages.items()},
    })  # fmt: skip


def check_sweep_id(sweep: str) -> None:
    if not SWEEP_ID.match(sweep):
        raise ValueError(f"sweep id {sweep!r}: 1-40 letters, digits, '.', '_' or '-', starting with a letter or digit")


def run_sweep(
    names: list[str], seeds: list[int], profile: str, sets: list[str], run_root: Path, sweep: str,
    *, resume: bool = False, concurrent: int = 1, until_stage: str | None = None, from_stage: str | None = None,
) -> list[dict]:  # fmt: skip
    """Run the sweep (or resume it); one row per trial: ablation, seed, run id, status, stage executions."""
    from ray import tune

    from llp.infra.ray_runtime import init_ray, shutdown_ray

    check_sweep_id(sweep)
    storage = (run_root / "sweeps").resolve()
    path = storage / sweep
    if resume and not (path / "tuner.pkl").is_file():
        raise ValueError(f"no sweep {sweep!r} to resume under {storage} (start it with `llp ablate NAME...`)")
    if not resume and (path / "tuner.pkl").exists():
        raise ValueError(f"sweep {sweep!r} exists under {storage}: `llp ablate --resume {sweep}` continues it")
    path.mkdir(parents=True, exist_ok=True)
    (path / DRIVER_ENV).write_text(json.dumps({"PREFECT_API_URL": os.environ.get("PREFECT_API_URL", "")}))
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    init_ray(path / "ray")
    try:
        trainable = tune.with_resources(pipeline_trial, {"cpu": 0.01})  # the pipeline's actors hold the CPUs
        if resume:
            tuner = tune.Tuner.restore(str(path), trainable, resume_errored=True, restart_errored=False)
        else:
            space = {
                "ablation": tune.grid_search(names),
                "seed": tune.grid_search(seeds),
                "sweep": sweep, "profile": profile, "sets": sets, "run_root": str(run_root.resolve()),
                "until_stage": until_stage, "from_stage": from_stage,
            }  # fmt: skip
            tuner = tune.Tuner(
                trainable,
                param_space=space,
                tune_config=tune.TuneConfig(max_concurrent_trials=concurrent),
                run_config=tune.RunConfig(name=sweep, storage_path=str(storage), verbose=0),
            )
        grid = tuner.fit()
    finally:
        shutdown_ray()
    rows = []
    for result in grid:
        cfg = result.config or {}
        metrics = result.metrics or {}
        rows.append({
            "ablation": cfg.get("ablation"), "seed": cfg.get("seed"),
            "run_id": trial_run_id(sweep, cfg.get("ablation"), cfg.get("seed")),
            "status": "error" if result.error else "done",
            "error": str(result.error).splitlines()[-1] if result.error else None,
            "executions": {k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("executions/")},
        })  # fmt: skip
    return sorted(rows, key=lambda r: (r["ablation"] != BASELINE, r["ablation"], r["seed"]))
