"""A multi-node Ray cluster on one host (ray.cluster_utils.Cluster: a head and two worker raylets, custom
resources standing in for node types): `llp run --cluster` places simulators on the worker nodes and the
learner on the head, and a worker node that goes away mid-stage costs no retry."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.conftest import BIN, ROOT
from tests.test_pipeline import SMOKE, ledger, mlflow_client

pytestmark = [pytest.mark.fault, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # the nodes are started by this process, with its env
    head = {"num_cpus": 1, "resources": {"head": 1}, "include_dashboard": False}
    c = Cluster(initialize_head=True, head_node_args=head)
    workers = [c.add_node(num_cpus=2, resources={"sim_node": 2}) for _ in range(2)]
    c.wait_for_nodes()
    yield c, workers
    c.shutdown()


def _wait_for(proc: subprocess.Popen, text: str, lines: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return
    raise AssertionError(f"never printed {text!r}:\n{''.join(lines)[-3000:]}")


def test_a_worker_node_removed_mid_stage_loses_its_simulator_and_the_stage_goes_on(services, cluster, tmp_path):
    c, workers = cluster
    iterations = 6
    env = {
        **os.environ,
        **services["env"],
        "PYTHONUNBUFFERED": "1",
        "RAY_AUTH_MODE": "disabled",
        "LLP_INJECT_FAULT": "locomotion_teacher@2:pause20",
    }
    sets = [
        f"run_root={tmp_path}",
        f"stages.locomotion_teacher.iterations={iterations}",
        "stages.locomotion_teacher.retries=0",  # a lost node must not need a retry
        "resources.sim_resources={sim_node: 1}",
        "resources.learner_resources={head: 1}",
    ]
    args = [str(BIN / "llp"), "run", *SMOKE, "--cluster", c.address, "--run-id", "node-lost"]
    args += [a for s in sets for a in ("--set", s)] + ["--until-stage", "locomotion_teacher"]
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        _wait_for(proc, "injected pause", lines, timeout=300)
        c.remove_node(workers[0])  # one simulator actor lived there (SPREAD over the two sim nodes)
        out, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    output = "".join(lines) + out
    assert proc.returncode == 0, output[-4000:]
    assert output.count("was replaced") == 1, output[-4000:]
    replaced = next(line for line in output.splitlines() if "was replaced" in line)
    assert f"(was {workers[0].node_id[:8]})" in replaced and workers[1].node_id[:8] in replaced, replaced
    teacher = ledger(tmp_path, "node-lost")["stages"]["locomotion_teacher"]
    assert teacher["state"] == "completed" and teacher["executions"] == 1, json.dumps(teacher)[:2000]
    client = mlflow_client(services)
    steps = sorted(m.step for m in client.get_metric_history(teacher["mlflow_run"], "perf/env_steps"))
    assert steps == list(range(iterations))  # no iteration lost or logged twice
    counts = client.get_metric_history(teacher["mlflow_run"], "faults/sim_replacements")
    assert max(m.value for m in counts) == 1.0


def test_custom_resources_without_a_cluster_are_refused_at_once(tmp_path, llp):
    result = llp("run", *SMOKE, "--set", f"run_root={tmp_path / 'runs'}", "--set",
                 "resources.sim_resources={sim_node: 1}", timeout=60)  # fmt: skip
    assert result.returncode == 2 and "only a cluster's nodes declare" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "runs").exists()


def test_llp_submit_runs_the_pipeline_as_a_ray_job_on_the_head(services, tmp_path, monkeypatch):
    """A Ray head with its job server (the dashboard) started here; `llp submit --follow` sends the smoke run,
    streams its output and exits with the job's status. No credential travels with the job."""
    import socket

    from ray.cluster_utils import Cluster

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    dashboard, agent = free_port(), free_port()  # not Ray's defaults: the other cluster of this module holds them
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ['PATH']}")  # the job's shell finds `llp` as on a cluster image
    head = {"num_cpus": 2, "include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": dashboard,
            "dashboard_agent_listen_port": agent}  # fmt: skip
    c = Cluster(initialize_head=True, head_node_args=head)
    try:
        args = [str(BIN / "llp"), "submit", *SMOKE, "--address", f"http://127.0.0.1:{dashboard}", "--follow",
                "--run-id", "submitted", "--until-stage", "locomotion_teacher", "--set", f"run_root={tmp_path}",
                "--env", "MLFLOW_TRACKING_URI", "--env", "PREFECT_API_URL"]  # fmt: skip
        env = {**os.environ, **services["env"]}
        result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "SUCCEEDED" in result.stdout and "[llp] locomotion_teacher: completed" in result.stdout
        assert services["env"]["AWS_SECRET_ACCESS_KEY"] not in result.stdout
        teacher = ledger(tmp_path, "submitted")["stages"]["locomotion_teacher"]
        assert teacher["state"] == "completed"
    finally:
        c.shutdown()
