"""The Prefect flow of a pipeline run, ``llp-pipeline``, and its stage task, defined once.

Prefect reads its settings when it is first imported, so this module is imported only after
``llp.flows.pipeline.prepare_prefect`` has pointed the process at a server. What a flow run needs beyond its
parameters (the config, the ledger, the MLflow pipeline run, the console) is the ``PipelineRun`` that
``run_pipeline`` puts in ``ACTIVE`` under the run's id before it starts the flow.
"""

from __future__ import annotations

import logging
import os
import time

from prefect import flow, task
from prefect.runtime import flow_run, task_run

from llp.config.pipeline import resolved
from llp.flows.stage_run import PipelineRun, StageRun, execute_stage, outputs_exist, produced, stage_seed

ACTIVE: dict[str, PipelineRun] = {}  # run id -> the invocation this process is running


class _OneLine(logging.Filter):
    """Prefect's failure records without their traceback: a failed stage's reason is one line of its own
    (`[llp] <stage>: attempt N failed: ...`), and the full traceback is in the ledger, not 80-150 console lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def _quiet_prefect_tracebacks() -> None:
    loggers = [logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict) if n.startswith("prefect")]
    for handler in {h for lg in [logging.getLogger(), *loggers] for h in lg.handlers}:
        if not any(isinstance(f, _OneLine) for f in handler.filters):
            handler.addFilter(_OneLine())


def _cache_key(_ctx, params: dict) -> str:
    fields = ("stage", "stage_cfg", "resources", "inputs", "input_versions", "code", "seed", "sim")
    return StageRun(**{k: params[k] for k in fields}).cache_key()


@task(task_run_name="{stage}", cache_key_fn=_cache_key, persist_result=True, result_serializer="json")
def stage_task(run_id: str, stage: str, stage_cfg: dict, resources: dict, inputs: dict, input_versions: dict,
               code: str, seed: int, sim: dict) -> dict:  # fmt: skip
    """One stage, retried by Prefect; its result (the outputs it registered) is cached under its cache key."""
    job = StageRun(stage, stage_cfg, resources, inputs, input_versions, code, seed, sim)
    return execute_stage(ACTIVE[run_id], job, task_run.run_count)


def _submit(run: PipelineRun, job: StageRun, retries: int, refresh: bool):
    options = stage_task.with_options(retries=retries, retry_delay_seconds=1, refresh_cache=refresh,
                                      result_storage=run.results_dir)  # fmt: skip
    return options(run.run_id, job.stage, job.stage_cfg, job.resources, job.inputs, job.input_versions, job.code,
                   job.seed, job.sim, return_state=True)  # fmt: skip


@flow(name="llp-pipeline", flow_run_name="{run_id}", log_prints=False)
def pipeline_flow(run_id: str, stages: list[str]) -> dict:
    """The stages in order, each from its inputs: an upstream stage's outputs of this run, or the registry's."""
    from mlflow import MlflowClient

    from llp.flows import tracking
    from llp.stages.registry import input_source, stage_config, stage_spec

    run = ACTIVE[run_id]
    cfg, ledger, stream = run.cfg, run.ledger, run.stream
    _quiet_prefect_tracebacks()  # Prefect has set up its logging by now
    ledger.set(prefect_flow_run=str(flow_run.id), prefect_api=os.environ.get("PREFECT_API_URL"))
    print(f"[llp] pipeline run {run_id}: Prefect flow run {flow_run.id} ({os.environ.get('PREFECT_API_URL')})",
          file=stream, flush=True)  # fmt: skip
    print(f"[llp] MLflow: {tracking.run_link(run.parent_id)}", file=stream, flush=True)
    outputs: dict[str, dict] = {}
    resources, sim = resolved(cfg)["resources"], resolved(cfg)["sim"]
    for name in stages:
        spec, typed = stage_spec(cfg, name), stage_config(cfg, name)
        inputs = {}
        for input_name, source in spec.inputs(typed).items():
            upstream, output = input_source(input_name, source)  # an upstream stage's output
            made = run.external.get((name, input_name))
            inputs[input_name] = made or produced(outputs, upstream, output, name, run_id)
        versions = {k: "/".join(str(p) for p in tracking.parse_model_uri(v)[:2]) for k, v in inputs.items()}
        job = StageRun(name, resolved(cfg)["stages"][name], resources, inputs, versions, run.code,
                       stage_seed(cfg, name), sim)  # fmt: skip
        started = time.time()
        retries = getattr(typed, "retries", 0)
        state = _submit(run, job, retries, refresh=name in run.force)
        if state.is_failed() or state.is_crashed():
            err = state.result(raise_on_failure=False)
            ledger.stage_update(name, state="failed", ended=time.time(), error=repr(err))
            raise RuntimeError(f"stage {name} failed: {err!r}") from (err if isinstance(err, BaseException) else None)
        result = state.result()
        cached = state.name == "Cached"
        if cached and not outputs_exist(result.get("outputs", {})):
            # the cache points at models this registry no longer has: compute them again
            result, cached = _submit(run, job, retries, refresh=True).result(), False
        for uri in result.get("outputs", {}).values():
            if isinstance(uri, str) and uri.startswith("models:/"):
                tracking.set_alias(uri, f"run-{run_id}")
        outputs[name] = result.get("outputs", {})
        entry = {
            "state": "cached" if cached else "completed",
            "outputs": outputs[name],
            "cache_key": result.get("cache_key"),
            "mlflow_run": result.get("mlflow_run_id"),
            "ended": time.time(),
        }
        if cached:
            entry.update(started=started, cached_from=result.get("pipeline_run"))
        ledger.stage_update(name, **entry)
        if entry["mlflow_run"]:  # `llp compare` finds each stage's run, cached or not, from the pipeline run
            MlflowClient().set_tag(run.parent_id, f"llp.stage_run.{name}", entry["mlflow_run"])
        verb = "cached (skipped)" if cached else "completed"
        shown = ", ".join(f"{k}={v}" for k, v in outputs[name].items()) or "no model outputs"
        print(f"[llp] {name}: {verb}; {shown}", file=stream, flush=True)
    return outputs
