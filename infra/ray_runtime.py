"""Connecting to Ray: the cluster at RAY_ADDRESS, or a local instance whose logs are reachable from the run folder.

A local Ray puts its Unix sockets under its temp dir, at
``<temp>/session_<YYYY-MM-DD_HH-MM-SS_ffffff>_<pid>/sockets/plasma_store``, and
a socket path may not exceed 107 bytes (103 on macOS). The run folder is used
as that temp dir when the longest such path fits with room to spare;
otherwise Ray runs in a short folder under ``LLP_RAY_TMPDIR`` (default: the
system temp dir) and the run folder gets a link to it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

SOCKET_LIMIT = 103 if sys.platform == "darwin" else 107  # bytes, without the terminating NUL
TMPDIR_SETTING = "LLP_RAY_TMPDIR"

# A local Ray that only this machine's own processes can reach. Ray reads both settings once, when it is first
# imported, and its servers (GCS, raylet, agents, workers) inherit them from the process that starts them.
PRIVATE_LOCAL_RAY = {
    # clients authenticate with a token the instance generates: another user of this machine is refused
    "RAY_AUTH_MODE": "token",
    # Ray's single-machine mode (its default on macOS and Windows): the node's address is 127.0.0.1 and every Ray
    # server and worker binds there, not on all interfaces; a second machine could not join, and none should
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}


def make_local_ray_private() -> None:
    """Before Ray is first imported: a local Ray started by this process listens on loopback only and asks for
    its token (a setting the caller already chose is kept)."""
    for key, value in PRIVATE_LOCAL_RAY.items():
        os.environ.setdefault(key, value)


class RayPathError(ValueError):
    """No directory Ray could use keeps its socket paths under the AF_UNIX limit."""


PID_DIGITS = 7  # Linux's largest pid_max is 4194304; this host's may be smaller, a cluster node's larger


def socket_suffix_bytes() -> int:
    """Bytes Ray appends to its temp dir for its longest socket path, with margin for what varies.

    ``/session_`` + a microsecond timestamp + ``_<pid>`` + ``/sockets/plasma_store``, with room for
    the longest pid Linux allows, plus 3 bytes for the ``.N`` suffix Ray adds when a socket name is taken.
    """
    timestamp = len("YYYY-MM-DD_HH-MM-SS_ffffff")
    return len("/session_") + timestamp + 1 + PID_DIGITS + len("/sockets/plasma_store") + 3


def fits(temp_dir: Path) -> bool:
    return len(str(temp_dir).encode()) + socket_suffix_bytes() <= SOCKET_LIMIT


def ray_temp_dir(log_dir: Path) -> Path:
    """Where a local Ray for ``log_dir`` keeps its session: ``log_dir`` itself if its sockets fit, else a short
    folder under LLP_RAY_TMPDIR (or the system temp dir). Raises ``RayPathError`` if neither fits. Creates nothing."""
    path = Path(os.path.abspath(log_dir))
    if path.is_symlink():  # a link made by an earlier start of this run: Ray runs where it points
        path = path.resolve()
    if fits(path):
        return path
    root = Path(os.path.abspath(os.environ.get(TMPDIR_SETTING) or tempfile.gettempdir()))
    short = root / f"llp-ray-{hashlib.sha1(str(Path(os.path.abspath(log_dir))).encode()).hexdigest()[:8]}"
    if not fits(short):
        limit = SOCKET_LIMIT - socket_suffix_bytes()
        raise RayPathError(
            f"Ray's socket paths need a temp dir of at most {limit} bytes, and neither the run folder "
            f"({path}) nor {short} is that short: set {TMPDIR_SETTING} (or TMPDIR) to a shorter directory, "
            f"for example {TMPDIR_SETTING}=/tmp"
        )
    return short


def check_local_ray(log_dir: Path, cpu_demand: float | None = None, custom: dict | None = None,
                    gpu_demand: float = 0.0) -> None:  # fmt: skip
    """Fail before any work if Ray could not serve this run: a local Ray (no RAY_ADDRESS) whose socket paths
    would not fit, fewer CPUs or GPUs here than the actors reserve, custom resources no local node declares, or
    a RAY_ADDRESS where nothing answers."""
    address = os.environ.get("RAY_ADDRESS")
    if address:
        check_ray_address(address)
        return
    if custom:
        raise ValueError(
            f"the actors ask for the custom resources {custom} (resources.sim_resources / learner_resources), "
            "which only a cluster's nodes declare: run with --cluster ADDRESS (or RAY_ADDRESS), or drop them"
        )
    ray_temp_dir(log_dir)
    cpus = os.cpu_count() or 1
    if cpu_demand is not None and cpu_demand > cpus + 1e-9:
        raise ValueError(
            f"the actors reserve {cpu_demand:g} CPUs (resources.sim_actors x sim_actor_cpus + learner_cpus) but "
            f"this machine has {cpus}: Ray would wait for them forever. Lower resources.sim_actors or "
            "resources.sim_actor_cpus, or set RAY_ADDRESS to a cluster"
        )
    if gpu_demand > 0:
        import torch

        gpus = torch.cuda.device_count()
        if gpu_demand > gpus + 1e-9:
            raise ValueError(
                f"the actors reserve {gpu_demand:g} GPUs (resources.learner_gpus) but this machine has {gpus}: "
                "Ray would wait for them forever. Set resources.learner_gpus to 0 (and sim.device to cpu), or set "
                "RAY_ADDRESS to a cluster with GPUs"
            )


def check_ray_address(address: str, timeout: float = 5.0) -> None:
    """A host:port RAY_ADDRESS must accept a connection (ray.init would otherwise retry for minutes)."""
    import socket

    if address in ("auto", "local") or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"RAY_ADDRESS={address!r}: expected HOST:PORT of a Ray head node's GCS (e.g. 10.0.0.5:6379)")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise ValueError(
            f"RAY_ADDRESS={address}: no Ray head answers there ({err.strerror or err}); start the cluster "
            "(`ray start --head`) or unset RAY_ADDRESS to run on a local Ray"
        ) from None


def prepare_temp_dir(log_dir: Path) -> Path:
    """Create Ray's temp dir for ``log_dir``; if it lies elsewhere, ``log_dir`` becomes a link to it."""
    temp = ray_temp_dir(log_dir)
    temp.mkdir(parents=True, exist_ok=True)
    link = Path(os.path.abspath(log_dir))
    if temp != link and not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink():  # dangling: the temp dir was cleaned since
            link.unlink()
        link.symlink_to(temp, target_is_directory=True)
    return temp


