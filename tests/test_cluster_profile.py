"""The cluster profile's own node types on a multi-node Ray cluster on one host: the head and two worker raylets
declare the custom resources that conf/profile/cluster.yaml asks for (as infra/aws/cluster.yaml and
infra/k8s/raycluster.yaml name them), and the smoke chain runs through the transition stage, whose three env
groups put three simulator actors on the simulator nodes. Slow (about 5 min): `make test-slow`."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import BIN, ROOT
from tests.test_pipeline import SMOKE, ledger, mlflow_client

pytestmark = [pytest.mark.slow, pytest.mark.fault, pytest.mark.timeout(1200)]


def test_the_transition_stage_runs_on_the_cluster_profiles_node_types(services, tmp_path):
    from ray.cluster_utils import Cluster

    from llp.config.pipeline import load_pipeline

    resources = load_pipeline("cluster").resources
    sim_type, learner_type = next(iter(resources.sim_resources)), next(iter(resources.learner_resources))
    assert (sim_type, learner_type) == ("cpu_sim_node", "gpu_node")  # the node types the cloud templates declare
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    head = {"num_cpus": 1, "resources": {learner_type: 1}, "include_dashboard": False}
    c = Cluster(initialize_head=True, head_node_args=head)
    try:
        for _ in range(2):
            c.add_node(num_cpus=2, resources={sim_type: 2})
        c.wait_for_nodes()
        env = {**os.environ, **services["env"], "PYTHONUNBUFFERED": "1", "RAY_AUTH_MODE": "disabled"}
        sets = [f"run_root={tmp_path}", f"resources.sim_resources={{{sim_type}: 1}}",
                f"resources.learner_resources={{{learner_type}: 1}}"]  # fmt: skip
        args = [str(BIN / "llp"), "run", *SMOKE, "--cluster", c.address, "--run-id", "node-types",
                "--until-stage", "transition", *[a for s in sets for a in ("--set", s)]]  # fmt: skip
        result = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1100)
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    finally:
        c.shutdown()
    book = ledger(tmp_path, "node-types")
    assert {k: v["state"] for k, v in book["stages"].items()}["transition"] == "completed", json.dumps(book)[:2000]
    metrics = mlflow_client(services).get_run(book["stages"]["transition"]["mlflow_run"]).data.metrics
    groups = sorted(k for k in metrics if k.startswith("group/"))
    for group in ("locomotion", "climb_step", "course"):  # each group's simulators ran on a simulator node
        assert any(k.startswith(f"group/{group}/") for k in groups), groups  # (smoke: not every group ends episodes)
