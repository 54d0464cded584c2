"""A ``VecEnv`` whose simulator runs in a child process, possibly under another Python (``llp.sim.env_server``).

It is the way the isaaclab backend reaches its simulator (``llp.sim.hosted``; docs/isaaclab.md). The child gets the
repository on its ``PYTHONPATH``, so its interpreter needs only the simulator's own packages, numpy and torch
(no Ray, Prefect or MLflow).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from llp.sim.env import StepResult
from llp.sim.env_server import from_wire, to_wire

REPO_ROOT = Path(__file__).resolve().parents[2]


class EnvServerError(RuntimeError):
    """The env in the child process raised, or the child ended."""


class RemoteVecEnv:
    """``factory(**kwargs)`` built and stepped in a child process run by ``python``.

    ``kwargs`` must unpickle in the child: plain values, or dataclasses of modules the child can import."""

    def __init__(self, factory: str, kwargs: dict | None = None, python: str | None = None,
                 env: dict[str, str] | None = None):  # fmt: skip
        self.python = python or sys.executable
        if not Path(self.python).exists():
            raise FileNotFoundError(f"simulator python {self.python!r} does not exist")
        child_env = dict(os.environ if env is None else env)
        child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), child_env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [self.python, "-m", "llp.sim.env_server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_env,
            cwd=REPO_ROOT,
        )
        self.factory = factory
        self.cfg = (kwargs or {}).get("cfg")  # the config it was built from, as the parent holds it
        self._kinds: dict[str, str] = {}
        try:
            self._call("__start__", factory, **(kwargs or {}))
            self.num_envs = int(self._attr("num_envs"))
            self.num_actions = int(self._attr("num_actions"))
            self.reward_names = list(self._attr("reward_names"))
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ the wire
    def _call(self, method: str, *args, **kwargs) -> Any:
        if self.proc.poll() is not None:
            raise EnvServerError(f"env server for {self.factory!r} has exited with code {self.proc.returncode}")
        try:
            pickle.dump((method, to_wire(args, False), to_wire(kwargs, False)), self.proc.stdin, protocol=5)
            self.proc.stdin.flush()
            reply = pickle.load(self.proc.stdout)
        except (BrokenPipeError, EOFError) as e:
            code = self.proc.wait(timeout=10)
            raise EnvServerError(f"env server for {self.factory!r} ended (exit code {code}) during {method}") from e
        if reply[0] == "error":
            raise EnvServerError(f"{method} in the env server ({self.factory}): {reply[1]}: {reply[2]}")
        return reply[1]

    def _attr(self, name: str) -> Any:
        return self._call("__getattr__", name)

    # ------------------------------------------------------------------ VecEnv
    def obs_dims(self) -> dict[str, dict[str, int]]:
        return self._call("obs_dims")

    def reset(self):
        return from_wire(self._call("reset"))

    def course_state(self) -> dict:
        return self.call("course_state")

    def step(self, actions: torch.Tensor) -> StepResult:
        return StepResult(**from_wire(self._call("step", actions)))

    def call(self, method: str, *args, **kwargs) -> Any:
        """Any other method of the env, its result with arrays as tensors."""
        return from_wire(self._call(method, *args, **kwargs))

    def attr(self, name: str) -> Any:
        """An attribute of the env, as the child holds it (numpy arrays stay numpy)."""
        return self._attr(name)

    def __getattr__(self, name: str) -> Any:
        """Any other attribute of the env: a method runs in the child, a value is read from it (arrays as tensors
        where the env holds tensors)."""
        if name.startswith("_") or "proc" not in self.__dict__:
            raise AttributeError(name)
        kind = self._kinds.get(name)
        if kind is None:
            try:
                kind = self._kinds[name] = self._call("__kind__", name)
            except EnvServerError as e:
                raise AttributeError(f"the env in the child has no attribute {name!r}") from e
        if kind == "method":
            return lambda *args, **kwargs: self.call(name, *args, **kwargs)
        return from_wire(self._attr(name))

    def close(self) -> None:
        """Stop the child (politely, then by force); safe to call twice."""
        if self.proc.poll() is None:
            try:
                self._call("close")
            except (EnvServerError, OSError):
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                stream.close()

    def __del__(self):
        if getattr(self, "proc", None) is not None:
            self.close()
