"""Starting a pipeline run: its folder, ledger and config, its MLflow pipeline run, the inputs it takes from
the registry, and Prefect's server; then the flow ``llp-pipeline`` (``llp.flows.stage_flow``) runs one
retryable, cached task per LLP stage (``llp.flows.stage_run.execute_stage``).

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
import os
import time
from dataclasses import dataclass
from pathlib import Path

from llp.config.pipeline import PipelineConfig, resolved
from llp.flows.ledger import Ledger
from llp.flows.run_request import select_stages
from llp.flows.run_state import this_process
from llp.flows.stage_run import outputs_exist
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
    try:
        return _run_started(cfg, run_id, run_root, run_dir, ledger, selected, force, stream, tags)
    except BaseException as err:  # before or between stages (the flow says so itself once it runs): never "running"
        if ledger.data.get("state") == "running":
            interrupted = not isinstance(err, Exception)
            ledger.set(state="interrupted" if interrupted else "failed", ended=time.time(), error=repr(err))
        raise


def _run_started(cfg: PipelineConfig, run_id: str, run_root: Path, run_dir: Path, ledger: Ledger, selected: list[str],
                 force: list[str] | None, stream, tags: dict[str, str] | None) -> PipelineResult:  # fmt: skip
    """The rest of ``run_pipeline``, once the run's ledger says it is running."""
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
    from prefect import tags

    from llp.flows.stage_flow import ACTIVE, pipeline_flow
    from llp.flows.stage_run import PipelineRun

    run = PipelineRun(cfg=cfg, run_id=run_id, run_dir=run_dir, parent_id=parent_id, ledger=ledger, stream=stream,
                      code=code_version(), results_dir=run_root / "prefect" / "results", external=external,
                      force=list(force or []))  # fmt: skip
    ACTIVE[run_id] = run
    with tags("llp", f"run:{run_id}", f"profile:{cfg.profile}"):
        try:
            outputs = pipeline_flow.with_options(name=cfg.name)(run_id, selected)
        except Exception as err:  # the flow failed: the ledger says where, the caller says how to resume
            ledger.set(state="failed", ended=time.time(), error=repr(err))
            client.set_terminated(parent_id, "FAILED")
            return PipelineResult(run_id, "failed", ledger.data.get("prefect_flow_run"), {}, repr(err))
        except BaseException as err:  # interrupted (Ctrl-C, SIGTERM): say so everywhere, then let it end
            for st in ledger.data.get("stages", {}).values():
                if st.get("state") == "running":
                    st.update(state="interrupted", ended=time.time())
                if st.get("state") == "interrupted" and st.get("mlflow_run"):  # the stage's run too: KILLED
                    with contextlib.suppress(Exception):  # (the signal may reach this thread, not the stage's)
                        client.set_terminated(st["mlflow_run"], "KILLED")
            ledger.set(state="interrupted", ended=time.time(), error=repr(err))
            client.set_terminated(parent_id, "KILLED")
            raise
        finally:
            ACTIVE.pop(run_id, None)
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
        if not outputs_exist({output: recorded}):
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
