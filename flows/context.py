"""StageContext: what a stage may ask of the platform (and nothing of Prefect, Ray or MLflow directly).

Metrics, parameters, pictures and checkpoints go to the stage's MLflow run;
policies are registered with lineage; inputs load by ``models:/`` URI; Ray is
started on demand; a progress bar shows iteration, env-steps/s and reward.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llp.config.resources import ResourcesConfig
from llp.flows import tracking
from llp.flows.progress import ProgressBar


class InjectedFault(RuntimeError):
    """Raised by ``LLP_INJECT_FAULT`` (tests and chaos drills): a crash at a chosen point of a stage."""


@dataclass
class StageContext:
    stage: str
    pipeline_run: str
    run_dir: Path
    mlflow_run_id: str
    seed: int
    resources: ResourcesConfig
    model_names: dict[str, str]  # output name -> registered model name
    lineage: dict[str, str]  # tags put on every registered version
    alias: str
    metrics_logged: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    pending: list[tuple[int, dict]] = field(default_factory=list)  # iterations not yet covered by a checkpoint

    # ---------------------------------------------------------------- logging
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        import time

        from mlflow import MlflowClient
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(_metric_key(k), float(v), now, step) for k, v in metrics.items() if _finite(v)]
        MlflowClient().log_batch(self.mlflow_run_id, metrics=batch)
        self.metrics_logged += len(batch)

    def log_iteration(self, metrics: dict[str, float], step: int) -> None:
        """One training iteration's metrics, sent to MLflow with the next checkpoint: a stage that crashes
        redoes the iterations after its last checkpoint, and each iteration is then logged exactly once."""
        self.pending.append((step, metrics))
        undone = metrics.get("faults/nonfinite_updates", 0.0)
        if undone > self.extra.get("nonfinite_updates", 0.0):
            self.extra["nonfinite_updates"] = undone
            lr = metrics.get("policy/learning_rate", float("nan"))
            print(f"\n[llp] {self.stage}: iteration {step}: an update left NaN or Inf and was undone "
                  f"({undone:.0f} so far); learning rate lowered to {lr:.2e}", flush=True)  # fmt: skip

    def _flush_iterations(self) -> None:
        for step, metrics in self.pending:
            self.log_metrics(metrics, step)
        self.pending.clear()

    def log_figure(self, fig, artifact_file: str) -> None:
        from mlflow import MlflowClient

        MlflowClient().log_figure(self.mlflow_run_id, fig, artifact_file)
        import matplotlib.pyplot as plt

        plt.close(fig)

    def log_file(self, local: Path, artifact_path: str) -> None:
        from mlflow import MlflowClient

        MlflowClient().log_artifact(self.mlflow_run_id, str(local), artifact_path)

    def log_json(self, data: Any, artifact_file: str) -> None:
        tracking.log_json(self.mlflow_run_id, data, artifact_file)

    def log_learning_curve(self, history: list[dict]) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if not history:
            return
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
        for ax, key, label in (
            (axes[0], "episode/return", "mean episode return"),
            (axes[1], "episode/length", "mean episode length (steps)"),
        ):
            xs = [i for i, h in enumerate(history) if key in h]
            ax.plot(xs, [history[i][key] for i in xs], lw=1)
            ax.set_xlabel("iteration")
            ax.set_title(label)
            ax.grid(alpha=0.3)
        fig.suptitle(f"{self.stage} ({self.pipeline_run})")
        fig.tight_layout()
        self.log_figure(fig, "plots/learning_curve.png")

    def progress(self, total: int, start: int = 0, label: str | None = None) -> ProgressBar:
        return ProgressBar(label or self.stage, total, start)

    # ---------------------------------------------------------------- compute
    def init_ray(self) -> None:
        from llp.infra.ray_runtime import init_ray

        init_ray(self.run_dir / "ray")

    # ---------------------------------------------------------------- checkpoints
    def _checkpoint_dir(self) -> Path:
        path = self.run_dir / "checkpoints" / self.stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    def save_checkpoint(self, trainer, iteration: int, history: list) -> None:
        """Write the trainer's full state locally and upload it as the stage run's latest checkpoint."""
        local = Path(trainer.save(str(self._checkpoint_dir() / "latest.pt"), iteration, history))
        tracking.log_checkpoint(self.mlflow_run_id, local, iteration)
        self._flush_iterations()

    def restore_checkpoint(self, trainer) -> tuple[int, list]:
        """Resume ``trainer`` from this stage run's latest checkpoint: (next iteration, history so far)."""
        path = tracking.download_checkpoint(self.mlflow_run_id, self._checkpoint_dir() / "download")
        if path is None:
            return 0, []
        state = trainer.load(str(path))
        return state["iteration"] + 1, list(state["history"])

    def fault_point(self, iteration: int, trainer=None) -> None:
        """Chaos drills, each once per run (a marker in the run folder): LLP_INJECT_FAULT=<stage>@<iteration>
        crashes the stage after that iteration; <stage>@<iteration>:nan<K> makes the trainer's next K updates
        see a NaN reward. Stages call it after every iteration, checkpointed or not."""
        spec = os.environ.get("LLP_INJECT_FAULT", "")
        if not spec:
            return
        for item in spec.split(","):
            stage, _, at = item.partition("@")
            at, _, kind = at.partition(":")
            marker = self.run_dir / f".fault-{stage}-{at}{kind}"
            if stage != self.stage or not at.isdigit() or int(at) != iteration or marker.exists():
                continue
            marker.write_text("fired")
            if kind.startswith("nan") and kind[3:].isdigit() and trainer is not None:
                print(f"[llp] {stage}: injected fault: NaN rewards in the next {kind[3:]} updates", flush=True)
                trainer.inject_nonfinite(int(kind[3:]))
            else:
                raise InjectedFault(f"injected fault in {stage} after iteration {iteration}")

    # ---------------------------------------------------------------- models
    def register_policy(self, output: str, module, spec: dict, input_example) -> str:
        name = self.model_names[output]
        return tracking.register_policy(self.mlflow_run_id, name, module, spec, input_example, self.lineage, self.alias)

    def register_dataset(self, output: str, local: Path) -> str:
        """Register a file or folder as this stage's output ``output`` (versioned, lineage-tagged)."""
        return tracking.register_dataset(self.mlflow_run_id, self.model_names[output], local, self.lineage, self.alias)

    def load_dataset(self, uri: str) -> Path:
        """The files of an input dataset, downloaded into this run's folder."""
        return tracking.download_dataset(uri, self.run_dir / "inputs" / self.stage)

    def load_policy(self, uri: str):
        return tracking.load_policy(uri)

    def frozen_policy(self, uri: str):
        """A registered policy as simulator actors host it (a teacher that labels states)."""
        from llp.learn.spec import FrozenPolicy

        program, spec = tracking.download_policy(uri)
        return FrozenPolicy(uri, program, spec)


def _metric_key(key: str) -> str:
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in key)


def _finite(value: Any) -> bool:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    return v == v and v not in (float("inf"), float("-inf"))


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested config -> {'a.b.c': 'value'} for MLflow params."""
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
    else:
        out[prefix.rstrip(".")] = json.dumps(data) if not isinstance(data, str) else data
    return out
