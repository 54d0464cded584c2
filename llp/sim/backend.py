"""Which physics engine steps an env's batch: MuJoCo's C engine (``mujoco``, the default: one model per tile,
``mujoco.batch`` threads), MuJoCo Warp (``warp``: every env a world of one model, on the CPU or a GPU) or
Isaac Lab 3 on Newton (``isaaclab``: in Isaac Lab's own Python 3.12 environment, reached through an env
server; docs/isaaclab.md)."""

from __future__ import annotations

import importlib.util
import os
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from llp.config.schema import check

BACKENDS = ("mujoco", "warp", "isaaclab")
ONE_MODEL_BACKENDS = ("warp", "isaaclab")  # every env a world of one model of the whole terrain
REPO_ROOT = Path(__file__).resolve().parents[2]


def isaaclab_python() -> Path:
    """The interpreter of Isaac Lab's environment: $LLP_ISAACLAB_PYTHON, else the one ``make isaaclab`` builds."""
    return Path(os.environ.get("LLP_ISAACLAB_PYTHON") or REPO_ROOT / ".venv-isaaclab" / "bin" / "python")


def in_isaaclab() -> bool:
    """Whether this interpreter has Isaac Lab (the env server's child does; the platform's own Python does not)."""
    return importlib.util.find_spec("isaaclab") is not None


def check_backend(backend: str, device: str, path: str) -> None:
    """A ConfigError naming the field when the backend or device cannot run here (before any work)."""
    p = f"{path}." if path else ""
    check(backend in BACKENDS, f"{p}backend", f"got {backend!r}, allowed values: {', '.join(BACKENDS)}")
    ok = device == "cpu" or device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())
    check(ok, f"{p}device", f"got {device!r}, allowed values: cpu, cuda, cuda:N")
    check(backend != "mujoco" or device == "cpu", f"{p}device", "the mujoco backend runs on the cpu only")
    if backend == "warp":
        found = all(importlib.util.find_spec(m) is not None for m in ("warp", "mujoco_warp"))
        check(found, f"{p}backend", "warp needs the packages mujoco-warp and warp-lang (pip install mujoco-warp)")
    if backend == "isaaclab":
        gpu = "the isaaclab backend runs on the cpu here: its GPU route is not built yet (docs/isaaclab.md)"
        check(device == "cpu", f"{p}device", gpu)
        venv = isaaclab_python().parent.parent.name
        missing = (f"isaaclab needs Isaac Lab's environment: run `make isaaclab` (it builds {venv}, Python 3.12), "
                   "or set LLP_ISAACLAB_PYTHON to its python")  # fmt: skip
        check(in_isaaclab() or isaaclab_python().exists(), f"{p}backend", missing)


def physics_batch(model, num_envs: int, threads: int, backend: str = "mujoco", device: str = "cpu",
                  params: bool = False, robot: str | None = None):  # fmt: skip
    """A batch of ``num_envs`` simulations of ``model`` with ``mujoco.batch.Batch``'s interface (``robot``: the
    robot's name, for backends that load it as an asset of their own)."""
    if backend == "isaaclab":
        if not in_isaaclab():
            raise RuntimeError("the isaaclab backend runs in Isaac Lab's environment: build the env with "
                               "llp.sim.hosted.parkour_env, which starts it there")  # fmt: skip
        from llp.sim.isaaclab.batch import IsaacLabBatch

        return IsaacLabBatch(model, num_envs, robot=robot, device=device, params=params)
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
