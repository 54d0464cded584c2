"""MLflow as the artifact bus: pipeline and stage runs, checkpoints, registered policies and datasets, lineage.

Naming: every stage output is a registered model ``llp-<stage output>`` (for
example ``llp-locomotion-teacher``); each version carries lineage tags
(``llp.inputs``, ``llp.config_hash``, ``llp.code_version``, ``llp.pipeline_run``,
``llp.stage``) and the alias ``run-<pipeline run id>``. Datasets (reference
libraries, reports) are registered the same way, as versions whose source is a
folder of the stage run's artifacts, tagged ``llp.kind=dataset``. Downstream
stages load their inputs by ``models:/`` URI only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any

# quiet, offline defaults (set before mlflow is imported)
for _key, _value in {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "MLFLOW_UV_AUTO_DETECT": "false",
    "MLFLOW_RECORD_ENV_VARS_IN_MODEL_LOGGING": "false",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    "GIT_PYTHON_REFRESH": "quiet",
}.items():
    os.environ.setdefault(_key, _value)

import mlflow  # noqa: E402
from mlflow import MlflowClient  # noqa: E402

logging.getLogger("mlflow").setLevel(logging.ERROR)

TORCH_REQUIREMENT = "torch==2.13.0"


def host_description() -> str:
    """The machine this process computes on, as a run tag (``llp.host``): CPU model, the instruction set torch's
    kernels dispatch to, MKL's instruction cap if one is set, cores. One seed repeats a stage bit for bit on one
    machine type; another instruction set rounds differently and training diverges from the first iteration
    (docs/usage.md, "Repeating a run"), so runs to compare say where they ran."""
    import platform

    import torch

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mkl = os.environ.get("MKL_ENABLE_INSTRUCTIONS")
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{model}; torch {torch.__version__} {capability}{f'; MKL {mkl}' if mkl else ''}; {os.cpu_count()} cores"


def configure(run_root: Path, experiment: str, create: bool = True) -> str:
    """Point MLflow at ``MLFLOW_TRACKING_URI`` or at a local SQLite store under ``run_root``; returns the URI.
    ``create=False`` (commands that only read the registry): a missing local store is a ValueError, and nothing
    is written."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri and not create and not (run_root / "mlflow.db").is_file():
        raise ValueError(f"no model registry under {run_root}/ (no mlflow.db): run a pipeline there first, or set "
                         "MLFLOW_TRACKING_URI to the tracking server that has the model")  # fmt: skip
    if not uri:
        run_root.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{(run_root / 'mlflow.db').resolve()}"
    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(experiment) is None:
        location = None
        if uri.startswith("sqlite:"):
            location = (run_root / "mlartifacts").resolve().as_uri()
        elif os.environ.get("LLP_ARTIFACT_LOCATION"):
            location = os.environ["LLP_ARTIFACT_LOCATION"]
        mlflow.create_experiment(experiment, artifact_location=location)
    mlflow.set_experiment(experiment)
    return uri


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """Nested config -> {'a.b.c': 'value'} for MLflow params."""
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
    else:
        out[prefix.rstrip(".")] = json.dumps(data) if not isinstance(data, str) else data
    return out


def start_parent_run(experiment: str, name: str, tags: dict[str, str], config: dict) -> str:
    """A pipeline's MLflow run, created RUNNING (its stages nest under it), with the resolved config as
    parameters; ended by ``set_terminated`` when the pipeline ends."""
    from mlflow.entities import Param

    client = MlflowClient()
    exp = mlflow.get_experiment_by_name(experiment)
    run = client.create_run(exp.experiment_id, tags=tags, run_name=name)
    params = [Param(k, v[:6000]) for k, v in list(flatten(config).items())[:500]]
    for i in range(0, len(params), 100):
        client.log_batch(run.info.run_id, params=params[i : i + 100])
    return run.info.run_id


def run_link(run_id: str) -> str:
    """Where a person looks at a run: the server's UI page, or the local store to open with ``mlflow ui``."""
    uri = mlflow.get_tracking_uri()
    run = MlflowClient().get_run(run_id)
    if uri.startswith("http"):
        return f"{uri.rstrip('/')}/#/experiments/{run.info.experiment_id}/runs/{run_id}"
    return f"{uri} (experiment {run.info.experiment_id}, run {run_id}; see it with `llp ui`)"


