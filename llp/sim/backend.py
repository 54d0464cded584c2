"""Which physics engine steps an env's batch: MuJoCo's C engine (``mujoco``, the default: one model per tile,
``mujoco.batch`` threads) or MuJoCo Warp (``warp``: every env a world of one model, on the CPU or a GPU)."""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from contextvars import ContextVar

from llp.config.schema import check

BACKENDS = ("mujoco", "warp")


def check_backend(backend: str, device: str, path: str) -> None:
    """A ConfigError naming the field when the backend or device cannot run here (before any work)."""
    p = f"{path}." if path else ""
    check(backend in BACKENDS, f"{p}backend", f"got {backend!r}, allowed values: {', '.join(BACKENDS)}")
    ok = device == "cpu" or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())
    check(ok, f"{p}device", f"got {device!r}, allowed values: cpu, cuda, cuda:N")
    check(backend == "warp" or device == "cpu", f"{p}device", "the mujoco backend runs on the cpu only")
    if backend == "warp":
        found = all(importlib.util.find_spec(m) is not None for m in ("warp", "mujoco_warp"))
        check(found, f"{p}backend", "warp needs the packages mujoco-warp and warp-lang (pip install mujoco-warp)")


def physics_batch(model, num_envs: int, threads: int, backend: str = "mujoco", device: str = "cpu",
                  params: bool = False):  # fmt: skip
    """A batch of ``num_envs`` simulations of ``model`` with ``mujoco.batch.Batch``'s interface."""
    if backend == "warp":
        from llp.sim.warp_batch import WarpBatch

        return WarpBatch(model, num_envs, device=device, params=params)
    from mujoco.batch import Batch

    return Batch(model, num_envs, nthread=threads)


# The pipeline's sim section, while a stage runs: the env configs the stage builds take it (their own overrides win)
_CURRENT: ContextVar[tuple[str, str]] = ContextVar("llp_sim_backend", default=("mujoco", "cpu"))


@contextmanager
def simulating_on(backend: str, device: str):
    """Env configs built inside this block default to ``backend`` on ``device``."""
    token = _CURRENT.set((backend, device))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def sim_defaults() -> dict[str, str]:
    """The backend and device env configs default to here (``simulating_on``)."""
    backend, device = _CURRENT.get()
    return {"backend": backend, "device": device}
