"""`llp ui`: Prefect's UI and MLflow's UI over one run's own state, on 127.0.0.1.

Each server is reused when one for this run root is already up (a run in
progress, or one started with ``--keep-servers``), else started here and
stopped by ``close()``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from llp.flows.ledger import Ledger
from llp.infra.services import Service, healthy, prefect_env, start_mlflow, start_prefect


@dataclass
class UiSession:
    run_id: str
    prefect_url: str  # the flow run's page
    mlflow_url: str  # the pipeline run's page
    started: list[Service] = field(default_factory=list)

    def close(self) -> None:
        for service in reversed(self.started):
            service.stop()
        self.started.clear()


def open_ui(run_root: Path, run_id: str) -> UiSession:
    """Servers and page URLs for run ``run_id`` under ``run_root`` (which must exist)."""
    from llp.flows.run_state import reconcile

    run_root = run_root.resolve()
    ledger = Ledger(run_root / run_id / "ledger.json")
    started: list[Service] = []
    try:
        prefect = _prefect(run_root, ledger.data.get("prefect_api"), started)
        mlflow_base = _mlflow(run_root, ledger, started)
        reconcile(run_root, run_id, prefect=True)  # a killed run shows as crashed in both UIs
        ledger = Ledger(run_root / run_id / "ledger.json")
    except BaseException:
        for service in started:
            service.stop()
        raise
    flow_run = ledger.data.get("prefect_flow_run")
    prefect_page = f"{prefect}/runs/flow-run/{flow_run}" if flow_run else f"{prefect}/runs"
    from mlflow import MlflowClient

    parent = ledger.data.get("mlflow_parent_run")
    experiment = MlflowClient().get_run(parent).info.experiment_id if parent else None
    mlflow_page = f"{mlflow_base}/#/experiments/{experiment}/runs/{parent}" if parent else mlflow_base
    return UiSession(run_id, prefect_page, mlflow_page, started)


def _prefect(run_root: Path, api: str | None, started: list[Service]) -> str:
    """The Prefect server that holds the run: the one it used (``api``) if that is up and serves the UI, else
    one over ``run_root/prefect`` (where a run keeps its state when no PREFECT_API_URL is set); returns the
    UI's base URL."""
    home = run_root / "prefect"
    own = home / "server.json"
    ours = own.exists() and json.loads(own.read_text()).get("url") == api  # then reuse (or adopt) it below
    if api and not ours and healthy(api + "/health") and healthy(api.removesuffix("/api")):
        os.environ["PREFECT_API_URL"] = api
        return api.removesuffix("/api")
    os.environ.update(prefect_env(home))
    service = start_prefect(home)  # reuses a healthy server for this home
    if not healthy(service.url.removesuffix("/api")):  # a server without its UI (older llp): one beside it
        service = start_prefect(home, info_file="server-ui.json")
    if service.proc is not None or service.adopted:
        started.append(service)
    os.environ["PREFECT_API_URL"] = service.url
    return service.url.removesuffix("/api")


def _mlflow(run_root: Path, ledger: Ledger, started: list[Service]) -> str:
    """MLflow's UI: the run's own tracking server, or one started over its local store."""
    from llp.flows import tracking

    uri = ledger.data.get("mlflow_tracking_uri") or f"sqlite:///{run_root / 'mlflow.db'}"
    if uri.startswith("http"):
        os.environ["MLFLOW_TRACKING_URI"] = uri
        tracking.configure(run_root, ledger.data.get("experiment", "llp"))
        return uri.rstrip("/")
    info = run_root / "mlflow-ui.json"
    if info.exists():
        data = json.loads(info.read_text())
        if healthy(data["url"] + "/health"):
            os.environ["MLFLOW_TRACKING_URI"] = data["url"]
            return data["url"]
    service = start_mlflow(run_root / "mlflow.db", str(run_root / "mlartifacts"))
    started.append(service)
    info.write_text(json.dumps({"url": service.url, "pid": service.pid}))
    os.environ["MLFLOW_TRACKING_URI"] = service.url
    return service.url
