"""`llp submit`: a pipeline run as a Ray job, so the driver runs on the cluster's head, not on your laptop.

The command is checked here first (config, run id, stage range), then Ray's job server (the dashboard's
address, port 8265) starts `llp run ...` on the head with the head's own environment: its tracking
server, Prefect server and credentials come from there (instance roles, the head's settings), never
from this machine. Only the names of the servers may be passed along (``--env KEY``, for values that are
not secret). With ``--follow`` the job's output streams here and the exit status is the job's.
"""

from __future__ import annotations

import os
import shlex
import sys
import time

SECRET_HINTS = ("SECRET", "TOKEN", "PASSWORD", "KEY", "CREDENTIAL")
DONE = ("SUCCEEDED", "FAILED", "STOPPED")
AGENT_WAIT_S = 120.0  # a freshly started head's job agent takes a while to register


def entrypoint(profile: str, sets: list[str], run_id: str, until_stage: str | None, force: list[str],
               resume: bool = False) -> str:  # fmt: skip
    """The command the job runs on the head: `llp run` (or `llp resume` of ``run_id``, which keeps its config)."""
    args = ["llp", "resume", run_id] if resume else ["llp", "run", "--profile", profile, "--run-id", run_id]
    args += [a for s in sets for a in ("--set", s)]
    args += ["--until-stage", until_stage] if until_stage else []
    args += [a for stage in force for a in ("--force", stage)]
    return shlex.join(args)


def passed_env(names: list[str]) -> dict[str, str]:
    """The values of ``names`` from this environment, refusing anything that looks like a credential (a job's
    runtime environment is visible to whoever can read the cluster's dashboard)."""
    out = {}
    for name in names:
        if any(h in name.upper() for h in SECRET_HINTS):
            raise ValueError(
                f"--env {name}: credentials are not sent with a job (its runtime environment is readable from the "
                "cluster's dashboard); give the head node the role or setting instead"
            )
        if name not in os.environ:
            raise ValueError(f"--env {name}: not set in this environment")
        out[name] = os.environ[name]
    return out


def submit(address: str, command: str, run_id: str, env: dict[str, str], follow: bool, stream=None) -> int:
    from ray.job_submission import JobSubmissionClient

    stream = stream or sys.stdout
    try:
        client = JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ValueError(f"--address {address}: no Ray job server answers there ({err})") from None
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            job = client.submit_job(
                entrypoint=command,
                submission_id=f"llp-{run_id}-{int(time.time())}",
                # the driver's ray.init sets its actors' environment (no Prefect in workers): it wins over the job's
                runtime_env={"env_vars": {"PYTHONUNBUFFERED": "1", "RAY_OVERRIDE_JOB_RUNTIME_ENV": "1", **env}},
                metadata={"llp.pipeline_run": run_id},
            )
            break
        except RuntimeError as err:  # a head that has just started: its job agent is not up yet
            if "try again later" not in str(err) or time.monotonic() > deadline:
                raise ValueError(f"--address {address}: the job server refused the run ({err})") from None
            time.sleep(2.0)
    print(f"[llp] submitted {job} to {address}: {command}", file=stream, flush=True)
    if not follow:
        print(f"[llp] follow it: ray job logs --address {address} --follow {job}", file=stream)
        return 0
    shown = 0
    while True:
        status = str(client.get_job_status(job)).rsplit(".", 1)[-1]
        logs = client.get_job_logs(job)
        if len(logs) > shown:
            stream.write(logs[shown:])
            stream.flush()
            shown = len(logs)
        if status in DONE:
            break
        time.sleep(1.0)
    print(f"[llp] job {job}: {status}", file=stream, flush=True)
    return 0 if status == "SUCCEEDED" else 1
