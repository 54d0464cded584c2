"""What infra/ ships parses and validates against its schema where one exists (Ray's cluster launcher
schema, Kubernetes' OpenAPI schemas), exposes nothing publicly, holds no credential, and matches the
cluster profile; its network policies let only the pods that need a server reach it, each role has its own
service account, images are pinned to the package's version, the AWS nodes boot an AMI whose NVIDIA driver
runs the GPU image, MLflow accepts its Kubernetes Service's names, Prefect keeps its state in PostgreSQL and
runs flows from the image's code; the Prefect deployment starts a real smoke run through a real work pool."""

from __future__ import annotations

import copy
import http.client
import inspect
import io
import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.conftest import BIN, ROOT

INFRA = ROOT / "infra"
K8S_VERSION = "1.33"


def _profile_resources() -> dict:
    return yaml.safe_load((ROOT / "conf" / "profile" / "cluster.yaml").read_text())["resources"]


def _is_spot(node: dict) -> bool:
    return node["node_config"].get("InstanceMarketOptions", {}).get("MarketType") == "spot"


BUILT_IN = ("CPU", "GPU", "memory", "object_store_memory")


def _custom_resources(node: dict) -> dict:
    return {k: v for k, v in node.get("resources", {}).items() if k not in BUILT_IN}


def _is_fallback_of(node: dict, spot: dict) -> bool:
    """An on-demand node type that takes what `spot` takes: no market options, the same instance type and custom
    resources (so the same actors fit), the same image, nothing kept running, and ranked after the spot type."""
    return (
        not _is_spot(node)
        and "InstanceMarketOptions" not in node["node_config"]
        and node["node_config"]["InstanceType"] == spot["node_config"]["InstanceType"]
        and _custom_resources(node) == _custom_resources(spot)
        and node.get("docker") == spot.get("docker")
        and node.get("min_workers", 0) == 0
        and node.get("priority", 0) < spot.get("priority", 0)
    )


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
    for name, node in types.items():  # workers are spot, or the on-demand fallback of a spot type (see below)
        if name != raw["head_node_type"] and not _is_spot(node):
            assert any(_is_fallback_of(node, spot) for spot in types.values() if _is_spot(spot)), name
    assert raw["provider"]["use_internal_ips"] is True
    assert "--dashboard-host=127.0.0.1" in " ".join(raw["head_start_ray_commands"])
    script = (INFRA / "aws" / "start_services.sh").read_text()
    assert subprocess.run(["bash", "-n", str(INFRA / "aws" / "start_services.sh")]).returncode == 0
    assert "--host 0.0.0.0" not in script and script.count("--host 127.0.0.1") == 2


def test_spot_workers_span_several_subnets_and_each_has_an_on_demand_fallback():
    """Issue 48 item 9 on AWS: every spot node type lists two or more subnets (Ray's AWS provider tries the next
    one after a refused launch), and for every spot type there is an on-demand type with the same instance type
    and custom resources, min_workers 0 and a lower autoscaler-v2 priority, so the placement the cluster profile
    asks for (sim_resources, learner_resources) still finds a node when spot capacity is not there."""
    raw = yaml.safe_load((INFRA / "aws" / "cluster.yaml").read_text())
    types = raw["available_node_types"]
    workers = {name: node for name, node in types.items() if name != raw["head_node_type"]}
    spot = {name: node for name, node in workers.items() if _is_spot(node)}
    assert spot, "no spot worker type"
    for name, node in spot.items():
        subnets = node["node_config"]["SubnetIds"]
        assert len(subnets) >= 2 and len(set(subnets)) == len(subnets), (name, subnets)
        fallbacks = [other for other, o in workers.items() if _is_fallback_of(o, node)]
        assert fallbacks, (f"{name}: no on-demand fallback (its instance type and custom resources "
                           f"{_custom_resources(node)}, min_workers 0, a lower priority)")  # fmt: skip
        for other in fallbacks:
            assert set(workers[other]["node_config"]["SubnetIds"]) >= set(subnets), (name, other)
    wanted = {**_profile_resources()["sim_resources"], **_profile_resources()["learner_resources"]}
    for resource in wanted:
        assert any(resource in _custom_resources(node) for node in spot.values()), resource
    # the twin check bites: other custom resources, a kept-running twin or one ranked first is no fallback
    twin = copy.deepcopy(types["gpu"])
    del twin["node_config"]["InstanceMarketOptions"]
    twin["priority"] = types["gpu"].get("priority", 0) - 1
    assert _is_fallback_of(twin, types["gpu"])
    for field, value in (("resources", {"cpu_sim_node": 32}), ("min_workers", 1), ("priority", 5)):
        assert not _is_fallback_of({**twin, field: value}, types["gpu"]), field
    text = (INFRA / "aws" / "cluster.yaml").read_text()
    assert "infra/README.md" in text and "Losing the head" in (INFRA / "README.md").read_text()


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
            if "submitterPodTemplate" in doc["spec"]:
                _validate_pod_template(doc["spec"]["submitterPodTemplate"], where + " submitter")
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


