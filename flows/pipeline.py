"""The Prefect flow ``llp-pipeline``: one retryable, cached task per LLP stage.

A stage's cache key is a content hash of (stage name, resolved stage config and
resources, the versions of its input models, the stage code version), and its
result (the ``models:/`` URIs it registered) is persisted under the run root, so
re-running a pipeline or ``llp resume`` skips every stage that already
completed with the same inputs and continues from the first unfinished one. A
retried or resumed stage continues its own MLflow run from its last checkpoint.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from llp.config.pipeline import PipelineConfig, config_hash, resolved
from llp.config.schema import build
from llp.flows.ledger import Ledger
from llp.flows.run_request import select_stages
from llp.flows.run_state import this_process
from llp.infra.services import Service, prefect_env, start_prefect

ROOT = Path(__file__).resolve().parents[1]
# what a stage computes depends on the science, config and stage code, and on the task and robot files its
# config names by reference (conf/task/<task>.yaml, conf/robot/<robot>.yaml)
CODE_DIRS = (
    "llp/sim",
    "llp/learn",
    "llp/motion",
    "llp/evaluation",
    "llp/config",
    "llp/skills",
    "stages",
    "actors",
    "conf/task",
    "conf/robot",
)


def code_version() -> str:
    """Hash of the science, config and stage code and of the task and robot configs."""
    h = hashlib.sha256()
    for folder in CODE_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".xml", ".c", ".yaml") and path.is_file():
                h.update(str(path.relative_to(ROOT)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:12]


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


@dataclass
class PipelineResult:
    run_id: str
    state: str
    flow_run_id: str | None
    outputs: dict[str, dict[str, str]]
    error: str | None = None


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + os.urandom(2).hex()


_RUN_ROOT_LOCK = []  # the open lock file of the run root this process owns (released when the process ends)


def lock_run_root(run_root: Path) -> None:
    """Hold ``run_root``'s lock for this process's lifetime: one `llp run` (or resume) at a time owns a run root's
    Prefect server and database. A second is refused at once, naming the first, instead of starting a second
    server on the same database. (Sweeps share one root through PREFECT_API_URL and take no lock.)"""
    import fcntl

    path = run_root.resolve() / ".llp.lock"
    if any(h.name == str(path) for h in _RUN_ROOT_LOCK):  # this process holds it already
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 (held open on purpose)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise ValueError(f"run root {run_root.resolve()} is in use by another llp command (pid {holder}): let it "
                         "finish, or give this run another run_root") from None  # fmt: skip
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    _RUN_ROOT_LOCK.append(handle)


def prepare_prefect(run_root: Path) -> Service | None:
    """Point this process at Prefect: PREFECT_API_URL if set, else a server whose state lives under run_root
    (then this process holds the run root's lock, see ``lock_run_root``).

    Must run before ``prefect`` is imported in this process.
    """
    home = (run_root / "prefect").resolve()
    os.environ.update(prefect_env(home))
    if os.environ.get("PREFECT_API_URL"):
        return None
    lock_run_root(run_root)
    service = start_prefect(home)
    os.environ["PREFECT_API_URL"] = service.url
    return service


def run_pipeline(
    cfg: PipelineConfig,
    run_id: str,
    *,
    from_stage: str | None = None,
    until_stage: str | None = None,
    force: list[str] | None = None,
    stream=None,
    tags: dict[str, str] | None = None,
) -> PipelineResult:
    """Run (or resume) pipeline ``run_id``: stages in order between from_stage and until_stage; ``tags`` go on
    its MLflow pipeline run (e.g. ``llp.ablation``), beside its id, profile and seed."""
    import sys

    stream = stream or sys.stdout
    stages = list(cfg.stages)
    selected = select_stages(stages, from_stage, until_stage, force)

    run_root = Path(cfg.run_root).resolve()
    run_dir = run_root / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    import yaml

    (run_dir / "config.yaml").write_text(yaml.safe_dump(resolved(cfg), sort_keys=False))
    ledger = Ledger(run_dir / "ledger.json")
    ledger.set(
        run_id=run_id,
        profile=cfg.profile,
        created=ledger.data.get("created") or time.time(),
        stages_selected=selected,
        state="running",
        error=None,
        ended=None,
        ray_logs=ray_logs_location(run_dir / "ray"),
        experiment=cfg.experiment,
        driver=this_process(),  # later commands tell a killed run from a running one by this
    )

    from llp.flows import tracking  # imports mlflow

    uri = tracking.configure(run_root, cfg.experiment)
    try:  # every input from a stage outside this invocation must exist before any stage starts
        external = _external_inputs(cfg, selected, run_id, ledger, stream)
    except ValueError as err:
        ledger.set(state="failed", ended=time.time(), error=repr(err))
        return PipelineResult(run_id, "failed", None, {}, repr(err))
    parent = tracking.find_run({"llp.pipeline_run": run_id, "llp.kind": "pipeline"}, cfg.experiment)
    from mlflow import MlflowClient

    client = MlflowClient()
    if parent is None:  # the pipeline's run stays RUNNING until the pipeline ends, then says how it ended
        parent_id = tracking.start_parent_run(
            cfg.experiment,
            f"pipeline {run_id}",
            {"llp.pipeline_run": run_id, "llp.kind": "pipeline", "llp.profile": cfg.profile,
             "llp.seed": str(cfg.seed), **(tags or {})},
            resolved(cfg),
        )  # fmt: skip
    else:
        parent_id = parent.info.run_id
        client.update_run(parent_id, status="RUNNING")
    ledger.set(mlflow_tracking_uri=uri, mlflow_parent_run=parent_id, mlflow_link=tracking.run_link(parent_id))

    prepare_prefect(run_root)
    from prefect import flow, tags, task
    from prefect.runtime import flow_run, task_run

    results_dir = run_root / "prefect" / "results"
    code = code_version()

    def cache_key_fn(_ctx, params: dict) -> str:
        return stage_cache_key(
            params["stage"],
            params["stage_cfg"],
            params["resources"],
            params["input_versions"],
            params["code"],
            params["seed"],
            params["sim"],
        )

    @task(
        task_run_name="{stage}",
        cache_key_fn=cache_key_fn,
        persist_result=True,
        result_storage=results_dir,
        result_serializer="json",
    )
    def stage_task(
        stage: str,
        stage_cfg: dict,
        resources: dict,
        inputs: dict,
        input_versions: dict,
        code: str,
        seed: int,
        sim: dict,
    ) -> dict:
        return execute_stage(
            cfg,
            run_id,
            run_dir,
            stage,
            stage_cfg,
            resources,
            inputs,
            input_versions,
            code,
            seed,
            sim,
            parent_id,
            ledger,
            task_run.run_count,
            stream,
        )

    @flow(name=cfg.name, flow_run_name="{run_id}", log_prints=False)
    def llp_pipeline(run_id: str, stages: list[str]) -> dict:
        from llp.stages.registry import input_source, stage_config, stage_spec

        ledger.set(prefect_flow_run=str(flow_run.id), prefect_api=os.environ.get("PREFECT_API_URL"))
        print(
            f"[llp] pipeline run {run_id}: Prefect flow run {flow_run.id} ({os.environ.get('PREFECT_API_URL')})",
            file=stream,
            flush=True,
        )
        print(f"[llp] MLflow: {tracking.run_link(parent_id)}", file=stream, flush=True)
        outputs: dict[str, dict] = {}
        resources, sim = resolved(cfg)["resources"], resolved(cfg)["sim"]
        for name in stages:
            spec = stage_spec(cfg, name)
            stage_cfg = resolved(cfg)["stages"][name]
            typed = stage_config(cfg, name)
            inputs = {}
            for input_name, source in spec.inputs(typed).items():
                upstream, output = input_source(input_name, source)  # an upstream stage's output
                made = external.get((name, input_name))
                inputs[input_name] = made or _produced(outputs, upstream, output, name, run_id)
            input_versions = {
                k: f"{tracking.parse_model_uri(v)[0]}/{tracking.parse_model_uri(v)[1]}" for k, v in inputs.items()
            }
            started = time.time()
            refresh = name in (force or [])
            state = stage_task.with_options(
                retries=getattr(typed, "retries", 0), retry_delay_seconds=1, refresh_cache=refresh
            )(name, stage_cfg, resources, inputs, input_versions, code, stage_seed(cfg, name), sim, return_state=True)
            if state.is_failed() or state.is_crashed():
                err = state.result(raise_on_failure=False)
                ledger.stage_update(name, state="failed", ended=time.time(), error=repr(err))
                raise RuntimeError(f"stage {name} failed: {err!r}") from (
                    err if isinstance(err, BaseException) else None
                )
            result = state.result()
            cached = state.name == "Cached"
            if cached and not _outputs_exist(result.get("outputs", {})):
                # the cache points at models this registry no longer has: compute them again
                state = stage_task.with_options(
                    retries=getattr(typed, "retries", 0), retry_delay_seconds=1, refresh_cache=True
                )(
                    name,
                    stage_cfg,
                    resources,
                    inputs,
                    input_versions,
                    code,
                    stage_seed(cfg, name),
                    sim,
                    return_state=True,
                )
                result, cached = state.result(), False
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
                client.set_tag(parent_id, f"llp.stage_run.{name}", entry["mlflow_run"])
            verb = "cached (skipped)" if cached else "completed"
            shown = ", ".join(f"{k}={v}" for k, v in outputs[name].items()) or "no model outputs"
            print(f"[llp] {name}: {verb}; {shown}", file=stream, flush=True)
        return outputs

    with tags("llp", f"run:{run_id}", f"profile:{cfg.profile}"):
        try:
            outputs = llp_pipeline(run_id, selected)
        except Exception as err:  # the flow failed: the ledger says where, the caller says how to resume
            ledger.set(state="failed", ended=time.time(), error=repr(err))
            client.set_terminated(parent_id, "FAILED")
            return PipelineResult(run_id, "failed", ledger.data.get("prefect_flow_run"), {}, repr(err))
        except BaseException as err:  # interrupted (Ctrl-C, SIGTERM): say so everywhere, then let it end
            for st in ledger.data.get("stages", {}).values():
                if st.get("state") == "running":
                    st.update(state="interrupted", ended=time.time())
            ledger.set(state="interrupted", ended=time.time(), error=repr(err))
            client.set_terminated(parent_id, "KILLED")
            raise
    ledger.set(state="completed", ended=time.time())
    client.set_terminated(parent_id, "FINISHED")
    return PipelineResult(run_id, "completed", ledger.data.get("prefect_flow_run"), outputs)


def ray_logs_location(log_dir: Path) -> str:
    """Where this run's Ray logs are, for the ledger and `llp status`."""
    from llp.infra.ray_runtime import ray_temp_dir

    if os.environ.get("RAY_ADDRESS"):
        return f"on the Ray cluster at {os.environ['RAY_ADDRESS']} (session_latest/logs under its temp dir)"
    temp = ray_temp_dir(log_dir)
    shown = str(log_dir) if temp == log_dir else f"{log_dir} -> {temp}"
    return f"{shown} (session_latest/logs)"


def _produced(outputs: dict[str, dict], upstream: str, output: str, stage: str, run_id: str) -> str:
    """``upstream``'s ``output`` from this invocation, or an error that names who lacks what and how to redo it."""
    try:
        return outputs[upstream][output]
    except KeyError:
        raise ValueError(
            f"stage {stage!r} needs {upstream}'s {output!r}, which that stage did not produce in this run; "
            f"re-run it with `llp resume {run_id} --force {upstream}`"
        ) from None


def _external_inputs(cfg, selected: list[str], run_id: str, ledger: Ledger, stream) -> dict[tuple[str, str], str]:
    """The inputs of the selected stages whose source stage this invocation does not run, resolved up front
    ((stage, input name) -> models:/ URI), so that a missing one stops the run before its first stage."""
    from llp.stages.registry import input_source, stage_config, stage_spec

    external = {}
    for name in selected:
        for input_name, source in stage_spec(cfg, name).inputs(stage_config(cfg, name)).items():
            upstream, output = input_source(input_name, source)
            if upstream not in selected:
                model = stage_spec(cfg, upstream).outputs[output]
                external[(name, input_name)] = _resolve_upstream(upstream, output, model, run_id, ledger, stream,
                                                                 input_name)  # fmt: skip
    return external


def _resolve_upstream(stage: str, output: str, name: str, run_id: str, ledger: Ledger, stream, input_name: str = ""
                      ) -> str:  # fmt: skip
    """An input whose stage is not part of this invocation, in order of authority:

    1. the version this run's ledger recorded for that stage (it must still exist: never a silent substitute);
    2. this run's alias ``run-<id>``;
    3. for a run that never ran that stage, the newest version, announced as such.
    """
    from mlflow import MlflowClient

    what = repr(output) if input_name in ("", output) else f"{input_name!r} ({stage}'s {output!r})"
    recorded = ledger.data.get("stages", {}).get(stage, {}).get("outputs", {}).get(output)
    if recorded:
        if not _outputs_exist({output: recorded}):
            raise ValueError(
                f"input {what} of this run is {recorded} (recorded by its stage {stage!r}), but the registry "
                f"no longer has that version: re-create it with `llp resume {run_id} --force {stage}`"
            )
        return recorded
    client = MlflowClient()
    try:
        return f"models:/{name}/{client.get_model_version_by_alias(name, f'run-{run_id}').version}"
    except Exception:
        pass
    versions = client.search_model_versions(f"name='{name}'", order_by=["version_number DESC"], max_results=1)
    if not versions:
        raise ValueError(f"stage input {name} does not exist yet: run stage {stage!r} first")
    uri = f"models:/{name}/{versions[0].version}"
    print(f"[llp] input {what}: {uri}, the newest version (run {run_id} has not run {stage!r})", file=stream)
    return uri


def _outputs_exist(outputs: dict) -> bool:
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


def execute_stage(
    cfg: PipelineConfig,
    run_id: str,
    run_dir: Path,
    stage: str,
    stage_cfg: dict,
    resources: dict,
    inputs: dict,
    input_versions: dict,
    code: str,
    seed: int,
    sim: dict,
    parent_id: str,
    ledger: Ledger,
    attempt: int,
    stream,
) -> dict:
    """The body of a stage task: find or start the stage's MLflow run, build its context, run the stage."""
    import mlflow

    from llp.config.resources import ResourcesConfig
    from llp.flows import tracking
    from llp.flows.context import StageContext
    from llp.flows.tracking import flatten
    from llp.sim.backend import simulating_on
    from llp.stages.registry import stage_spec

    spec = stage_spec(cfg, stage)
    key = stage_cache_key(stage, stage_cfg, resources, input_versions, code, seed, sim)
    ledger.stage_started(stage, attempt)
    print(f"[llp] {stage}: running (attempt {attempt})", file=stream, flush=True)
    identity = {"llp.pipeline_run": run_id, "llp.stage": stage, "llp.cache_key": key}
    previous = tracking.find_run(identity, cfg.experiment)
    resume_id = previous.info.run_id if previous is not None and previous.info.status != "FINISHED" else None
    lineage = {
        "llp.inputs": json.dumps(inputs, sort_keys=True),
        "llp.config_hash": config_hash({"stage": stage_cfg, "resources": resources, "seed": seed}),
        "llp.code_version": code,
        "llp.pipeline_run": run_id,
        "llp.stage": stage,
        "llp.cache_key": key,
    }
    try:
        with mlflow.start_run(
            run_id=resume_id,
            run_name=None if resume_id else stage,
            parent_run_id=parent_id,
            tags=None if resume_id else {**identity, "llp.kind": "stage"},
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
        raise
    return {"outputs": outputs, "mlflow_run_id": run.info.run_id, "cache_key": key, "pipeline_run": run_id}
