"""Connecting to Ray: the cluster at RAY_ADDRESS, or a local instance that logs into the run directory."""

from __future__ import annotations

import os
from pathlib import Path


def init_ray(log_dir: Path, num_cpus: float | None = None) -> str:
    """Connect to ``RAY_ADDRESS`` if set, else start a local Ray (dashboard off, logs under ``log_dir``)."""
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
        return address
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private local instance; clusters keep their own auth
    log_dir.mkdir(parents=True, exist_ok=True)
    ray.init(
        num_cpus=num_cpus if num_cpus is not None else os.cpu_count(),
        include_dashboard=False,
        _temp_dir=str(_short_temp_dir(log_dir)),
        log_to_driver=False,
        runtime_env={"env_vars": env},
        configure_logging=True,
        logging_level="ERROR",
    )
    return "local"


def _short_temp_dir(log_dir: Path) -> Path:
    """Ray's session sockets must fit in 107 bytes: use the run folder when short enough, else /tmp."""
    path = log_dir.resolve()
    if len(str(path)) > 60:
        import hashlib
        import tempfile

        path = Path(tempfile.gettempdir()) / f"llp-ray-{hashlib.sha1(str(log_dir).encode()).hexdigest()[:8]}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