def init_ray(log_dir: Path, num_cpus: float | None = None) -> str:
    """Connect to ``RAY_ADDRESS`` if set, else start a local Ray (dashboard off, logs reachable at ``log_dir``)."""
    import ray

    if ray.is_initialized():
        return "attached"
    address = os.environ.get("RAY_ADDRESS")
    # actors must not start Prefect servers or talk to its API: keep Prefect settings out of their environment
    env = {
        "PREFECT_API_URL": "",
        "PYTHONWARNINGS": "ignore",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    if address:
        ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=False)
        _exit_143_on_sigterm()
        return address
    # `llp` turns token authentication on before Ray is first imported (llp.cli.main): a port of this private
    # instance that another user of the machine reaches refuses them. Ray reads the mode once, at import, so a
    # process that imported it without one (a test calling this directly) runs without: its servers must agree.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=num_cpus if num_cpus is not None else os.cpu_count(),
        include_dashboard=False,
        _temp_dir=str(prepare_temp_dir(log_dir)),
        log_to_driver=False,
        runtime_env={"env_vars": env},
        configure_logging=True,
        logging_level="ERROR",
    )
    _exit_143_on_sigterm()
    return "local"


def _exit_143_on_sigterm() -> None:
    """ray.init makes SIGTERM exit with status 15; the shell's convention (and `llp run`'s) is 128 + 15."""
    import signal
    import threading

    from llp.infra.processes import exit_on_sigterm

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, exit_on_sigterm)


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
