"""What one stage execution is, and running it: the ``PipelineRun`` every stage of an invocation shares (its
config, ledger, MLflow parent run and console), the ``StageRun`` of one stage (what its cache key hashes), and
``execute_stage``, the body of the stage task of ``llp.flows.stage_flow``. No Prefect here: Prefect is imported
only after the process has been pointed at its server (``llp.flows.pipeline.prepare_prefect``)."""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llp.config.pipeline import PipelineConfig, config_hash
from llp.config.schema import build
from llp.flows.ledger import Ledger


@dataclass
class PipelineRun:
    """One invocation of a pipeline run, shared by its stages: what a stage task needs beyond its parameters."""

    cfg: PipelineConfig
    run_id: str
    run_dir: Path
    parent_id: str  # the MLflow pipeline run
    ledger: Ledger
    stream: Any  # where progress lines go
    code: str  # llp.flows.pipeline.code_version()
    results_dir: Path  # Prefect's persisted task results
    external: dict[tuple[str, str], str] = field(default_factory=dict)  # (stage, input) -> URI from the registry
    force: list[str] = field(default_factory=list)  # stages whose cache is ignored


@dataclass(frozen=True)
class StageRun:
    """One stage of a pipeline run, as its task receives it: everything its cache key hashes."""

    stage: str
    stage_cfg: dict
    resources: dict
    inputs: dict  # input name -> models:/ URI
    input_versions: dict  # input name -> name/version
    code: str
    seed: int
    sim: dict

    def cache_key(self) -> str:
        return stage_cache_key(self.stage, self.stage_cfg, self.resources, self.input_versions, self.code, self.seed,
                               self.sim)  # fmt: skip


def stage_cache_key(stage: str, stage_cfg: dict, resources: dict, input_versions: dict, code: str, seed: int,
                    sim: dict) -> str:  # fmt: skip
    """Everything that changes a stage's result: its config, resources, physics engine, inputs, code and seed."""
    payload = {
        "stage": stage,
        "config": stage_cfg,
        "resources": resources,
        "sim": sim,
        "inputs": input_versions,
        "code": code,
        "seed": seed,
    }
    return f"llp-{stage}-{config_hash(payload)}"


def stage_seed(cfg: PipelineConfig, stage: str) -> int:
    """Each stage's own seed, from the pipeline seed and the stage's name: a stage added to the pipeline leaves
    the others' seeds (their training and evaluation trials) as they were."""
    import zlib

    return (cfg.seed + zlib.crc32(stage.encode())) % (1 << 31)


def produced(outputs: dict[str, dict], upstream: str, output: str, stage: str, run_id: str) -> str:
    """``upstream``'s ``output`` from this invocation, or an error that names who lacks what and how to redo it."""
    try:
        return outputs[upstream][output]
    except KeyError:
        raise ValueError(
            f"stage {stage!r} needs {upstream}'s {output!r}, which that stage did not produce in this run; "
            f"re-run it with `llp resume {run_id} --force {upstream}`"
        ) from None


def outputs_exist(outputs: dict) -> bool:
    from mlflow import MlflowClient

    client = MlflowClient()
    for uri in outputs.values():
        if isinstance(uri, str) and uri.startswith("models:/"):
            name, version = uri[len("models:/") :].rsplit("/", 1)
            try:
                client.get_model_version(name, version)
            except Exception:
                return False
    return True


