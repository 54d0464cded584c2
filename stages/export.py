"""The deployable policy: the pipeline's final model as ONNX and TorchScript, with what a robot needs to run it.

The upstream policy (the depth student by default) is recorded driving the
robot in simulation; its ONNX and TorchScript files replay the recorded
observation sequences, carrying their GRU state, and must give the same
actions (max abs difference under ``tolerance``). One batch-1 policy step is
timed on one CPU thread. The files, their metadata (joint order, default pose,
action scale, PD gains, observation layout, control rate, camera) and the
chain of models back to the first stage are registered as
``llp-deployable-policy``.
"""

from __future__ import annotations

from dataclasses import dataclass

from llp.config.schema import check, field
from llp.config.stage import TaskStageConfig


@dataclass(kw_only=True)
class ExportConfig(TaskStageConfig):
    """What to export and how it is checked."""

    policy: str = field(default="depth_student", doc="Upstream stage whose 'policy' output is exported.")
    task: str = field(default="locomotion", doc="Task of the recording env (conf/task/).")
    record_envs: int = field(default=4, doc="Envs recorded for the agreement check.")
    record_steps: int = field(default=150, doc="Policy steps recorded per env (3 s at 50 Hz).")
    tolerance: float = field(default=1e-4, doc="Largest allowed |action difference| of an exported file.")
    timing_calls: int = field(default=2000, doc="Timed batch-1 steps per format.")
    step_budget_ms: float = field(default=20.0, doc="A policy step must take less (median, one CPU thread).")

    def validate(self, path: str) -> None:
        check(self.record_envs >= 1, f"{path}.record_envs", "must be >= 1")
        check(self.record_steps >= 1, f"{path}.record_steps", "must be >= 1")
        check(self.tolerance > 0, f"{path}.tolerance", "must be positive")
        check(self.timing_calls >= 1, f"{path}.timing_calls", "must be >= 1")
        check(self.step_budget_ms > 0, f"{path}.step_budget_ms", "must be positive")


def record(policy, env_cfg, cfg: ExportConfig, seed: int):
    """The policy driving ``record_envs`` envs of ``env_cfg`` for ``record_steps`` steps: (frames [T, N, D],
    dones [T, N], actions [T, N, A]), the frames raw as the robot would feed them."""
    import numpy as np
    import torch

    from llp.sim.env import ParkourEnv

    env = ParkourEnv(env_cfg, cfg.record_envs, seed=seed)
    obs = env.reset()
    memory = policy.initial_memory(env.num_envs)
    frames, dones, actions = [], [], []
    with torch.no_grad():
        for _ in range(cfg.record_steps):
            frame = policy.observe(obs)
            action, memory, _ = policy.step(frame, memory)
            result = env.step(action)
            done = result.terminated | result.truncated
            memory = memory.reset(done)
            frames.append(frame.numpy().astype(np.float32))
            dones.append(done.numpy())
            actions.append(action.numpy())
            obs = result.obs
    return np.stack(frames), np.stack(dones), np.stack(actions)


def run(ctx, cfg: ExportConfig, inputs: dict[str, str]) -> dict[str, str]:
    """Export, check and time; returns {'deployable': models:/llp-deployable-policy/<v>}."""
    import json
    import tempfile
    from pathlib import Path

    import numpy as np
    import torch

    from llp.learn import deployable as D
    from llp.learn.export import PolicySpec
    from llp.skills.protocol import EvaluateConfig

    uri = inputs["policy"]
    frozen = ctx.frozen_policy(uri)
    policy = frozen.load()
    spec = PolicySpec(**frozen.spec)
    env_cfg = EvaluateConfig(task=cfg.task, robot=cfg.robot).env_config(
        action_joints=spec.action_joints, policy_spec=frozen.spec
    )
    frames, dones, actions = record(policy, env_cfg, cfg, ctx.seed)
    step = D.PolicyStep(policy.module, spec)  # a torch.export module: always in inference mode
    checks, timing = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "deployable"
        folder.mkdir()
        onnx_path = D.to_onnx(step, folder / "policy.onnx")
        ts_path = D.to_torchscript(step, folder / "policy_torchscript.pt")
        session = D.onnx_session(onnx_path)
        scripted = torch.jit.load(str(ts_path))
        for name, fn, batch in (
            ("onnx", D.onnx_step(session, spec), None),
            ("torchscript", D.torchscript_step(scripted, spec), 1),
        ):
            diff = float(np.abs(D.replay(fn, spec, frames, dones, batch) - actions).max())
            checks[name] = diff
            if not diff < cfg.tolerance:
                raise RuntimeError(
                    f"the {name} export does not reproduce {uri}: max |action difference| {diff:.2e} over "
                    f"{frames.shape[0]} recorded steps of {frames.shape[1]} envs (tolerance {cfg.tolerance:.0e})"
                )
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                timing[name] = D.step_time_ms(fn, spec, cfg.timing_calls)
            finally:
                torch.set_num_threads(threads)
        slow = {k: v["median_ms"] for k, v in timing.items() if v["median_ms"] >= cfg.step_budget_ms}
        if slow:
            raise RuntimeError(f"a policy step takes {slow} ms (median, one thread): over {cfg.step_budget_ms} ms")
        chain = ctx.lineage_chain(uri)
        inputs_io, outputs_io = D.io_names(spec)
        meta = {
            "policy": uri,
            "inputs": inputs_io,
            "outputs": outputs_io,
            "obs": "the last num_frames frames, oldest first, each the obs_layout terms in order, raw (the "
            "normalisation is inside); h_in: zeros at an episode's start, then the previous step's h_out",
            "spec": frozen.spec,
            "agreement_max_abs_diff": checks,
            "recorded": {"envs": int(frames.shape[1]), "steps": int(frames.shape[0]), "resets": int(dones.sum())},
            "step_time_ms_one_thread": timing,
            "lineage": chain,
        }
        (folder / "policy.json").write_text(json.dumps(meta, indent=1))
        ctx.log_metrics(
            {
                "export/onnx_max_abs_diff": checks["onnx"],
                "export/torchscript_max_abs_diff": checks["torchscript"],
                "export/onnx_step_ms": timing["onnx"]["median_ms"],
                "export/torchscript_step_ms": timing["torchscript"]["median_ms"],
            },
            step=0,
        )
        out = ctx.register_dataset("deployable", folder)
    ctx.tag_version(out, "llp.lineage", json.dumps([c["uri"] for c in chain]))
    print(f"[llp] export: {out}: ONNX and TorchScript agree with {uri} to {max(checks.values()):.1e}; a step "
          f"takes {timing['onnx']['median_ms']:.2f} ms (ONNX), {timing['torchscript']['median_ms']:.2f} ms "
          f"(TorchScript) on one thread", flush=True)  # fmt: skip
    return {"deployable": out}
