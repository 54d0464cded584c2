"""Shared fixtures: real local services (S3 endpoint, MLflow server, Prefect server) and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SECRET = "llp-test-secret-value-9f3e1c"  # a credential that must never appear in params, tags or artifacts
BUCKET = "llp-artifacts"

# The files that take longest (measured in `make test`: each 4-13 min under two workers), in that order. They run
# first, so that the many short files fill in beside them instead of one long file starting last (the Makefile
# passes --no-loadscope-reorder: xdist would otherwise order files by their number of tests).
LONGEST_FIRST = ["test_recovery.py", "test_pipeline.py", "test_ablate.py", "test_ui.py", "test_cluster.py",
                 "test_infra.py"]  # fmt: skip


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order kept


@pytest.fixture(scope="session")
def services(tmp_path_factory):
    """moto S3 on 127.0.0.1, an `mlflow server` storing artifacts in it, and a Prefect server."""
    import boto3

    from llp.infra.services import start_mlflow, start_prefect, start_s3

    root = tmp_path_factory.mktemp("services")
    creds = {"AWS_ACCESS_KEY_ID": "llp-test-key", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1"}
    s3 = start_s3(root / "s3.log")
    started = [s3]
    try:
        boto3.client(
            "s3",
            endpoint_url=s3.url,
            **{k.lower(): v for k, v in creds.items() if k != "AWS_DEFAULT_REGION"},
            region_name="us-east-1",
        ).create_bucket(Bucket=BUCKET)
        mlflow = start_mlflow(
            root / "mlflow" / "mlflow.db",
            f"s3://{BUCKET}/artifacts",
            env_extra={**creds, "MLFLOW_S3_ENDPOINT_URL": s3.url},
        )
        started.append(mlflow)
        prefect = start_prefect(root / "prefect")
        started.append(prefect)
        env = {
            **creds,
            "MLFLOW_TRACKING_URI": mlflow.url,
            "MLFLOW_S3_ENDPOINT_URL": s3.url,
            "PREFECT_API_URL": prefect.url,
        }
        yield {"env": env, "s3": s3, "mlflow": mlflow, "prefect": prefect, "root": root}
    finally:
        for service in reversed(started):
            service.stop()


def run_llp(*args: str, env: dict | None = None, timeout: float = 900, cwd: Path | None = None,
            listening: set | None = None):  # fmt: skip
    """Run the real `llp` console script (in the repository's folder unless ``cwd`` says otherwise); a None in
    ``env`` removes that variable. With ``listening``, the sockets its processes listen on while it runs are added
    to that set as (address, process name)."""
    full = {k: v for k, v in {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}.items() if v is not None}
    if listening is None:
        return subprocess.run(
            [str(BIN / "llp"), *args], cwd=cwd or ROOT, env=full, capture_output=True, text=True, timeout=timeout
        )
    import threading

    with subprocess.Popen([str(BIN / "llp"), *args], cwd=cwd or ROOT, env=full, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:  # fmt: skip
        done = threading.Event()

        def watch():
            while not done.wait(0.5):
                listening.update(listening_sockets(proc.pid))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            done.set()
            watcher.join()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def listening_sockets(root_pid: int) -> set[tuple[str, str]]:
    """(local address, process name) of every TCP or UDP socket that ``root_pid`` or a process below it listens
    on, as `ss` reports them now."""
    import re

    table = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout.split()
    parents = dict(zip(map(int, table[0::2]), map(int, table[1::2]), strict=True))
    tree, grew = {root_pid}, True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    found = set()
    for line in subprocess.run(["ss", "-ltunpH"], capture_output=True, text=True).stdout.splitlines():
        owners = [(int(pid), name) for name, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line)]
        for pid, name in owners:
            if pid in tree:
                found.add((line.split()[4], name))
    return found


def is_loopback(address: str) -> bool:
    """An `ss` local address (``127.0.0.1:5000``, ``[::1]:5000``, ``[::ffff:127.0.0.1]:5000``) on loopback."""
    import ipaddress

    host = address.rsplit(":", 1)[0].strip("[]").split("%")[0]
    if host in ("*", ""):
        return False
    ip = ipaddress.ip_address(host)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


@pytest.fixture
def llp():
    return run_llp


SMOKE = ["--profile", "smoke"]


def ledger(run_root: Path, run_id: str) -> dict:
    """A pipeline run's ledger (its stages' states, executions, outputs)."""
    import json

    return json.loads((run_root / run_id / "ledger.json").read_text())


def mlflow_client(services):
    """An MLflow client of the test services' tracking server (and their S3 credentials in this process)."""
    import mlflow

    mlflow.set_tracking_uri(services["env"]["MLFLOW_TRACKING_URI"])
    os.environ.update({k: v for k, v in services["env"].items() if k.startswith(("AWS_", "MLFLOW_S3"))})
    return mlflow.MlflowClient()
