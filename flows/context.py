"""StageContext: what a stage may ask of the platform (and nothing of Prefect, Ray or MLflow directly).

Metrics, parameters, pictures and checkpoints go to the stage's MLflow run;
policies are registered with lineage; inputs load by ``models:/`` URI; Ray is
started on demand; a progress bar shows iteration, env-steps/s and reward.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llp.config.resources import ResourcesConfig
from llp.flows import tracking
from llp.flows.progress import ProgressBar
from llp.learn.phases import Phase


def parse_faults(spec: str, stages: list[str] | None = None) -> list[tuple[str, int, str]]:
    """``LLP_INJECT_FAULT``'s drills as (stage, iteration, kind): items ``<stage>@<iteration>[:kind]``, comma-
    separated, kind one of '' (crash), nan<K>, killsim, pause<S>. A malformed item, or a stage not in ``stages``,
    is a ValueError naming it (a misspelled drill must not pass silently as no drill)."""
    out = []
    for item in (i.strip() for i in spec.split(",") if i.strip()):
        stage, _, rest = item.partition("@")
        at, _, kind = rest.partition(":")
        known = (kind == "" or kind == "killsim" or (kind.startswith("nan") and kind[3:].isdigit())
                 or (kind.startswith("pause") and kind[5:].replace(".", "", 1).isdigit()))  # fmt: skip
        if not stage or not at.isdigit() or not known:
            raise ValueError(f"LLP_INJECT_FAULT item {item!r}: expected <stage>@<iteration>[:nan<K>|:killsim|"
                             ":pause<S>], e.g. locomotion_teacher@3:killsim")  # fmt: skip
        if stages is not None and stage not in stages:
            raise ValueError(f"LLP_INJECT_FAULT item {item!r}: {stage!r} is not a stage of this pipeline "
                             f"({', '.join(stages)})")  # fmt: skip
        out.append((stage, int(at), kind))
    return out


REJECTED_CHECKPOINT_TAG = "llp.rejected_checkpoint"  # sha256 of a stage run's latest.pt that did not load


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
    attempt: int = 1  # Prefect's attempt of this stage (2 on its first retry)
    metrics_logged: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    pending: list[tuple[int, dict]] = field(default_factory=list)  # iterations not yet covered by a checkpoint
    uploads: CheckpointUploads | None = None

    # ---------------------------------------------------------------- logging
    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        import time

        from mlflow import MlflowClient
        from mlflow.entities import Metric

        now = int(metrics.get(MEASURED_AT, time.time() * 1000))
        batch = [Metric(_metric_key(k), float(v), now, step) for k, v in metrics.items() if _kept(k, v)]
        MlflowClient().log_batch(self.mlflow_run_id, metrics=batch)
        self.metrics_logged += len(batch)

    def log_metric_steps(self, steps: list[tuple[int, dict]], limit: int = 1000) -> int:
        """Send the metrics of several steps in one request (MLflow takes up to 1000 values per batch);
        returns how many steps went."""
        import time

        from mlflow import MlflowClient
        from mlflow.entities import Metric

        now, batch, count = int(time.time() * 1000), [], 0
        for step, metrics in steps:
            at = int(metrics.get(MEASURED_AT, now))
            values = [Metric(_metric_key(k), float(v), at, step) for k, v in metrics.items() if _kept(k, v)]
            if batch and len(batch) + len(values) > limit:
                break
            batch += values
            count += 1
        MlflowClient().log_batch(self.mlflow_run_id, metrics=batch)
        self.metrics_logged += len(batch)
        return count

    def log_iteration(self, metrics: dict[str, float], step: int) -> None:
        """One training iteration's metrics, sent to MLflow with the next checkpoint: a stage that crashes
        redoes the iterations after its last checkpoint, and each iteration is then logged exactly once.
        Its MLflow timestamp is when the iteration ended, however late the metrics arrive."""
        if step <= self.extra.get("logged_through", -1):  # logged before a crash: the first values stand
            return
        self.pending.append((step, {**metrics, MEASURED_AT: time.time() * 1000}))
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

    def log_learning_curve(self, history: list[dict], panels: list[tuple[str, str]] | None = None) -> None:
        """A panel per (metric key, title) over the iterations (default: episode return and length)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        if not history:
            return
        panels = panels or [
            ("episode/return", "mean episode return"),
            ("episode/length", "mean episode length (steps)"),
        ]
        fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.5), squeeze=False)
        for ax, (key, label) in zip(axes[0], panels):
            xs = [i for i, h in enumerate(history) if key in h]
            ys = [history[i][key] for i in xs]
            ax.plot(xs, ys, lw=1, alpha=0.35 if len(xs) > 50 else 1.0)
            if len(xs) > 50:  # noisy per-iteration values: their running mean over 2% of the run on top
                k = max(5, len(xs) // 50)
                windows = [ys[max(0, j - k + 1) : j + 1] for j in range(len(ys))]
                smooth = [sum(w) / len(w) for w in windows]
                ax.plot(xs, smooth, lw=1.5, color="C0")
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
    def checkpoint_dir(self) -> Path:
        """This stage's local checkpoint folder in the run's folder (made on first use)."""
        path = self.run_dir / "checkpoints" / self.stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    def save_checkpoint(self, trainer, iteration: int, history: list) -> None:
        """Write the trainer's full state locally; a background thread uploads it as the stage run's latest
        checkpoint, then sends the metrics of the iterations it covers. Training goes on meanwhile, also while
        the tracking server is unreachable: uploads wait for it, in order, and a newer checkpoint supersedes
        older ones still waiting."""
        local = Path(trainer.save(str(self.checkpoint_dir() / "latest.pt"), iteration, history))
        staged = self.checkpoint_dir() / f"upload-{iteration}.pt"
        shutil.copyfile(local, staged)
        metrics, self.pending = self.pending, []
        if self.uploads is None:
            self.uploads = CheckpointUploads(self)
        self.uploads.submit(staged, iteration, metrics)

    def drain_uploads(self, timeout: float = 900.0) -> None:
        """Wait until every checkpoint and metric is with the tracking server (or raise after ``timeout``)."""
        if self.uploads is not None:
            self.uploads.drain(timeout)

    def restore_checkpoint(self, trainer) -> tuple[int, list]:
        """Resume ``trainer`` from this stage run's latest checkpoint: (next iteration, history so far)."""
        self.drain_uploads()
        path = tracking.download_checkpoint(self.mlflow_run_id, self.checkpoint_dir() / "download")
        if path is None:
            return 0, []
        from mlflow import MlflowClient

        logged = MlflowClient().get_metric_history(self.mlflow_run_id, "perf/env_steps")
        self.extra["logged_through"] = max((m.step for m in logged), default=-1)  # redone iterations: logged once
        if not self._usable_checkpoint(path):
            return 0, []
        state = trainer.load(str(path))
        print(f"[llp] {self.stage}: continues after the checkpoint of iteration {state['iteration']}", flush=True)
        return state["iteration"] + 1, list(state["history"])

    def _usable_checkpoint(self, path: Path) -> bool:
        """Whether the downloaded checkpoint ``path`` loads. One that does not is set aside (kept in this stage's
        checkpoint folder under its digest, its digest tagged on the stage run so that no later attempt loads it
        again) and the stage starts from scratch, saying so: a damaged file must not fail every retry."""
        import hashlib

        from llp.learn.checkpoint import check_checkpoint

        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        where = f"checkpoints/latest.pt of MLflow run {self.mlflow_run_id}"
        rejected = tracking.run_tag(self.mlflow_run_id, REJECTED_CHECKPOINT_TAG)
        why = "set aside by an earlier attempt" if rejected == digest else check_checkpoint(path)
        if why is None:
            return True
        aside = self.checkpoint_dir() / f"rejected-{digest[:16]}.pt"
        path.replace(aside)
        tracking.set_run_tag(self.mlflow_run_id, REJECTED_CHECKPOINT_TAG, digest)
        print(f"[llp] {self.stage}: {where} does not load ({why}); set aside as {aside}; the stage starts again "
              "from iteration 0", flush=True)  # fmt: skip
        return False

    def train(self, pool, phases: int | list[Phase], checkpoint_every: int, keys, start: int = 0,
              history: list | None = None, offset: int = 0, label: str | None = None):  # fmt: skip
        """The training loop of every stage: its phases one after another (an int: one phase of that many
        iterations), from iteration ``start`` (a resumed stage: the one after its checkpoint). Each iteration's
        metrics are logged (they reach MLflow with the checkpoint that covers them) and those named in ``keys``
        kept in ``history`` (the learning curve); a checkpoint every ``checkpoint_every`` iterations and at the
        end of each phase, a fault point after each iteration. Steps are ``offset`` + the iteration (a stage
        that trains several pools, one after another, numbers them on). Returns the pool (a phase may have
        switched it)."""
        phases = [Phase("train", phases)] if isinstance(phases, int) else list(phases)
        history = [] if history is None else history
        total = sum(p.iterations for p in phases)
        progress = self.progress(total, start, label)
        first = 0
        for phase in phases:
            end = first + phase.iterations
            if end > start and phase.iterations > 0:
                if phase.begin is not None:
                    pool = phase.begin(pool, start > first) or pool
                for it in range(max(start, first), end):
                    metrics = {**pool.iteration(), **phase.metrics}
                    history.append({k: metrics[k] for k in keys if k in metrics})
                    self.log_iteration(metrics, step=offset + it)
                    progress.update(it, metrics)
                    if (it + 1) % checkpoint_every == 0 or it + 1 == end:  # and at the end of every phase
                        self.save_checkpoint(pool, offset + it, history)
                    self.fault_point(offset + it, pool)
            first = end
        return pool

    def fault_point(self, iteration: int, trainer=None) -> None:
        """Chaos drills, each once per run (a marker in the run folder): LLP_INJECT_FAULT=<stage>@<iteration>
        crashes the stage after that iteration; <stage>@<iteration>:nan<K> makes the trainer's next K updates
        see a NaN reward; :killsim kills simulator actor 0's process (Ray replaces it); :pause<S> waits S seconds
        (a window for outside drills: removing a node, stopping a server). Several, comma-separated, may be
        given. LLP_INJECT_FAULT_RUNS=<run id>,... limits the drills to those pipeline runs (one trial of a
        sweep). Stages call it after every iteration, checkpointed or not."""
        spec = os.environ.get("LLP_INJECT_FAULT", "")
        if not spec:
            return
        runs = [r for r in os.environ.get("LLP_INJECT_FAULT_RUNS", "").split(",") if r]
        if runs and self.pipeline_run not in runs:
            return
        for stage, at, kind in parse_faults(spec):
            marker = self.run_dir / f".fault-{stage}-{at}{kind}"
            if stage != self.stage or at != iteration or marker.exists():
                continue
            marker.write_text("fired")
            if kind.startswith("nan") and kind[3:].isdigit() and trainer is not None:
                print(f"[llp] {stage}: injected fault: NaN rewards in the next {kind[3:]} updates", flush=True)
                trainer.inject_nonfinite(int(kind[3:]))
            elif kind == "killsim" and trainer is not None:
                print(
                    f"[llp] {stage}: injected fault: simulator actor 0 killed after iteration {iteration}", flush=True
                )
                trainer.kill_simulator(0)
            elif kind.startswith("pause") and kind[5:].replace(".", "", 1).isdigit():
                self.drain_uploads()  # the window opens with every checkpoint and metric so far with the server
                print(f"[llp] {stage}: injected pause of {kind[5:]} s after iteration {iteration}", flush=True)
                time.sleep(float(kind[5:]))
            else:
                print(f"[llp] {stage}: injected fault: the stage crashes after iteration {iteration}", flush=True)
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

    def set_tag(self, key: str, value: str) -> None:
        """A tag on this stage's MLflow run (what a resumed attempt of the stage reads back with ``tag``)."""
        tracking.set_run_tag(self.mlflow_run_id, key, value)

    def tag(self, key: str) -> str | None:
        return tracking.run_tag(self.mlflow_run_id, key)

    def tag_version(self, uri: str, key: str, value: str) -> None:
        """A tag on a registered version (a model or dataset this stage registered)."""
        tracking.tag_version(uri, key, value)

    def lineage_chain(self, uri: str) -> list[dict[str, str]]:
        """The registered versions ``uri`` descends from, itself first (``flows.tracking.lineage_chain``)."""
        return tracking.lineage_chain(uri)

    def frozen_policy(self, uri: str):
        """A registered policy as simulator actors host it (a teacher that labels states)."""
        from llp.learn.spec import FrozenPolicy

        program, spec = tracking.download_policy(uri)
        return FrozenPolicy(uri, program, spec)


class CheckpointUploads:
    """One background thread that sends checkpoints and their metrics to MLflow, in order, retrying while
    the server is unreachable. Waiting jobs are merged: the newest checkpoint, every waiting metric."""

    RETRY_S = 3.0
    SLOW_S = 10.0  # an upload taking longer than this is reported (MLflow's client retries for minutes itself)

    def __init__(self, ctx: StageContext):
        import threading

        self.ctx = ctx
        self.jobs: list[tuple[Path, int, list]] = []
        self.lock = threading.Condition()
        self.busy = False
        self.started = 0.0  # when the job in flight was taken
        self.failing_since: float | None = None  # when it was reported as waiting for the server
        self.thread = threading.Thread(target=self._work, name=f"llp-uploads-{ctx.stage}", daemon=True)
        self.thread.start()

    def submit(self, staged: Path, iteration: int, metrics: list) -> None:
        import time

        with self.lock:
            self.jobs.append((staged, iteration, metrics))
            self.lock.notify_all()
            if self.busy and self.failing_since is None and time.monotonic() - self.started > self.SLOW_S:
                self._report_waiting(f"{self.SLOW_S:.0f} s without a reply", time.monotonic())

    def _report_waiting(self, why: str, since: float) -> None:
        self.failing_since = since
        print(f"\n[llp] {self.ctx.stage}: the tracking server is not answering ({why}); training goes on, "
              f"its checkpoints and metrics wait", flush=True)  # fmt: skip

    def drain(self, timeout: float) -> None:
        import time

        deadline = time.monotonic() + timeout
        with self.lock:
            while self.jobs or self.busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    waiting = [it for _, it, _ in self.jobs]
                    raise RuntimeError(
                        f"{self.ctx.stage}: the tracking server did not take checkpoints {waiting} within "
                        f"{timeout:.0f} s; they are kept in {self.ctx.checkpoint_dir()}"
                    )
                self.lock.wait(min(left, 1.0))

    def _take(self) -> list:
        """The next job: [staged checkpoint or None once sent, its iteration, metrics not yet sent]."""
        import time

        with self.lock:
            while not self.jobs:
                self.lock.wait()
            self.busy, self.started = True, time.monotonic()
            return self._merge([])

    def _merge(self, metrics: list) -> list:
        """Fold the waiting jobs (lock held) into one: the newest checkpoint and every metric, in order."""
        jobs, self.jobs = self.jobs, []
        for staged, _, _ in jobs[:-1]:  # superseded by the newest checkpoint
            staged.unlink(missing_ok=True)
        staged, iteration, _ = jobs[-1]
        return [staged, iteration, metrics + [m for _, _, ms in jobs for m in ms]]

    def _work(self) -> None:
        import time

        job = None
        while True:
            job = job or self._take()
            staged, iteration, metrics = job
            try:
                # metrics first: a crash between the two then redoes iterations whose metrics are already
                # logged (a resumed stage skips those), never the reverse, which would lose them for good
                while metrics:  # each sent once: a retry resumes after the last batch that went through
                    sent = self.ctx.log_metric_steps(metrics)
                    del metrics[:sent]
                if staged is not None:
                    tracking.log_checkpoint(self.ctx.mlflow_run_id, staged, iteration)
                    staged.unlink(missing_ok=True)
                    job[0] = None
            except Exception as err:  # noqa: BLE001 - any failure to reach the server is retried
                with self.lock:
                    if self.failing_since is None:
                        self._report_waiting(type(err).__name__, self.started)
                time.sleep(self.RETRY_S)
                with self.lock:
                    if self.jobs:  # newer checkpoints arrived meanwhile: send the newest, with every metric
                        if job[0] is not None:
                            job[0].unlink(missing_ok=True)
                        job = self._merge(metrics)
                continue
            job = None
            with self.lock:
                if self.failing_since is not None:
                    down = time.monotonic() - self.failing_since
                    print(f"\n[llp] {self.ctx.stage}: the tracking server is back after {down:.0f} s; "
                          f"checkpoint {iteration} sent", flush=True)  # fmt: skip
                    self.failing_since = None
                self.busy = False
                self.lock.notify_all()


def _metric_key(key: str) -> str:
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in key)


MEASURED_AT = "_measured_at_ms"  # carried with an iteration's metrics until they are sent, not a metric


def _kept(key: str, value: Any) -> bool:
    return key != MEASURED_AT and _finite(value)


def _finite(value: Any) -> bool:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    return v == v and v not in (float("inf"), float("-inf"))
