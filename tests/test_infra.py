"""What infra/ ships parses and validates against its schema where one exists (Ray's cluster launcher
schema, Kubernetes' OpenAPI schemas), exposes nothing publicly, holds no credential, and matches the
cluster profile; the Prefect deployment starts a real smoke run through a real work pool."""

from __future__ import annotations

import copy
import io
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, ROOT

INFRA = ROOT / "infra"
K8S_VERSION = "1.33"


def _profile_resources() -> dict:
    return yaml.safe_load((ROOT / "conf" / "profile" / "cluster.yaml").read_text())["resources"]


def test_the_aws_cluster_config_passes_ray_s_schema_and_names_the_profile_s_node_types():
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = yaml.safe_load((INFRA / "aws" / "cluster.yaml").read_text())
    validate_config(prepare_config(copy.deepcopy(raw)))
    broken = copy.deepcopy(raw)
    broken["available_node_types"]["gpu"]["max_worker"] = 2
    with pytest.raises(Exception, match="max_worker"):  # the check bites
        validate_config(prepare_config(broken))
    types = raw["available_node_types"]
    declared = {name for t in types.values() for name in t.get("resources", {})}
    wanted = {**_profile_resources()["sim_resources"], **_profile_resources()["learner_resources"]}
    assert set(wanted) <= declared, (wanted, declared)
    for name, node in types.items():
        if name != raw["head_node_type"]:
            assert node["node_config"]["InstanceMarketOptions"]["MarketType"] == "spot", name
    assert raw["provider"]["use_internal_ips"] is True
    assert "--dashboard-host=127.0.0.1" in " ".join(raw["head_start_ray_commands"])
    script = (INFRA / "aws" / "start_services.sh").read_text()
    assert subprocess.run(["bash", "-n", str(INFRA / "aws" / "start_services.sh")]).returncode == 0
    assert "--host 0.0.0.0" not in script and script.count("--host 127.0.0.1") == 2


RAY_FIELDS = {
    "RayCluster": {
        "spec": {"rayVersion", "enableInTreeAutoscaling", "autoscalerOptions", "headGroupSpec", "workerGroupSpecs",
                 "headServiceAnnotations", "suspend", "gcsFaultToleranceOptions", "authOptions", "managedBy"},
        "headGroupSpec": {"serviceType", "rayStartParams", "template", "headService", "enableIngress", "resources"},
        "workerGroupSpecs": {"groupName", "replicas", "minReplicas", "maxReplicas", "idleTimeoutSeconds",
                             "rayStartParams", "template", "scaleStrategy", "numOfHosts", "suspend", "resources"},
    },
    "RayJob": {
        "spec": {"entrypoint", "clusterSelector", "rayClusterSpec", "submissionMode", "shutdownAfterJobFinishes",
                 "ttlSecondsAfterFinished", "activeDeadlineSeconds", "runtimeEnvYAML", "backoffLimit", "jobId",
                 "metadata", "submitterPodTemplate", "submitterConfig", "entrypointNumCpus", "entrypointNumGpus",
                 "entrypointResources", "suspend", "deletionStrategy", "managedBy"},
    },
}  # fmt: skip


