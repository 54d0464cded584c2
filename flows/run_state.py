"""Run states that tell the truth: a run whose process is gone is crashed, not running.

``llp run`` records its own process (pid, host, start time) in the run's ledger.
When that process is killed outright (SIGKILL, a lost node), nothing inside it
can record the end, so later commands (``llp status``, ``llp resume``,
``llp ui``) compare the ledger with the process table and write the truth into
the ledger, the MLflow runs (KILLED) and, where a Prefect server is reachable,
the flow run (Crashed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from llp.flows.ledger import Ledger
from llp.infra.processes import process_alive, this_process

ACTIVE = ("running",)
__all__ = ["this_process", "driver_alive", "crashed", "mark_crashed", "reconcile"]


def driver_alive(driver: dict | None) -> bool | None:
    """True or False for a driver on this host; None when it cannot be told (another host, or no record)."""
    return process_alive(driver)


def crashed(ledger: Ledger) -> bool:
    """The ledger says running, but the process that ran it is gone."""
    return ledger.data.get("state") in ACTIVE and driver_alive(ledger.data.get("driver")) is False


def mark_crashed(ledger: Ledger) -> list[str]:
    """Write 'crashed' into the ledger for the run and its running stages; returns the stages so marked."""
    stages = [n for n, st in ledger.data.get("stages", {}).items() if st.get("state") in ACTIVE]
    for name in stages:
        ledger.stage(name).update(state="crashed", ended=time.time())
    pid = (ledger.data.get("driver") or {}).get("pid")
    ledger.set(state="crashed", ended=time.time(), error=f"the process that ran it (pid {pid}) is gone")
    return stages


def reconcile(run_root: Path, run_id: str, prefect: bool = False) -> bool:
    """If run ``run_id`` crashed, say so everywhere: ledger, MLflow (KILLED), Prefect (Crashed, when
    ``prefect`` and PREFECT_API_URL is set). Returns whether it had crashed."""
    ledger = Ledger(run_root / run_id / "ledger.json")
    was_crashed = crashed(ledger)
    if prefect and os.environ.get("PREFECT_API_URL") and ledger.data.get("prefect_flow_run"):
        if was_crashed or ledger.data.get("state") == "crashed":  # marked by an earlier `llp status`
            mark_flow_run_crashed(ledger.data["prefect_flow_run"], ledger.data.get("error") or "its process is gone")
    if not was_crashed:
        return False
    stages = mark_crashed(ledger)
    from mlflow import MlflowClient

    from llp.flows import tracking

    uri = ledger.data.get("mlflow_tracking_uri", "")
    if uri.startswith("http") and not os.environ.get("MLFLOW_TRACKING_URI"):
        os.environ["MLFLOW_TRACKING_URI"] = uri  # the server the run logged to
    tracking.configure(run_root, ledger.data.get("experiment", "llp"))
    client = MlflowClient()
    ids = [ledger.data.get("mlflow_parent_run")] + [ledger.stage(s).get("mlflow_run") for s in stages]
    for run in filter(None, ids):
        try:
            if client.get_run(run).info.status == "RUNNING":
                client.set_terminated(run, "KILLED")
        except Exception:  # a run the store no longer has: nothing to correct
            pass
    if prefect and os.environ.get("PREFECT_API_URL") and ledger.data.get("prefect_flow_run"):
        mark_flow_run_crashed(ledger.data["prefect_flow_run"], ledger.data.get("error", ""))
    return True


def mark_flow_run_crashed(flow_run_id: str, message: str) -> None:
    """Set a Prefect flow run (and its running task runs) to Crashed, unless it has already ended."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.states import Crashed

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(flow_run_id)
        if run.state is not None and not run.state.is_final():
            for task_run in client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id]))):
                if task_run.state is not None and not task_run.state.is_final():
                    client.set_task_run_state(task_run.id, Crashed(message=message), force=True)
            client.set_flow_run_state(run.id, Crashed(message=message), force=True)
