"""Ray's Unix sockets fit the AF_UNIX limit whatever the length of the run folder's path."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

RUN_ID = "20261130-165137-8d98"  # the shape of a real run id


def path_of_length(n: int) -> Path:
    """A fresh folder whose absolute path is exactly ``n`` characters (created, empty)."""
    base = tempfile.mkdtemp(prefix="l", dir="/tmp")
    pad = n - len(base) - 1
    assert pad >= 1, f"cannot make a {n}-character path under {base}"
    path = Path(base) / ("r" * pad)
    path.mkdir()
    assert len(str(path)) == n
    return path


def test_socket_suffix_is_ray_s_real_layout():
    from llp.infra.ray_runtime import SOCKET_LIMIT, socket_suffix_bytes

    # what Ray 2.60 appended in the reported failure, with a 5-digit pid
    seen = "/session_2026-11-30_16-52-00_984184_26296/sockets/plasma_store"
    assert socket_suffix_bytes() >= len(seen) + 2 + 3  # room for 7-digit pids and a '.N' suffix
    # the reported path (20-character checkout, default run_root) no longer stays in the run folder
    from llp.infra.ray_runtime import ray_temp_dir

    log_dir = Path("/tmp/newcomer.Crw1/p/runs/20261130-165137-8d98/ray")
    assert ray_temp_dir(log_dir) != log_dir
    assert len(str(ray_temp_dir(log_dir))) + socket_suffix_bytes() <= SOCKET_LIMIT


@pytest.mark.parametrize("length", [20, 30, 40, 60, 100])
def test_local_ray_starts_for_run_roots_on_both_sides_of_the_limit(length):
    import ray

    from llp.infra.ray_runtime import SOCKET_LIMIT, init_ray, ray_temp_dir, shutdown_ray

    root = path_of_length(length)
    log_dir = root / RUN_ID / "ray"
    temp = ray_temp_dir(log_dir)
    try:
        assert init_ray(log_dir, num_cpus=1) == "local"
        assert ray.get(ray.remote(lambda: 42).options(num_cpus=0.1).remote()) == 42
        sockets = list((temp / "session_latest" / "sockets").iterdir())
        assert {s.name for s in sockets} >= {"plasma_store", "raylet"}
        assert all(len(str(s.resolve())) <= SOCKET_LIMIT for s in sockets)
        # the logs are reachable from the run folder: there when it fits, else through a link
        assert (log_dir / "session_latest" / "logs").is_dir()
        assert log_dir.is_symlink() == (temp != log_dir)
    finally:
        shutdown_ray()
        shutil.rmtree(root.parent, ignore_errors=True)
        if temp != log_dir:
            shutil.rmtree(temp, ignore_errors=True)


def test_a_temp_dir_too_long_for_any_socket_fails_before_any_work(tmp_path, llp):
    long_tmp = path_of_length(100)
    root = tmp_path / ("x" * 60) / "runs"
    result = llp(
        "run", "--profile", "smoke", "--set", f"run_root={root}", env={"LLP_RAY_TMPDIR": str(long_tmp)}, timeout=60
    )
    shutil.rmtree(long_tmp.parent, ignore_errors=True)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "LLP_RAY_TMPDIR" in result.stderr and "socket" in result.stderr
    assert not root.exists()
    assert os.environ.get("LLP_RAY_TMPDIR") is None
