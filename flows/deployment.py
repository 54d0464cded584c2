"""The pipeline as a Prefect deployment, so a run can be started or resumed from Prefect's UI or CLI.

The flow runs `llp run` (or `llp resume`) as a child process on the work pool's worker: the same checks, run
folder, Ray driver and stage flow as from a shell, against the worker's PREFECT_API_URL, MLFLOW_TRACKING_URI
and RAY_ADDRESS. Where RAY_ADDRESS is a job server's URL (http://HEAD:8265: a worker in a pod with no raylet,
as on Kubernetes, cannot be a Ray driver), it sends the run to the head as a Ray job (`llp submit --follow`)
and streams its output. Each output line goes to the flow run's log; a failed run fails the flow run, and the
message says how to resume it. Deployments: infra/prefect/prefect.yaml.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prefect import flow, get_run_logger


def llp_command(
    profile: str, sets: list[str], run_id: str | None, resume: bool, until_stage: str | None, force: list[str]
) -> list[str]:
    llp = str(Path(sys.executable).parent / "llp")
    if resume and not run_id:
        raise ValueError("resume needs the run_id of the run to continue")
    address = os.environ.get("RAY_ADDRESS", "")
    if address.startswith(("http://", "https://")):  # the driver runs on the head, as a Ray job
        args = [llp, "submit", "--address", address, "--follow", "--profile", profile]
        args += (["--run-id", run_id] if run_id else []) + (["--resume"] if resume else [])
    elif resume:
        args = [llp, "resume", run_id]
    else:
        args = [llp, "run", "--profile", profile] + (["--run-id", run_id] if run_id else [])
    args += [a for s in sets for a in ("--set", s)]
    args += ["--until-stage", until_stage] if until_stage else []
    args += [a for stage in force for a in ("--force", stage)]
    return args


@flow(name="llp-start", log_prints=False)
def start_pipeline(
    profile: str = "cluster",
    sets: list[str] | None = None,
    run_id: str | None = None,
    resume: bool = False,
    until_stage: str | None = None,
    force: list[str] | None = None,
) -> int:
    """Run (or resume) one pipeline run; ``sets`` are `--set KEY=VALUE` overrides."""
    logger = get_run_logger()
    args = llp_command(profile, sets or [], run_id, resume, until_stage, force or [])
    logger.info("running: %s", " ".join(args[1:]))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    for line in proc.stdout:
        if line.strip():
            logger.info(line.rstrip())
    code = proc.wait()
    if code != 0:
        raise RuntimeError(f"`llp {args[1]}` exited with status {code}; its log above says why and how to resume")
    return code