def execute_stage(run: PipelineRun, job: StageRun, attempt: int) -> dict:
    """The body of a stage task: find or start the stage's MLflow run, build its context, run the stage."""
    import mlflow

    from llp.config.resources import ResourcesConfig
    from llp.flows import tracking
    from llp.flows.context import StageContext
    from llp.flows.tracking import flatten
    from llp.sim.backend import simulating_on
    from llp.stages.registry import stage_spec

    cfg, run_id, run_dir, parent_id, ledger, stream = (run.cfg, run.run_id, run.run_dir, run.parent_id, run.ledger,
                                                       run.stream)  # fmt: skip
    stage, stage_cfg, resources, sim = job.stage, job.stage_cfg, job.resources, job.sim
    inputs, seed = job.inputs, job.seed
    spec = stage_spec(cfg, stage)
    key = job.cache_key()
    ledger.stage_started(stage, attempt)
    print(f"[llp] {stage}: running (attempt {attempt})", file=stream, flush=True)
    identity = {"llp.pipeline_run": run_id, "llp.stage": stage, "llp.cache_key": key}
    previous = tracking.find_run(identity, cfg.experiment)
    resume_id = previous.info.run_id if previous is not None and previous.info.status != "FINISHED" else None
    lineage = {
        "llp.inputs": json.dumps(inputs, sort_keys=True),
        "llp.config_hash": config_hash({"stage": stage_cfg, "resources": resources, "seed": seed}),
        "llp.code_version": job.code,
        "llp.pipeline_run": run_id,
        "llp.stage": stage,
        "llp.cache_key": key,
        "llp.host": tracking.host_description(),  # the driver's machine: same seed, same CPU type, same numbers
    }
    try:
        with mlflow.start_run(
            run_id=resume_id,
            run_name=None if resume_id else stage,
            parent_run_id=parent_id,
            tags=None if resume_id else {**identity, "llp.kind": "stage", "llp.host": lineage["llp.host"]},
        ) as run:
            if resume_id is None:
                mlflow.log_params(
                    {
                        k: v[:6000]
                        for k, v in flatten(
                            {"stage": stage_cfg, "resources": resources, "sim": sim, "inputs": inputs}
                        ).items()
                    }
                )
            ledger.stage_update(stage, mlflow_run=run.info.run_id, mlflow_link=tracking.run_link(run.info.run_id))
            print(
                f"[llp] {stage}: MLflow run {tracking.run_link(run.info.run_id)}" + (" (resumed)" if resume_id else ""),
                file=stream,
                flush=True,
            )
            ctx = StageContext(
                stage=stage,
                pipeline_run=run_id,
                run_dir=run_dir,
                mlflow_run_id=run.info.run_id,
                seed=seed,
                resources=build(ResourcesConfig, resources),
                model_names=spec.outputs,
                lineage=lineage,
                alias=f"run-{run_id}",
                attempt=attempt,
            )
            t0 = time.perf_counter()
            try:
                with simulating_on(sim["backend"], sim["device"]):  # the env configs the stage builds
                    typed = build(spec.config, {k: v for k, v in stage_cfg.items() if k != "kind"}, f"stages.{stage}")
                    outputs = spec.run(ctx, typed, inputs)
            except Exception:
                ctx.drain_uploads()  # a retry resumes from the checkpoints this attempt sent
                raise
            except BaseException:  # Ctrl-C, SIGTERM: send what can be sent quickly, then stop
                with contextlib.suppress(Exception):
                    ctx.drain_uploads(timeout=30.0)
                raise
            ctx.drain_uploads()
            st = ledger.stage(stage)
            st["compute_s"] = st.get("compute_s", 0.0) + time.perf_counter() - t0
            ledger.save()
    except Exception as err:
        ledger.stage_update(stage, state="failed", error=traceback.format_exc(limit=3))
        # the reason on the console too, not only in ledger.json (Prefect retries the stage, or the run stops)
        print(f"[llp] {stage}: attempt {attempt} failed: {type(err).__name__}: {str(err)[:500]}", file=stream,
              flush=True)  # fmt: skip
        raise
    except BaseException as err:
        ledger.stage_update(stage, state="interrupted", ended=time.time(), error=repr(err))
        stage_run = ledger.stage(stage).get("mlflow_run")
        if stage_run:  # mlflow's context ends a run FAILED on any exception; interrupted is KILLED, as the pipeline's
            with contextlib.suppress(Exception):
                mlflow.MlflowClient().set_terminated(stage_run, "KILLED")
        raise
    return {"outputs": outputs, "mlflow_run_id": run.info.run_id, "cache_key": key, "pipeline_run": run_id}
