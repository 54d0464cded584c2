"""Local services the platform starts for itself: Prefect's server, an MLflow server, an S3 endpoint, and
(for the cluster-shaped test) a PostgreSQL server as MLflow's backend store.

Each runs as a subprocess in its own process group on 127.0.0.1 with a free
port, is polled until healthy, and is stopped with its whole group. None of
them is started when the environment already points at one
(``PREFECT_API_URL``, ``MLFLOW_TRACKING_URI``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except Exception:
        return False


@dataclass
class Service:
    """A running local service."""

    name: str
    url: str
    pid: int
    log: Path
    proc: subprocess.Popen | None = None
    adopted: bool = False  # left behind by a process that is gone: whoever adopted it stops it
    scratch: Path | None = None  # a directory of the service's own, removed when it stops

    def stop(self, timeout: float = 20.0) -> None:
        stop_process_group(self.pid, timeout)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        if self.scratch is not None:
            import shutil

            shutil.rmtree(self.scratch, ignore_errors=True)


def stop_process_group(pid: int, timeout: float = 20.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _spawn(name: str, cmd: list[str], env: dict, log: Path, health_url: str, timeout: float) -> Service:
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = open(log, "ab")
    proc = subprocess.Popen(
        cmd, env=env, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + timeout
    while not healthy(health_url):
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with code {proc.returncode} while starting; see {log}")
        if time.time() > deadline:
            stop_process_group(proc.pid)
            raise TimeoutError(f"{name} did not become healthy within {timeout:.0f} s; see {log}")
        time.sleep(0.25)
    return Service(name, health_url.rsplit("/", 1)[0], proc.pid, log, proc)


# ------------------------------------------------------------------ Prefect
def prefect_env(home: Path) -> dict[str, str]:
    """Settings that keep Prefect's state under ``home`` (must be in the environment before prefect imports)."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PREFECT_HOME": str(home),
        "PREFECT_PROFILES_PATH": str(home / "profiles.toml"),
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{home / 'prefect.db'}",
        "PREFECT_RESULTS_LOCAL_STORAGE_PATH": str(home / "storage"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_UI_ENABLED": "true",  # `llp ui` and --keep-servers show the flow runs in a browser
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
        "PREFECT_LOGGING_LEVEL": os.environ.get("PREFECT_LOGGING_LEVEL", "WARNING"),
        "PREFECT_LOGGING_TO_API_ENABLED": "false",
    }


def start_prefect(home: Path, timeout: float = 180.0, info_file: str = "server.json") -> Service:
    """Prefect's own server (API and UI) with its database under ``home``; reused if one for ``home`` is already
    healthy."""
    from llp.infra.processes import process_alive, this_process

    info = home / info_file
    if info.exists():
        data = json.loads(info.read_text())
        if healthy(data["url"] + "/health"):
            # its owner was killed before it could stop it: adopt it (stop it when done), never leak it
            orphan = data.get("owner") is not None and process_alive(data["owner"]) is False
            if orphan:
                info.write_text(json.dumps({**data, "owner": this_process()}))
            return Service("prefect", data["url"], data["pid"], home / "server.log", adopted=orphan)
    env = {**os.environ, **prefect_env(home)}
    env.pop("PREFECT_API_URL", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env["PREFECT_UI_API_URL"] = url  # the UI's pages call this API (Prefect's default is port 4200)
    cmd = [
        str(BIN / "python"),
        "-m",
        "prefect",
        "server",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--analytics-off",
    ]
    service = _spawn("prefect server", cmd, env, home / "server.log", url + "/health", timeout)
    service.url = url
    info.write_text(json.dumps({"url": url, "pid": service.pid, "owner": this_process()}))
    return service


def keep_prefect(home: Path) -> None:
    """Mark the server for ``home`` as kept on purpose (--keep-servers): no later command adopts it."""
    info = home / "server.json"
    if info.exists():
        info.write_text(json.dumps({**json.loads(info.read_text()), "owner": None}))


# ------------------------------------------------------------------ MLflow
def start_mlflow(
    store: Path,
    artifacts: str,
    port: int | None = None,
    env_extra: dict | None = None,
    timeout: float = 180.0,
    backend_uri: str | None = None,
) -> Service:
    """``mlflow server`` with a SQLite store at ``store`` (or the database at ``backend_uri``, e.g. PostgreSQL)
    and artifacts at ``artifacts`` (a path or s3:// URI), proxied through the server (clients need no storage
    credentials). Its log goes next to ``store``."""
    port = port or free_port()
    env = {
        **os.environ,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "true",
        **(env_extra or {}),
    }
    store.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        str(BIN / "mlflow"),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        backend_uri or f"sqlite:///{store}",
        "--serve-artifacts",
        "--artifacts-destination",
        artifacts,
    ]
    return _spawn(
        "mlflow server", cmd, env, store.parent / "mlflow-server.log", f"http://127.0.0.1:{port}/health", timeout
    )


# ------------------------------------------------------------------ PostgreSQL
def start_postgres(home: Path, timeout: float = 60.0) -> Service:
    """A PostgreSQL server (Debian's ``postgresql`` package) on 127.0.0.1 with its data in ``home``, a database
    ``mlflow`` in it; ``url`` is the SQLAlchemy URI MLflow takes (driver: psycopg 3). As root it runs as the
    ``postgres`` user, because PostgreSQL refuses to run as root."""
    import glob
    import shutil

    binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    bindir = Path(binaries[-1]) if binaries else None
    if bindir is None or not (bindir / "initdb").exists():
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql")
    import tempfile

    home = Path(home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    as_user: list[str] = []
    scratch = None
    if os.geteuid() == 0:  # the data must sit where the postgres user can reach it (not in root's private dirs)
        as_user = ["runuser", "-u", "postgres", "--"]
        base = scratch = Path(tempfile.mkdtemp(prefix="llp-postgres-"))
        shutil.chown(base, "postgres")
        (home / "data-location").write_text(str(base))
    else:
        base = home
    data, sockets = base / "data", base / "sockets"
    sockets.mkdir(parents=True, exist_ok=True)
    if as_user:
        shutil.chown(sockets, "postgres")
    log = home / "postgres.log"
    subprocess.run(
        [*as_user, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    handle = open(log, "ab")
    cmd = [*as_user, str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-h", "127.0.0.1", "-k", str(sockets)]
    proc = subprocess.Popen(
        cmd, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.time() + timeout
    while True:
        ready = (
            subprocess.run(
                [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)], capture_output=True
            ).returncode
            == 0
        )
        if ready:
            break
        if proc.poll() is not None or time.time() > deadline:
            stop_process_group(proc.pid)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            raise RuntimeError(f"PostgreSQL did not start; see {log}")
        time.sleep(0.25)
    subprocess.run(
        [str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c", "CREATE DATABASE mlflow"],
        check=True,
        capture_output=True,
    )
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/mlflow"
    return Service("postgresql", url, proc.pid, log, proc, scratch=scratch)


# ------------------------------------------------------------------ S3
def start_s3(log: Path, timeout: float = 60.0) -> Service:
    """A local S3-compatible endpoint (moto's server mode) on 127.0.0.1."""
    port = free_port()
    cmd = [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    service = _spawn("s3 endpoint", cmd, dict(os.environ), log, f"http://127.0.0.1:{port}/moto-api/", timeout)
    service.url = f"http://127.0.0.1:{port}"
    return service
