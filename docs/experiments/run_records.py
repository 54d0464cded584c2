"""A pipeline run's evaluation records and metric histories (timing excluded), from its local MLflow store, as
one JSON file: two runs of the same seed compare with a JSON diff.

    python docs/experiments/run_records.py <run_root> <out.json>

Used by docs/experiments/2026-12-05-refactor-unchanged.md."""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import mlflow
from mlflow import MlflowClient

# keys that measure time or memory (they differ run to run) or name a run's models
TIMING = re.compile(r"time|_s$|per_s|seconds|sps|fps|wall|rate_hz|ms|duration|elapsed|memory|rss|throughput", re.I)
NAMES = ("model", "uri", "created")


def without_timing(data):
    if isinstance(data, dict):
        return {k: without_timing(v) for k, v in data.items() if not TIMING.search(k) and k not in NAMES}
    if isinstance(data, list):
        return [without_timing(x) for x in data]
    return data


def evaluation_files(client: MlflowClient, run_id: str, folder: str, into: str) -> dict[str, object]:
    """Every evaluation or report JSON artifact of the run, by path."""
    found = {}
    for item in client.list_artifacts(run_id, folder):
        if item.is_dir:
            found.update(evaluation_files(client, run_id, item.path, into))
        elif item.path.endswith(".json") and ("evaluation" in item.path or "report" in item.path):
            local = client.download_artifacts(run_id, item.path, into)
            found[item.path] = without_timing(json.loads(Path(local).read_text()))
    return found


def run_records(run_root: Path) -> dict[str, dict]:
    mlflow.set_tracking_uri(f"sqlite:///{run_root.resolve() / 'mlflow.db'}")
    client = MlflowClient()
    out = {}
    with tempfile.TemporaryDirectory() as into:
        for exp in client.search_experiments():
            for run in client.search_runs([exp.experiment_id], max_results=1000):
                rid = run.info.run_id
                metrics = {
                    k: [(m.step, round(m.value, 9)) for m in client.get_metric_history(rid, k)]
                    for k in sorted(run.data.metrics)
                    if not TIMING.search(k)
                }
                name = run.data.tags.get("mlflow.runName", rid)
                out[name] = {"metrics": metrics, "records": evaluation_files(client, rid, "", into)}
    return out


if __name__ == "__main__":
    records = run_records(Path(sys.argv[1]))
    Path(sys.argv[2]).write_text(json.dumps(records, indent=1, sort_keys=True, default=str))
    print(f"{len(records)} runs; {sum(len(r['records']) for r in records.values())} evaluation files")