def find_run(tags: dict[str, str], experiment: str) -> Any | None:
    """The most recent run carrying all ``tags``, or None."""
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        return None
    query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    runs = MlflowClient().search_runs(
        [exp.experiment_id], query, order_by=["attributes.start_time DESC"], max_results=1
    )
    return runs[0] if runs else None


def log_checkpoint(run_id: str, path: Path, iteration: int) -> None:
    """Upload a training checkpoint as ``checkpoints/latest.pt`` (replacing the previous one)."""
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "latest.pt"  # the artifact's name, whatever the local file is called
        shutil.copyfile(path, target)
        MlflowClient().log_artifact(run_id, str(target), artifact_path="checkpoints")
    MlflowClient().log_metric(run_id, "checkpoint/iteration", iteration, step=iteration)


def run_tag(run_id: str, key: str) -> str | None:
    return MlflowClient().get_run(run_id).data.tags.get(key)


def set_run_tag(run_id: str, key: str, value: str) -> None:
    MlflowClient().set_tag(run_id, key, value)


def download_checkpoint(run_id: str, dst: Path) -> Path | None:
    """The run's latest checkpoint, downloaded to ``dst``, or None if it has none."""
    names = [f.path for f in MlflowClient().list_artifacts(run_id, "checkpoints")]
    if "checkpoints/latest.pt" not in names:
        return None
    dst.mkdir(parents=True, exist_ok=True)
    local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="checkpoints/latest.pt", dst_path=str(dst))
    return Path(local)


def register_policy(
    run_id: str, model_name: str, module, spec: dict, input_example, tags: dict[str, str], alias: str
) -> str:
    """Log ``module`` (torch.export / pt2 format, with an input example) in ``run_id``, register it as a new
    version of ``model_name`` with lineage ``tags`` and ``alias``; returns ``models:/name/version``."""
    import mlflow.pytorch

    active = mlflow.active_run()
    with nullcontext() if active is not None and active.info.run_id == run_id else mlflow.start_run(run_id=run_id):
        info = mlflow.pytorch.log_model(
            module,
            name="policy",
            serialization_format="pt2",
            input_example=input_example,
            pip_requirements=[TORCH_REQUIREMENT],
            metadata={"llp_policy_spec": spec},
            registered_model_name=model_name,
        )
    version = str(info.registered_model_version)
    client = MlflowClient()
    for key, value in tags.items():
        client.set_model_version_tag(model_name, version, key, value)
    client.set_model_version_tag(model_name, version, "llp.serialization", "pt2")
    with tempfile.TemporaryDirectory() as tmp:  # the files as stored: their digests guard every later load
        stored = Path(mlflow.artifacts.download_artifacts(f"models:/{model_name}/{version}", dst_path=tmp))
        client.set_model_version_tag(model_name, version, DIGEST_TAG, json.dumps(file_digests(stored)))
    client.set_registered_model_alias(model_name, alias, version)
    return f"models:/{model_name}/{version}"


DIGEST_TAG = "llp.sha256"  # {relative path: sha256} of a registered version's files


class ArtifactIntegrityError(ValueError):
    """A registered version's files are missing or differ from what was registered."""


