"""The files a robot runs: ONNX and TorchScript of a registered policy, and checks that they act as it does.

A registered recurrent policy carries its GRU state inside one tensor (see
``llp.learn.export``). On the robot the state is an explicit input and output:
``obs`` [B, K*D] (the last K frames, oldest first, raw: the normalisation is
inside) and ``h_in`` [L, B, H] give ``action`` [B, A] and ``h_out`` [L, B, H];
zeros start an episode. A feed-forward policy maps ``obs`` to ``action``.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn

from llp.learn.export import PolicySpec, fresh_memory, load_pt2
from llp.learn.memory import Memory, stack_frames


class PolicyStep(nn.Module):
    """One policy step with the GRU state as its own input and output (recurrent), or obs -> action."""

    def __init__(self, packed: nn.Module, spec: PolicySpec):
        super().__init__()
        self.packed, self.spec = packed, spec
        self.training = False  # not .eval(): a torch.export module refuses train(); it is inference-only anyway

    def forward(self, obs: torch.Tensor, h_in: torch.Tensor | None = None):
        if not self.spec.recurrent:
            return self.packed(obs)
        b, a = obs.shape[0], self.spec.num_actions
        y = self.packed(torch.cat([obs, h_in.transpose(0, 1).reshape(b, -1)], dim=1))
        return y[:, :a], y[:, a:].reshape(b, self.spec.gru_layers, self.spec.gru_hidden).transpose(0, 1)


def io_names(spec: PolicySpec) -> tuple[list[str], list[str]]:
    return (["obs", "h_in"], ["action", "h_out"]) if spec.recurrent else (["obs"], ["action"])


def example(spec: PolicySpec, batch: int) -> tuple[torch.Tensor, ...]:
    obs = torch.zeros(batch, spec.num_frames * spec.obs_dim)
    if not spec.recurrent:
        return (obs,)
    return obs, torch.zeros(spec.gru_layers, batch, spec.gru_hidden)


def to_onnx(step: PolicyStep, path: Path) -> Path:
    """ONNX (torch's exporter, opset of this torch), the batch dimension dynamic."""
    batch = torch.export.Dim("batch")
    shapes = ({0: batch}, {1: batch}) if step.spec.recurrent else ({0: batch},)
    inputs, outputs = io_names(step.spec)
    with _quiet():
        torch.onnx.export(step, example(step.spec, 2), str(path), input_names=inputs, output_names=outputs,
                          dynamic_shapes=shapes, dynamo=True, external_data=False, verbose=False)  # fmt: skip
    return path


@contextlib.contextmanager
def _quiet():
    """The exporters' warnings about parts this policy does not use (torchvision ops, tracing guards)."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def to_torchscript(step: PolicyStep, path: Path) -> Path:
    """TorchScript traced at batch 1 (one robot)."""
    with torch.no_grad(), _quiet():
        traced = torch.jit.trace(step, example(step.spec, 1), check_trace=False)
    traced.save(str(path))
    return path


def onnx_session(path: Path):
    """An onnxruntime session on one CPU thread (what a robot's computer gives a policy)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


StepFn = Callable[[np.ndarray, np.ndarray | None], tuple[np.ndarray, np.ndarray | None]]


def onnx_step(session, spec: PolicySpec) -> StepFn:
    def step(obs, h):
        feed = {"obs": obs.astype(np.float32)}
        if spec.recurrent:
            feed["h_in"] = h.astype(np.float32)
        out = session.run(None, feed)
        return out[0], (out[1] if spec.recurrent else None)

    return step


def torchscript_step(module, spec: PolicySpec) -> StepFn:
    def step(obs, h):
        with torch.no_grad():
            if spec.recurrent:
                a, h2 = module(torch.from_numpy(obs), torch.from_numpy(h))
                return a.numpy(), h2.numpy()
            return module(torch.from_numpy(obs)).numpy(), None

    return step


def replay(step: StepFn, spec: PolicySpec, frames: np.ndarray, dones: np.ndarray, batch: int | None = None):
    """Actions [T, N, A] of ``step`` on recorded frames [T, N, D], the frame history and GRU state carried from
    step to step and cleared per env after a done step (``dones`` [T, N]). ``batch``: call ``step`` on this many
    envs at a time (1 for a module traced at batch 1)."""
    T, N, _ = frames.shape
    batch = batch or N
    out = np.zeros((T, N, spec.num_actions), dtype=np.float32)
    for lo in range(0, N, batch):
        ids = slice(lo, min(lo + batch, N))
        n = ids.stop - ids.start
        memory = Memory(
            frames=torch.zeros(n, spec.num_frames - 1, spec.obs_dim) if spec.num_frames > 1 else None,
            fresh=torch.ones(n, dtype=torch.bool) if spec.num_frames > 1 else None,
        )
        h = np.zeros((spec.gru_layers, n, spec.gru_hidden), dtype=np.float32) if spec.recurrent else None
        for t in range(T):
            stacked, memory = stack_frames(torch.from_numpy(frames[t, ids]), memory, spec.num_frames)
            out[t, ids], h = step(stacked.reshape(n, -1).numpy(), h)
            done = torch.from_numpy(dones[t, ids])
            memory = memory.reset(done)
            if h is not None:
                h = h * (~dones[t, ids]).astype(np.float32)[None, :, None]
    return out


def step_time_ms(step: StepFn, spec: PolicySpec, calls: int = 2000) -> dict[str, float]:
    """Wall time of one batch-1 policy step: median and 99th percentile over ``calls`` calls, in ms."""
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((1, spec.num_frames * spec.obs_dim)).astype(np.float32)
    h = np.zeros((spec.gru_layers, 1, spec.gru_hidden), dtype=np.float32) if spec.recurrent else None
    for _ in range(50):
        _, h = step(obs, h)
    times = np.empty(calls)
    for k in range(calls):
        t0 = time.perf_counter()
        _, h = step(obs, h)
        times[k] = time.perf_counter() - t0
    return {"median_ms": float(np.median(times) * 1e3), "p99_ms": float(np.percentile(times, 99) * 1e3)}


class OnnxPolicy:
    """The deployable ONNX file behind the rollout interface, fed as a robot would feed it: each frame is built
    from the env's observation terms by ``spec['obs_layout']`` alone (term by term, each of its recorded width),
    the last ``num_frames`` frames are stacked oldest first, and the GRU state goes in and out as ``h_in`` /
    ``h_out``; onnxruntime runs it on one CPU thread. Used by ``llp evaluate`` on ``llp-deployable-policy``."""

    def __init__(self, onnx: bytes, spec: dict):
        fields = {k: v for k, v in spec.items() if k in PolicySpec.__dataclass_fields__}
        self.spec = PolicySpec(**fields)
        if not self.spec.obs_layout:
            raise ValueError("the deployable's policy.json has no obs_layout: its observation cannot be built")
        self.layout = [(ref.split("/")[0], ref.split("/")[1], int(width)) for ref, width in self.spec.obs_layout]
        width = sum(w for _, _, w in self.layout)
        if width != self.spec.obs_dim:
            raise ValueError(f"policy.json: obs_layout adds up to {width}, but obs_dim is {self.spec.obs_dim}")
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])
        self.num_frames, self.obs_dim, self.num_actions = self.spec.num_frames, self.spec.obs_dim, self.spec.num_actions
        self.is_recurrent = self.spec.recurrent

    def observe(self, obs: dict) -> torch.Tensor:
        """One frame [N, obs_dim] from ``obs`` ({group: {term: [N, width]}}), by the layout; raises when a term is
        missing or of another width than the layout records."""
        parts = []
        for group, term, width in self.layout:
            x = obs.get(group, {}).get(term)
            if x is None:
                raise ValueError(f"policy.json's obs_layout needs {group}/{term}, which the env does not give")
            if x.shape[1] != width:
                raise ValueError(f"{group}/{term} is {x.shape[1]} wide, policy.json's obs_layout says {width}")
            parts.append(x.float())
        return torch.cat(parts, dim=1)

    def initial_memory(self, num_envs: int) -> Memory:
        return fresh_memory(self.spec, num_envs)

    def step(self, frame: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, Memory, None]:
        stacked, memory = stack_frames(frame, memory, self.num_frames)
        feed = {"obs": stacked.reshape(stacked.shape[0], -1).numpy().astype(np.float32)}
        if self.is_recurrent:
            feed["h_in"] = memory.hidden.numpy().astype(np.float32)
        out = self.session.run(None, feed)
        hidden = torch.from_numpy(out[1]) if self.is_recurrent else None
        return torch.from_numpy(out[0]), Memory(frames=memory.frames, fresh=memory.fresh, hidden=hidden), None


def load_program(program: bytes, spec: dict):
    """A policy behind the rollout interface from its program's bytes and spec: a torch.export program, or the
    deployable ONNX file (``spec['format'] == 'onnx'``), which then runs in onnxruntime as on a robot."""
    if spec.get("format", "pt2") == "onnx":
        return OnnxPolicy(program, spec)
    return load_pt2(program, spec)