def test_the_kubernetes_head_keeps_the_gcs_state_in_redis_with_the_password_from_a_secret():
    """Issue 48 item 9 on Kubernetes: the RayCluster turns on GCS fault tolerance the way KubeRay >= 1.3 takes
    it (spec.gcsFaultToleranceOptions: a Redis address, the password from a Secret's key), and none of the
    older settings KubeRay refuses next to it (the ray.io/ft-enabled annotation, RAY_REDIS_ADDRESS or
    REDIS_PASSWORD in the head's env, redis-password in rayStartParams). No password is written in the file;
    the Secret is created by hand, as infra/README.md says."""
    cluster = next(d for _, d in _manifests() if d["kind"] == "RayCluster")
    options = cluster["spec"].get("gcsFaultToleranceOptions")
    assert options, "RayCluster llp: no gcsFaultToleranceOptions, a lost head loses the cluster's state"
    assert set(options) <= {"redisAddress", "redisPassword", "redisUsername", "externalStorageNamespace"}, options
    assert re.fullmatch(r"(rediss?://)?[\w.-]+:\d+", options["redisAddress"]), options["redisAddress"]
    password = options["redisPassword"]
    assert set(password) == {"valueFrom"}, password  # never `value`: that would be the password itself
    ref = password["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "llp-ray-redis" and ref["key"], ref
    assert "ray.io/ft-enabled" not in cluster["metadata"].get("annotations", {})
    head = cluster["spec"]["headGroupSpec"]
    (container,) = head["template"]["spec"]["containers"]
    assert not {"RAY_REDIS_ADDRESS", "REDIS_PASSWORD", "REDIS_USERNAME"} & set(_env(container)), _env(container)
    assert not {"redis-password", "redis-username"} & set(head["rayStartParams"])
    readme = (INFRA / "README.md").read_text()
    assert "create secret generic llp-ray-redis" in readme and f"--from-file={ref['key']}=" in readme
    assert "Losing the head" in readme


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


# a password given as a reference to a Secret (KubeRay's redisPassword.valueFrom) is not one written down
CREDENTIAL = re.compile(
    r"AKIA[0-9A-Z]{16}|aws_secret_access_key\s*[:=]\s*\S|password\s*[:=]\s*(?!\{?\s*valueFrom\b)\S+", re.I
)


def test_no_credential_is_written_into_infra():
    for path in INFRA.rglob("*"):
        if path.is_file() and path.suffix in (".yaml", ".yml", ".sh", ".md", ".cpu", ".gpu", ""):
            found = CREDENTIAL.search(path.read_text())
            assert found is None, f"{path}: {found.group(0)}"
    # a Secret reference passes, the password written in its place does not
    assert not CREDENTIAL.search("redisPassword:\n  valueFrom:\n    secretKeyRef: {name: s, key: auth}")
    assert not CREDENTIAL.search("redisPassword: {valueFrom: {secretKeyRef: {name: s, key: auth}}}")
    assert CREDENTIAL.search("redisPassword:\n  value: hunter2") and CREDENTIAL.search("redisPassword: hunter2")


def test_the_prefect_deployment_starts_a_smoke_run_through_a_work_pool(services, tmp_path):
    """`prefect deploy` of infra/prefect/prefect.yaml, `prefect deployment run`, and a process worker that
    picks the flow run up: the run it starts completes and Prefect says so. The pull step's directory is the
    image's code directory (test_prefect_deployments_run_flows_from_the_image_s_code_directory); here it is
    pointed at this checkout, the code directory of this machine's worker."""
    env = {**os.environ, **services["env"], "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    prefect = str(BIN / "prefect")
    config = yaml.safe_load((INFRA / "prefect" / "prefect.yaml").read_text())
    (step,) = config["pull"]
    step["prefect.deployments.steps.set_working_directory"]["directory"] = str(ROOT)
    prefect_file = tmp_path / "deploy" / "prefect.yaml"
    prefect_file.parent.mkdir()
    prefect_file.write_text(yaml.safe_dump(config, sort_keys=False))

    def sh(*args, timeout=300):
        result = subprocess.run(list(args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        return result.stdout

    sh(prefect, "work-pool", "create", "llp", "--type", "process", "--overwrite")
    sh(prefect, "--no-prompt", "deploy", "--all", "--prefect-file", str(prefect_file))
    out = sh(prefect, "deployment", "run", "llp-start/smoke", "--param", f'sets=["run_root={tmp_path}"]',
             "--param", "until_stage=locomotion_teacher", "--param", "run_id=from-prefect")  # fmt: skip
    flow_run_id = re.search(r"UUID: ([0-9a-f-]{36})", out).group(1)
    sh(prefect, "worker", "start", "--pool", "llp", "--run-once", timeout=600)
    state = json.loads(sh(prefect, "flow-run", "inspect", flow_run_id, "--output", "json"))["state"]["type"]
    assert state == "COMPLETED", state
    book = json.loads((Path(tmp_path) / "from-prefect" / "ledger.json").read_text())
    assert book["stages"]["locomotion_teacher"]["state"] == "completed"


def _version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _image_fields(node, where: str = ""):
    """(where, value) of every `image` / `worker_image` field in a parsed YAML document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("image", "worker_image") and isinstance(value, str):
                yield f"{where}.{key}", value
            else:
                yield from _image_fields(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _image_fields(value, f"{where}[{i}]")


def test_every_image_in_infra_is_pinned_to_the_package_version():
    """A node that joins mid-run pulls the head's image: every image the cluster configs name is llp-cpu or
    llp-gpu tagged with pyproject.toml's version, and no file in infra/ names a `:latest` image."""
    version = _version()
    docs = [(n, d) for n, d in _manifests()] + [
        ("cluster.yaml", yaml.safe_load((INFRA / "aws" / "cluster.yaml").read_text()))
    ]
    images = [(f"{name}{where}", image) for name, doc in docs for where, image in _image_fields(doc)]
    assert len(images) >= 8, images  # head, two worker groups, submitter, three servers; the AWS config's two
    for where, image in images:
        repository, _, tag = image.rpartition("/")[2].partition(":")
        assert repository in ("llp-cpu", "llp-gpu") and tag == version, (where, image, version)
    for path in INFRA.rglob("*"):
        if path.is_file() and path.suffix in (".yaml", ".yml", ".sh", ".md", ".cpu", ".gpu"):
            text = path.read_text()
            assert not re.search(r":latest\b", text), path
            for tag in re.findall(r"\bllp-(?:cpu|gpu):([0-9][\w.\-]*)", text):  # build commands and comments
                assert tag == version, (path, tag, version)


def test_the_aws_nodes_boot_an_ami_whose_nvidia_driver_runs_the_gpu_image():
    """No `latest_dlami` (Ray turns it into its Ubuntu 18.04 DLAMI, whose driver predates CUDA 13): every node
    names AWS's public SSM parameter of the Deep Learning Base OSS Nvidia Driver GPU AMI, which Ray's AWS config
    code passes to EC2 unchanged, and the config documents that AMI's name and a driver of 580 or newer (torch
    cu130's minimum)."""
    from ray.autoscaler._private.aws.config import DEFAULT_AMI_NAME, _check_ami

    text = (INFRA / "aws" / "cluster.yaml").read_text()
    raw = yaml.safe_load(text)
    assert "latest_dlami" not in text
    assert "cloudwatch" not in raw["provider"]  # with an agent configured Ray would describe_images the parameter
    parameter = re.compile(
        r"resolve:ssm:/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-(2[24]\.04)/latest/ami-id"
    )
    resolved = copy.deepcopy(raw)
    _check_ami(resolved)
    for name, node in raw["available_node_types"].items():
        image = node["node_config"]["ImageId"]
        found = parameter.fullmatch(image)
        assert found, (name, image)
        assert resolved["available_node_types"][name]["node_config"]["ImageId"] == image, name
        assert f"Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu {found.group(1)})" in " ".join(text.split())
    driver = re.search(r"NVIDIA driver >= (\d+)", text)
    assert driver and int(driver.group(1)) >= 580, driver
    # the check bites: Ray replaces latest_dlami by its own default, the CUDA 11 era Ubuntu 18.04 DLAMI
    broken = copy.deepcopy(raw)
    broken["available_node_types"]["gpu"]["node_config"]["ImageId"] = "latest_dlami"
    _check_ami(broken)
    assert broken["available_node_types"]["gpu"]["node_config"]["ImageId"].startswith("ami-")
    assert "18.04" in DEFAULT_AMI_NAME


def test_prefect_deployments_run_flows_from_the_image_s_code_directory():
    """prefect.yaml passes Prefect's own deployment model, and every deployment has a pull step (else `prefect
    deploy` records the deploying machine's directory): set_working_directory, a step Prefect can import and
    call with these arguments, to the images' WORKDIR, where their COPY put the flow's entrypoint."""
    from dockerfile_parse import DockerfileParser
    from prefect.cli.deploy._models import PrefectYamlModel
    from prefect.utilities.importtools import import_object

    workdirs = set()
    for name in ("Dockerfile.cpu", "Dockerfile.gpu"):
        parser = DockerfileParser(fileobj=io.BytesIO((INFRA / "docker" / name).read_bytes()))
        workdirs.add([s["value"] for s in parser.structure if s["instruction"] == "WORKDIR"][-1])
    (workdir,) = workdirs
    model = PrefectYamlModel.model_validate(yaml.safe_load((INFRA / "prefect" / "prefect.yaml").read_text()))
    assert model.deployments
    for deployment in model.deployments:
        steps = deployment.pull or model.pull
        assert steps, f"{deployment.name}: no pull step"
        ((step, arguments),) = steps[-1].items()
        inspect.signature(import_object(step)).bind(**arguments)  # Prefect resolves the step the same way
        assert step == "prefect.deployments.steps.set_working_directory", (deployment.name, step)
        assert arguments["directory"] == workdir, (deployment.name, arguments, workdir)
        assert (ROOT / deployment.entrypoint.split(":")[0]).is_file(), deployment.entrypoint


def _env(container: dict) -> dict:
    return {e["name"]: e for e in container.get("env", [])}


def test_prefect_keeps_its_state_in_postgresql():
    """A restart of the Prefect server's pod or container loses nothing: on Kubernetes its database URL comes
    from a Secret (as MLflow's does), on AWS from Secrets Manager, and neither is a SQLite file."""
    deployments = {d["metadata"]["name"]: d for _, d in _manifests() if d["kind"] == "Deployment"}
    (container,) = deployments["prefect-server"]["spec"]["template"]["spec"]["containers"]
    url = _env(container)["PREFECT_API_DATABASE_CONNECTION_URL"]
    assert "value" not in url and url["valueFrom"]["secretKeyRef"]["name"] == "llp-prefect-db", url
    mlflow = _env(deployments["mlflow"]["spec"]["template"]["spec"]["containers"][0])["MLFLOW_BACKEND_STORE_URI"]
    assert mlflow["valueFrom"]["secretKeyRef"]["name"] == "llp-mlflow-db"
    script = (INFRA / "aws" / "start_services.sh").read_text()
    server = next(line for line in script.splitlines() if "prefect server start" in line)
    assert server.startswith('PREFECT_API_DATABASE_CONNECTION_URL="$prefect_db" '), server
    assert re.search(r'^prefect_db="\$\(secret "\$\{LLP_PREFECT_DB_SECRET:-llp/prefect-db\}"\)"', script, re.M)
    assert "sqlite" not in script.lower()
    readme = (INFRA / "README.md").read_text()
    assert "llp-prefect-db" in readme and "llp/prefect-db" in readme and "postgresql+asyncpg://" in readme


def _pod_templates() -> list[tuple[str, dict]]:
    """(name, pod template) of every pod the manifests make, Ray's included."""
    out = []
    for _, doc in _manifests():
        if doc["kind"] == "Deployment":
            out.append((doc["metadata"]["name"], doc["spec"]["template"]))
        elif doc["kind"] == "RayCluster":
            out.append(("ray-head", doc["spec"]["headGroupSpec"]["template"]))
            out += [(f"ray-{g['groupName']}", g["template"]) for g in doc["spec"]["workerGroupSpecs"]]
        elif doc["kind"] == "RayJob":
            out.append(("ray-submitter", doc["spec"].get("submitterPodTemplate", {"spec": {}})))
    return out


def test_each_role_runs_under_its_own_service_account():
    """Every pod names a ServiceAccount that the manifests create; the roles do not share one; only MLflow's
    has the S3 role, and only the accounts that call Kubernetes' API (the Ray head's autoscaler) or that
    need a token for the role (IRSA) get a token mounted."""
    accounts = {d["metadata"]["name"]: d for _, d in _manifests() if d["kind"] == "ServiceAccount"}
    used = {}
    for name, template in _pod_templates():
        account = template["spec"].get("serviceAccountName")
        assert account in accounts, (name, account)
        used[name] = account
    assert len(set(used.values())) >= 5 and used["mlflow"] != used["prefect-server"] != used["prefect-worker"], used
    assert used["ray-head"] != used["ray-cpu-sim"] == used["ray-gpu"], used
    with_role = {n for n, a in accounts.items() if "eks.amazonaws.com/role-arn" in a["metadata"].get("annotations", {})}
    assert with_role == {used["mlflow"]}, with_role
    with_token = {n for n, a in accounts.items() if a.get("automountServiceAccountToken", True)}
    assert with_token == {used["mlflow"], used["ray-head"]}, with_token


def _selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, selector  # the model below knows matchLabels only
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _reaches(policies: list[dict], source: tuple[str, dict], target: dict, port: int) -> bool:
    """Kubernetes' NetworkPolicy semantics for ingress into a pod of namespace llp: a pod no policy selects
    accepts everything; a selected one accepts what some rule of a selecting policy allows."""
    namespace, labels = source
    selecting = [p["spec"] for p in policies if _selects(p["spec"]["podSelector"], target)]
    selecting = [p for p in selecting if "Ingress" in p.get("policyTypes", ["Ingress"])]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy.get("ingress", []):
            if "ports" in rule and port not in {p["port"] for p in rule["ports"]}:
                continue
            if "from" not in rule:
                return True
            for peer in rule["from"]:
                assert "ipBlock" not in peer, peer
                if "namespaceSelector" in peer:
                    in_namespace = _selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": namespace})
                else:
                    in_namespace = namespace == "llp"
                if in_namespace and _selects(peer.get("podSelector", {}), labels):
                    return True
    return False


def test_network_policies_let_only_the_pods_that_need_a_server_reach_it():
    """Ingress is denied by default in namespace llp; MLflow, the Prefect API, Ray and the Prefect worker
    accept only the labelled llp pods that use them (the KubeRay operator reaches the head's dashboard only).
    Evaluated with NetworkPolicy's semantics over the pods' labels, KubeRay's own labels added."""
    docs = _manifests()
    policies = [d for _, d in docs if d["kind"] == "NetworkPolicy"]
    assert all(p["metadata"]["namespace"] == "llp" for p in policies)
    deny = [p for p in policies if p["spec"]["podSelector"] == {} and not p["spec"].get("ingress")]
    assert deny and deny[0]["spec"]["policyTypes"] == ["Ingress"], "no default-deny ingress policy"

    pods = {name: dict(t.get("metadata", {}).get("labels", {})) for name, t in _pod_templates()}
    pods["ray-head"].update({"ray.io/cluster": "llp", "ray.io/node-type": "head"})
    for group in ("cpu-sim", "gpu"):
        pods[f"ray-{group}"].update({"ray.io/cluster": "llp", "ray.io/node-type": "worker", "ray.io/group": group})
    sources = {name: ("llp", labels) for name, labels in pods.items()}
    sources["stranger"] = ("llp", {"app": "notebook"})
    sources["ray-labelled, other namespace"] = ("default", {"ray.io/cluster": "llp", "app": "prefect-worker"})
    sources["kuberay-operator"] = ("kuberay", {"app.kubernetes.io/name": "kuberay-operator"})
    sources["operator-labelled, in llp"] = ("llp", {"app.kubernetes.io/name": "kuberay-operator"})

    services = {d["metadata"]["name"]: d["spec"] for _, d in docs if d["kind"] == "Service"}
    mlflow_port = services["mlflow"]["ports"][0]["targetPort"]
    prefect_port = services["prefect"]["ports"][0]["targetPort"]
    allowed = {  # (target pod, port): the sources that reach it; every other source is refused
        ("mlflow", mlflow_port): {"ray-head", "ray-cpu-sim", "ray-gpu", "prefect-worker"},
        ("prefect-server", prefect_port): {"ray-head", "prefect-worker"},
        ("ray-head", 6379): {"ray-head", "ray-cpu-sim", "ray-gpu", "prefect-worker"},
        ("ray-head", 8265): {"ray-head", "ray-cpu-sim", "ray-gpu", "prefect-worker", "ray-submitter",
                             "kuberay-operator"},
        ("ray-gpu", 10002): {"ray-head", "ray-cpu-sim", "ray-gpu", "prefect-worker"},
        ("prefect-worker", 10002): {"ray-head", "ray-cpu-sim", "ray-gpu"},
        ("ray-submitter", 8080): set(),
    }  # fmt: skip
    for (target, port), expected in allowed.items():
        reached = {name for name, source in sources.items() if _reaches(policies, source, pods[target], port)}
        assert reached == expected, (target, port, sorted(reached ^ expected))

    # every Service's pods are selected by a policy, and its peers are labelled pods of namespace llp
    for name, spec in services.items():
        selecting = [
            p
            for p in policies
            if p["spec"]["podSelector"] != {} and _selects(p["spec"]["podSelector"], spec["selector"])
        ]
        assert selecting, f"Service {name}: no policy selects its pods"
        for policy in selecting:
            for rule in policy["spec"]["ingress"]:
                for peer in rule["from"]:
                    assert set(peer) == {"podSelector"} and peer["podSelector"]["matchLabels"], (name, peer)


def _mlflow_allowed_hosts() -> str:
    deployment = next(d for _, d in _manifests() if d["kind"] == "Deployment" and d["metadata"]["name"] == "mlflow")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    return command[command.index("--allowed-hosts") + 1]


def test_mlflow_on_kubernetes_accepts_its_service_s_names_and_refuses_other_hosts(tmp_path):
    """MLflow 3 answers 403 to a Host header outside its allowed hosts, whose default is localhost and private
    IPs: a real `mlflow server` with the Deployment's --allowed-hosts answers requests addressed to the Service
    by any of its names, with or without the port, and still refuses a foreign Host."""
    from mlflow.server.security_utils import get_default_allowed_hosts, is_allowed_host_header

    from llp.infra.services import _spawn, free_port

    names = [f"mlflow{suffix}" for suffix in ("", ".llp", ".llp.svc", ".llp.svc.cluster.local")]
    hosts = names + [f"{name}:5000" for name in names]
    assert not is_allowed_host_header(get_default_allowed_hosts(), "mlflow.llp.svc.cluster.local:5000")  # the bug
    port = free_port()
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
           "--backend-store-uri", store, "--artifacts-destination", str(tmp_path / "artifacts"),
           "--allowed-hosts", _mlflow_allowed_hosts()]  # fmt: skip
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    server = _spawn("mlflow server", cmd, env, tmp_path / "mlflow.log", f"http://127.0.0.1:{port}/health", 120)

    def status(host: str) -> tuple[int, str]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request(
                "GET", "/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default", headers={"Host": host}
            )
            response = connection.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            connection.close()

    try:
        for host in hosts + ["localhost:5000"]:
            code, body = status(host)
            assert code == 200, (host, code, body[:200])
        for host in ("evil.example.com:5000", "mlflow.llp.svc.cluster.local.evil.example.com"):
            code, body = status(host)
            assert code == 403 and "Invalid Host header" in body, (host, code, body[:200])
    finally:
        server.stop()


def test_a_prefect_worker_without_a_raylet_sends_the_run_to_the_head_as_a_ray_job(monkeypatch):
    """On Kubernetes the worker's pod has no raylet, so it cannot be a Ray driver: with RAY_ADDRESS a job server's
    URL the deployment's flow runs `llp submit --follow` (a resume too); with a GCS address it stays the driver.
    On AWS the worker runs on the head and is given the head's GCS address."""
    from llp.flows.deployment import llp_command
    from llp.flows.submit import entrypoint

    monkeypatch.setenv("RAY_ADDRESS", "http://llp-head-svc.llp.svc.cluster.local:8265")
    sent = llp_command("cluster", ["seed=3"], "exp-1", False, "merge", [])
    assert sent[1:7] == ["submit", "--address", "http://llp-head-svc.llp.svc.cluster.local:8265", "--follow",
                         "--profile", "cluster"]  # fmt: skip
    assert sent[7:] == ["--run-id", "exp-1", "--set", "seed=3", "--until-stage", "merge"]
    assert llp_command("cluster", [], "exp-1", True, None, [])[1:] == [
        "submit", "--address", "http://llp-head-svc.llp.svc.cluster.local:8265", "--follow", "--profile", "cluster",
        "--run-id", "exp-1", "--resume"]  # fmt: skip
    assert entrypoint("cluster", [], "exp-1", None, [], resume=True) == "llp resume exp-1"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    assert llp_command("cluster", [], "exp-1", False, None, [])[1:4] == ["run", "--profile", "cluster"]
    worker = next(d for _, d in _manifests() if d["kind"] == "Deployment" and d["metadata"]["name"] == "prefect-worker")
    env = {e["name"]: e.get("value") for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["RAY_ADDRESS"].startswith("http://") and env["RAY_ADDRESS"].endswith(":8265")
    script = (ROOT / "infra" / "aws" / "start_services.sh").read_text()
    assert 'RAY_ADDRESS="${RAY_ADDRESS:-127.0.0.1:6379}" nohup prefect worker start' in script


def test_llp_submit_resume_needs_the_run_it_continues(llp):
    result = llp("submit", "--profile", "smoke", "--resume", timeout=60)
    assert result.returncode == 2 and "--resume continues a run: name it with --run-id" in result.stderr