def file_digests(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (or of ``root`` itself), by path relative to ``root``."""
    import hashlib

    root = Path(root)
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    out = {}
    for f in files:
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        out[f.name if f == root else f.relative_to(root).as_posix()] = h.hexdigest()
    return out


def verify_digests(uri: str, local: Path) -> None:
    """Compare downloaded files with the digests recorded at registration; versions registered before
    digests were recorded pass unchecked."""
    name, version = parse_model_uri(resolve_model_uri(uri))
    recorded = MlflowClient().get_model_version(name, version).tags.get(DIGEST_TAG)
    if recorded is None:
        return
    expected, found = json.loads(recorded), file_digests(local)
    for path, digest in sorted(expected.items()):
        if path not in found:
            raise ArtifactIntegrityError(f"models:/{name}/{version}: file {path} is missing from the artifact store")
        if found[path] != digest:
            raise ArtifactIntegrityError(
                f"models:/{name}/{version}: file {path} does not match its registered sha256 "
                f"({digest[:12]}..., found {found[path][:12]}...): the stored copy was changed or corrupted"
            )


def register_dataset(run_id: str, name: str, local: Path, tags: dict[str, str], alias: str) -> str:
    """Upload ``local`` (a file or a folder: a reference library, a report) as artifacts of ``run_id`` and register
    them as a new version of ``name``, with lineage ``tags``, the tag ``llp.kind=dataset`` and ``alias``. Returns
    ``models:/name/version``: datasets travel the bus like policies, versioned and resolved by URI."""
    client = MlflowClient()
    local = Path(local)
    if not local.exists():
        raise ValueError(f"dataset {name}: {local} does not exist")
    artifact_path = f"datasets/{name}"
    if local.is_dir():
        client.log_artifacts(run_id, str(local), artifact_path=artifact_path)
    else:
        client.log_artifact(run_id, str(local), artifact_path=artifact_path)
    try:
        client.get_registered_model(name)
    except Exception:
        client.create_registered_model(name, tags={"llp.kind": "dataset"})
    digests = json.dumps(file_digests(local))
    version = client.create_model_version(
        name,
        source=f"runs:/{run_id}/{artifact_path}",
        run_id=run_id,
        tags={**tags, "llp.kind": "dataset", DIGEST_TAG: digests},
    ).version
    client.set_registered_model_alias(name, alias, str(version))
    return f"models:/{name}/{version}"


def download_dataset(uri: str, dst: Path) -> Path:
    """The files of dataset ``uri`` (any models:/ form), downloaded under ``dst``; returns their folder."""
    resolved = resolve_model_uri(uri)
    name, version = parse_model_uri(resolved)
    if MlflowClient().get_model_version(name, version).tags.get("llp.kind") != "dataset":
        raise ValueError(f"{uri} is not a dataset (a policy? load it with load_policy)")
    dst.mkdir(parents=True, exist_ok=True)
    local = Path(mlflow.artifacts.download_artifacts(resolved, dst_path=str(dst)))
    verify_digests(resolved, local)
    return local


def set_alias(model_uri: str, alias: str) -> None:
    name, version = parse_model_uri(model_uri)
    MlflowClient().set_registered_model_alias(name, alias, version)


def parse_model_uri(uri: str) -> tuple[str, str]:
    """'models:/name/3' -> ('name', '3'); 'models:/name@alias' -> ('name', version the alias points at)."""
    if not uri.startswith("models:/"):
        raise ValueError(f"stage inputs are models:/ URIs, got {uri!r}")
    rest = uri[len("models:/") :]
    if "@" in rest:
        name, alias = rest.split("@", 1)
        return name, str(MlflowClient().get_model_version_by_alias(name, alias).version)
    name, version = rest.rsplit("/", 1)
    return name, version


def check_model_uri(uri: str) -> None:
    """A ValueError unless ``uri`` is a ``models:/`` URI (checked before any registry is opened)."""
    if not uri.startswith("models:/"):
        raise ValueError(f"expected a models:/ URI, got {uri!r}")


def registered_model(run_root: Path, experiment: str, uri: str) -> str:
    """``uri`` (any ``models:/`` form) resolved to ``models:/NAME/VERSION`` in the registry that ``configure``
    opens read-only; a malformed URI is refused before any registry is opened."""
    check_model_uri(uri)
    configure(run_root, experiment, create=False)
    return resolve_model_uri(uri)


def resolve_model_uri(uri: str) -> str:
    """``models:/NAME/VERSION`` for any model URI (a version, ``latest`` or ``@alias``), or a ValueError that says
    what the registry has."""
    check_model_uri(uri)
    rest = uri[len("models:/") :]
    name = rest.split("@", 1)[0] if "@" in rest else rest.rsplit("/", 1)[0]
    client = MlflowClient()
    versions = client.search_model_versions(f"name='{name}'", order_by=["version_number DESC"])
    if not versions:
        known = ", ".join(sorted(m.name for m in client.search_registered_models())) or "none"
        raise ValueError(f"no registered model {name!r} in {mlflow.get_tracking_uri()} (registered: {known})")
    if "@" in rest:
        try:
            return f"models:/{name}/{client.get_model_version_by_alias(name, rest.split('@', 1)[1]).version}"
        except Exception:
            raise ValueError(f"{uri}: model {name!r} has no such alias") from None
    version = rest.rsplit("/", 1)[1]
    if version == "latest":
        return f"models:/{name}/{versions[0].version}"
    if version not in {str(v.version) for v in versions}:
        have = ", ".join(str(v.version) for v in versions)
        raise ValueError(f"{uri}: model {name!r} has no version {version} (versions: {have})")
    return f"models:/{name}/{version}"


def load_policy(uri: str):
    """A registered policy as a ``LoadedPolicy`` (module + spec), from its ``models:/`` URI alone."""
    import mlflow.pytorch

    from llp.learn.export import LoadedPolicy, PolicySpec

    name, version = parse_model_uri(uri)
    if MlflowClient().get_model_version(name, version).tags.get("llp.kind") == "dataset":
        raise ValueError(f"{uri} is a dataset, not a policy (download it with download_dataset)")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=tmp))
        verify_digests(uri, local)
        module = mlflow.pytorch.load_model(str(local))
    meta = mlflow.models.get_model_info(uri).metadata or {}
    if "llp_policy_spec" not in meta:
        raise ValueError(f"{uri} has no llp_policy_spec metadata: not a policy registered by this platform")
    return LoadedPolicy(module, PolicySpec(**meta["llp_policy_spec"]))


def download_policy(uri: str) -> tuple[bytes, dict]:
    """A registered policy as (its torch.export program's bytes, its policy spec): what Ray workers load
    with ``llp.learn.export.load_program`` (the loaded module itself does not pickle). For the deployable files
    (a dataset holding ``policy.onnx`` and ``policy.json``): the ONNX file's bytes and the spec in policy.json,
    marked ``format: onnx``, so the policy runs closed loop exactly as exported."""
    name, version = parse_model_uri(resolve_model_uri(uri))
    if MlflowClient().get_model_version(name, version).tags.get("llp.kind") == "dataset":
        return _download_deployable(uri)
    meta = mlflow.models.get_model_info(uri).metadata or {}
    if "llp_policy_spec" not in meta:
        raise ValueError(f"{uri} has no llp_policy_spec metadata: not a policy registered by this platform")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(mlflow.artifacts.download_artifacts(uri, dst_path=tmp))
        verify_digests(uri, local)
        programs = list(local.rglob("*.pt2"))
        if len(programs) != 1:
            raise ValueError(f"{uri}: expected one pt2 program in the model, found {len(programs)}")
        return programs[0].read_bytes(), dict(meta["llp_policy_spec"])


def _download_deployable(uri: str) -> tuple[bytes, dict]:
    with tempfile.TemporaryDirectory() as tmp:
        local = download_dataset(uri, Path(tmp))
        onnx, meta = next(local.rglob("policy.onnx"), None), next(local.rglob("policy.json"), None)
        if onnx is None or meta is None:
            have = sorted(p.name for p in local.rglob("*") if p.is_file())
            raise ValueError(f"{uri} is a dataset without policy.onnx and policy.json (it holds {have}): not a "
                             "deployable policy")  # fmt: skip
        spec = json.loads(meta.read_text()).get("spec")
        if not isinstance(spec, dict):
            raise ValueError(f"{uri}: policy.json has no 'spec' object (the observation layout, joints, camera)")
        return onnx.read_bytes(), {**spec, "format": "onnx"}


def version_tags(uri: str) -> dict[str, str]:
    name, version = parse_model_uri(uri)
    return dict(MlflowClient().get_model_version(name, version).tags)


def log_json(run_id: str, data: Any, artifact_file: str) -> None:
    MlflowClient().log_dict(run_id, json.loads(json.dumps(data, default=str)), artifact_file)


def tag_version(uri: str, key: str, value: str) -> None:
    name, version = parse_model_uri(uri)
    MlflowClient().set_model_version_tag(name, version, key, value)


def lineage_chain(uri: str) -> list[dict[str, str]]:
    """``uri`` and every model upstream of it, following each version's ``llp.inputs`` tag: one entry per model
    (uri, the stage that made it, its pipeline run), nearest first."""
    chain, todo, seen = [], [uri], set()
    while todo:
        current = todo.pop(0)
        if current in seen:
            continue
        seen.add(current)
        tags = version_tags(current)
        chain.append(
            {"uri": current, "stage": tags.get("llp.stage", ""), "pipeline_run": tags.get("llp.pipeline_run", "")}
        )
        todo += [v for v in json.loads(tags.get("llp.inputs", "{}")).values() if isinstance(v, str)]
    return chain