def _manifests() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted((INFRA / "k8s").glob("*.yaml")):
        docs += [(path.name, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _validate_pod_template(template: dict, where: str) -> None:
    import kubernetes_validate

    pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}
    try:
        kubernetes_validate.validate(pod_template, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as err:
        raise AssertionError(f"{where}: {err.message}") from None


def test_kubernetes_manifests_validate_against_the_api_schemas_and_expose_nothing():
    import kubernetes_validate

    docs = _manifests()
    kinds = sorted(d["kind"] for _, d in docs)
    assert {"RayCluster", "RayJob", "Deployment", "Service", "ServiceAccount", "PersistentVolumeClaim"} <= set(kinds)
    for name, doc in docs:
        where = f"{name}: {doc['kind']} {doc['metadata']['name']}"
        if doc["apiVersion"] == "ray.io/v1":
            fields = RAY_FIELDS[doc["kind"]]
            assert set(doc["spec"]) <= fields["spec"], (where, set(doc["spec"]) - fields["spec"])
            if doc["kind"] == "RayCluster":
                head = doc["spec"]["headGroupSpec"]
                assert set(head) <= fields["headGroupSpec"] and head["serviceType"] == "ClusterIP", where
                _validate_pod_template(head["template"], where + " head")
                for group in doc["spec"]["workerGroupSpecs"]:
                    assert set(group) <= fields["workerGroupSpecs"], (where, set(group) - fields["workerGroupSpecs"])
                    _validate_pod_template(group["template"], f"{where} {group['groupName']}")
                    assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], where
            continue
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            raise AssertionError(f"{where}: {err.message}") from None
        assert doc["kind"] not in ("Secret", "Ingress"), f"{where}: secrets and public endpoints are not shipped"
        if doc["kind"] == "Service":
            assert doc["spec"].get("type", "ClusterIP") == "ClusterIP", where
    # the check bites: an unknown field in a Deployment is an error
    deployment = copy.deepcopy(next(d for _, d in docs if d["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    # the worker groups declare the custom resources the cluster profile places actors with
    cluster = next(d for _, d in docs if d["kind"] == "RayCluster")
    declared = " ".join(g["rayStartParams"].get("resources", "") for g in cluster["spec"]["workerGroupSpecs"])
    for name in {**_profile_resources()["sim_resources"], **_profile_resources()["learner_resources"]}:
        assert f'\\"{name}\\"' in declared, name


def test_images_build_from_this_repository_pin_their_bases_and_do_not_run_as_root():
    from dockerfile_parse import DockerfileParser

    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", "runs", ".git"} <= set(ignored)
    for name in ("Dockerfile.cpu", "Dockerfile.gpu"):
        parser = DockerfileParser(fileobj=io.BytesIO((INFRA / "docker" / name).read_bytes()))
        base = parser.baseimage
        assert ":" in base and not base.endswith(":latest"), (name, base)
        steps = parser.structure
        copies = [s["value"].split() for s in steps if s["instruction"] == "COPY"]
        for words in copies:
            for source in [w for w in words[:-1] if not w.startswith("--")]:
                assert (ROOT / source).exists(), f"{name}: COPY {source}: no such path in the repository"
        users = [s["value"] for s in steps if s["instruction"] == "USER"]
        assert users and users[-1] not in ("root", "0"), name
        runs = " ".join(s["value"] for s in steps if s["instruction"] == "RUN")
        assert "torch==2.13.0" in runs and "--index-url" in runs, name  # no dependency picks torch's build
        assert "-c constraints.txt" in runs, name


CREDENTIAL = re.compile(r"AKIA[0-9A-Z]{16}|aws_secret_access_key\s*[:=]\s*\S|password\s*[:=]\s*\S+", re.I)


def test_no_credential_is_written_into_infra():
    for path in INFRA.rglob("*"):
        if path.is_file() and path.suffix in (".yaml", ".yml", ".sh", ".md", ".cpu", ".gpu", ""):
            found = CREDENTIAL.search(path.read_text())
            assert found is None, f"{path}: {found.group(0)}"


def test_the_prefect_deployment_starts_a_smoke_run_through_a_work_pool(services, tmp_path):
    """`prefect deploy` of infra/prefect/prefect.yaml, `prefect deployment run`, and a process worker that
    picks the flow run up: the run it starts completes and Prefect says so."""
    env = {**os.environ, **services["env"], "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    prefect = str(BIN / "prefect")

    def sh(*args, timeout=300):
        result = subprocess.run(list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        return result.stdout

    sh(prefect, "work-pool", "create", "llp", "--type", "process", "--overwrite")
    sh(prefect, "--no-prompt", "deploy", "--all", "--prefect-file", "infra/prefect/prefect.yaml")
    out = sh(prefect, "deployment", "run", "llp-start/smoke", "--param", f'sets=["run_root={tmp_path}"]',
             "--param", "until_stage=locomotion_teacher", "--param", "run_id=from-prefect")  # fmt: skip
    flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)
    sh(prefect, "worker", "start", "--pool", "llp", "--run-once", timeout=600)
    state = json.loads(sh(prefect, "flow-run", "inspect", flow_run_id, "--output", "json"))["state"]["type"]
    assert state == "COMPLETED", state
    book = json.loads((Path(tmp_path) / "from-prefect" / "ledger.json").read_text())
    assert book["stages"]["locomotion_teacher"]["state"] == "completed"
