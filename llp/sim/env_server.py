"""Serve one simulator batch to a parent process, so that a simulator with its own Python can sit behind the
``VecEnv`` contract (Isaac Lab 3 needs Python 3.12; the platform runs on 3.11).

Run as ``python -m llp.sim.env_server``: the parent writes requests to this process's stdin and reads replies
from the stdout it was given; anything the simulator prints goes to stderr. The replies hold only numpy arrays,
numbers, strings and plain containers, so the two sides may run different versions of Python and torch (a
config sent to the env is pickled by reference: its module must import on both sides).

The first request names the env's factory (``"module:callable"``) and its keyword arguments; each later one a
method and its arguments. Every reply is ``("ok", value)`` or ``("error", kind, message)``. A torch tensor
crosses as a ``WireTensor`` and arrives as a tensor again; numpy arrays stay numpy arrays.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pickle
import sys
import traceback
from typing import Any, BinaryIO

PROTOCOL = 5


class WireTensor:
    """A torch tensor on the pipe: its values as a numpy array (readable by any torch version)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getstate__(self):
        return self.array

    def __setstate__(self, array):
        self.array = array


def to_wire(x: Any, unpack: bool = True) -> Any:
    """Tensors as ``WireTensor``, containers walked (no torch import); ``unpack``: a dataclass as the dict of its
    fields (a reply), else pickled by reference (a config sent to the env)."""
    if type(x).__module__ == "torch" and hasattr(x, "detach"):
        return WireTensor(x.detach().cpu().numpy())
    if unpack and dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: to_wire(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {k: to_wire(v, unpack) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(to_wire(v, unpack) for v in x)
    return x


def from_wire(x: Any) -> Any:
    """``WireTensor`` as torch tensors again, containers walked."""
    if isinstance(x, WireTensor):
        import torch

        return torch.from_numpy(x.array)
    if isinstance(x, dict):
        return {k: from_wire(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(from_wire(v) for v in x)
    return x


def send(stream: BinaryIO, message: Any) -> None:
    pickle.dump(message, stream, protocol=PROTOCOL)
    stream.flush()


def load_factory(path: str):
    """``"module:callable"`` -> the callable; a ValueError naming what is wrong."""
    module, sep, name = path.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"env factory {path!r}: expected 'module:callable'")
    return getattr(importlib.import_module(module), name)


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """Answer requests until the parent closes the pipe or asks to ``close``."""
    env = None
    while True:
        try:
            method, args, kwargs = pickle.load(requests)
        except EOFError:
            return
        try:
            args, kwargs = from_wire(args), from_wire(kwargs)
            if method == "__start__":
                env = load_factory(args[0])(**kwargs)
                value = None
            elif method == "close":
                closer = getattr(env, "close", None)
                if closer is not None:
                    closer()
                send(replies, ("ok", None))
                return
            elif method == "__getattr__":
                value = getattr(env, args[0])
            elif method == "__kind__":  # whether the parent should call it or read it
                value = "method" if callable(getattr(env, args[0])) else "value"
            else:
                if env is None:
                    raise RuntimeError(f"{method}: the env has not started")
                value = getattr(env, method)(*args, **kwargs)
            send(replies, ("ok", to_wire(value)))
        except Exception as e:  # the parent raises it with the server's traceback
            send(replies, ("error", type(e).__name__, f"{e}\n{traceback.format_exc()}"))


def main() -> None:
    # the protocol keeps the stdout the parent gave; the simulator's own prints go to stderr
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, replies)


if __name__ == "__main__":  # through the importable module, so WireTensor pickles by its module's name
    from llp.sim.env_server import main as serve_main

    serve_main()
