"""Recovery end to end, each on its own pipeline run: a failed stage resumed, a retried or killed stage going on
from its checkpoint, NaN updates undone, the tracking server down mid-stage, the cache key, the PostgreSQL
backend store. Apart from tests/test_pipeline.py (whose tests share one smoke run) so that pytest's two
workers take a file each."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.conftest import BUCKET, SMOKE, ledger, mlflow_client

pytestmark = pytest.mark.timeout(900)


@pytest.mark.fault
def test_resume_runs_only_the_failed_stage_and_those_after_it(services, tmp_path, llp):
    from tests.conftest import ROOT

    env = {**services["env"], "LLP_INJECT_FAULT": "evaluate@0"}
    sets = [
        "--set",
        "run_root=runs",  # relative: the run lives in the folder it was started from
        "--set",
        "stages.evaluate.retries=0",
        "--set",
        "stages.locomotion_teacher.iterations=3",
    ]
    (tmp_path / "lab").mkdir()
    failed = llp("run", *SMOKE, *sets, "--run-id", "resumable", "--until-stage", "evaluate", env=env,
                 cwd=tmp_path / "lab")  # fmt: skip
    assert failed.returncode == 1
    assert "llp resume resumable" in failed.stderr
    root = tmp_path / "lab" / "runs"
    book = ledger(root, "resumable")
    assert book["state"] == "failed"
    assert book["stages"]["locomotion_teacher"]["state"] == "completed"
    assert book["stages"]["evaluate"]["state"] == "failed"
    # resumed from another folder, naming the run root absolutely: the same run goes on there
    resumed = llp("resume", "resumable", "--run-root", str(root), "--until-stage", "evaluate", env=env)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert not (ROOT / "runs" / "resumable").exists()
    book = ledger(root, "resumable")
    assert book["state"] == "completed"
    # the teacher ran once in all (cached on resume); the evaluation ran again
    assert book["stages"]["locomotion_teacher"]["executions"] == 1
    assert book["stages"]["locomotion_teacher"]["state"] == "cached"
    assert book["stages"]["evaluate"]["executions"] == 2
    assert book["stages"]["evaluate"]["state"] == "completed"


@pytest.mark.fault
def test_retried_stage_resumes_from_its_mid_stage_checkpoint(services, tmp_path, llp):
    # the crash comes after iteration 2, which no checkpoint covers yet: it is redone and logged once
    env = {**services["env"], "LLP_INJECT_FAULT": "locomotion_teacher@2"}
    sets = [
        "--set",
        f"run_root={tmp_path}",
        "--set",
        "stages.locomotion_teacher.retries=1",
        "--set",
        "stages.locomotion_teacher.checkpoint_every=2",
        "--set",
        "stages.locomotion_teacher.iterations=4",
        "--until-stage",
        "locomotion_teacher",
    ]
    result = llp("run", *SMOKE, *sets, "--run-id", "retried", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    book = ledger(tmp_path, "retried")
    teacher = book["stages"]["locomotion_teacher"]
    assert teacher["executions"] == 2 and [a["attempt"] for a in teacher["attempts"]] == [1, 2]
    client = mlflow_client(services)
    run_id = teacher["mlflow_run"]
    # one MLflow run for both attempts; 0-1 before the crash, 2 lost with it and redone, 3: each logged once
    steps = [m.step for m in client.get_metric_history(run_id, "perf/env_steps")]
    assert sorted(steps) == [0, 1, 2, 3]
    assert [m.step for m in client.get_metric_history(run_id, "checkpoint/iteration")] == [1, 3]
    assert "(resumed)" in result.stdout
    # why the first attempt failed, on the console (not only in ledger.json)
    assert "[llp] locomotion_teacher: attempt 1 failed: InjectedFault: injected fault in locomotion_teacher" in (
        result.stdout
    )


@pytest.mark.fault
def test_a_driver_killed_mid_stage_resumes_after_its_last_checkpoint(services, tmp_path, llp):
    """SIGKILL of `llp run --until-stage locomotion_teacher` (and its local Ray) after iteration 4 with a checkpoint
    every 2: `llp resume` continues after the checkpoint of iteration 3, so one iteration is redone, every iteration
    is logged once, and the resumed run stops where the killed one would have."""
    import signal
    import subprocess

    from tests.conftest import BIN, ROOT

    env = {**os.environ, **services["env"], "PYTHONUNBUFFERED": "1", "LLP_INJECT_FAULT": "locomotion_teacher@4:pause60"}
    teacher = "stages.locomotion_teacher"
    sets = [f"run_root={tmp_path}", f"{teacher}.iterations=8", f"{teacher}.checkpoint_every=2"]
    args = [*SMOKE, *[a for s in sets for a in ("--set", s)], "--until-stage", "locomotion_teacher"]
    args += ["--run-id", "killed"]
    proc = subprocess.Popen([str(BIN / "llp"), "run", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "injected pause" in line:
                os.killpg(proc.pid, signal.SIGKILL)
                break
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, "".join(seen)[-3000:]
    # no --until-stage again: a resumed run keeps the stages it was started with
    resumed = llp("resume", "killed", "--run-root", str(tmp_path), env={"LLP_INJECT_FAULT": "", **services["env"]})
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "continues after the checkpoint of iteration 3" in resumed.stdout
    assert ledger(tmp_path, "killed")["stages_selected"] == ["locomotion_teacher"]
    assert "evaluate" not in ledger(tmp_path, "killed")["stages"]
    stage = ledger(tmp_path, "killed")["stages"]["locomotion_teacher"]
    assert stage["state"] == "completed"
    client = mlflow_client(services)
    steps = sorted(m.step for m in client.get_metric_history(stage["mlflow_run"], "perf/env_steps"))
    assert steps == list(range(8))  # the redone iteration 4 is logged once


@pytest.mark.fault
def test_nan_rewards_mid_stage_are_undone_and_training_finishes(services, tmp_path, llp):
    # after iteration 1 the learner's next two updates see a NaN reward: each is undone, the rate is halved
    env = {**services["env"], "LLP_INJECT_FAULT": "locomotion_teacher@1:nan2"}
    sets = ["--set", f"run_root={tmp_path}", "--set", "stages.locomotion_teacher.iterations=5",
            "--set", "stages.locomotion_teacher.retries=0", "--until-stage", "locomotion_teacher"]  # fmt: skip
    result = llp("run", *SMOKE, *sets, "--run-id", "nan", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "iteration 2: an update left NaN or Inf and was undone (1 so far)" in result.stdout
    assert "iteration 3: an update left NaN or Inf and was undone (2 so far)" in result.stdout
    teacher = ledger(tmp_path, "nan")["stages"]["locomotion_teacher"]
    assert teacher["executions"] == 1 and teacher["state"] == "completed"
    client = mlflow_client(services)
    undone = {m.step: m.value for m in client.get_metric_history(teacher["mlflow_run"], "faults/nonfinite_updates")}
    assert undone == {0: 0.0, 1: 0.0, 2: 1.0, 3: 2.0, 4: 2.0}
    rates = {m.step: m.value for m in client.get_metric_history(teacher["mlflow_run"], "policy/learning_rate")}
    assert rates[3] == pytest.approx(rates[2] / 2)
    policy = client.get_model_version_by_alias("llp-locomotion-teacher", "run-nan")  # registered, finite
    assert policy.tags["llp.pipeline_run"] == "nan"


def test_seed_is_part_of_the_cache_key_and_a_deleted_input_is_never_substituted(services, tmp_path, llp):
    """A new seed trains anew; a run whose recorded input is gone fails naming it, and never takes another run's."""
    env = {**services["env"]}
    sets = ["--set", f"run_root={tmp_path}", "--set", "stages.locomotion_teacher.iterations=2"]
    teacher_only = [*sets, "--until-stage", "locomotion_teacher"]
    first = llp("run", *SMOKE, *teacher_only, "--run-id", "seed0", env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = llp("run", *SMOKE, *teacher_only, "--set", "seed=7", "--run-id", "seed7", env=env)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    a, b = ledger(tmp_path, "seed0"), ledger(tmp_path, "seed7")
    assert b["stages"]["locomotion_teacher"]["state"] == "completed"  # not "cached": the seed changed
    assert b["stages"]["locomotion_teacher"]["executions"] == 1
    version_a = a["stages"]["locomotion_teacher"]["outputs"]["policy"]
    version_b = b["stages"]["locomotion_teacher"]["outputs"]["policy"]
    assert version_a != version_b
    client = mlflow_client(services)
    client.delete_model_version("llp-locomotion-teacher", version_a.rsplit("/", 1)[1])
    resumed = llp(
        "resume", "seed0", "--run-root", str(tmp_path), "--from-stage", "evaluate", "--force", "evaluate", env=env
    )
    assert resumed.returncode == 1
    assert version_a in resumed.stderr and "no longer has that version" in resumed.stderr
    assert ledger(tmp_path, "seed0")["stages"].get("evaluate", {}).get("executions", 0) == 0


def test_a_dataset_round_trips_through_the_bus_with_lineage_tags(services, tmp_path):
    """A folder registered by one stage comes back, file for file, by URI, with its lineage; never as a policy."""
    import mlflow

    from llp.flows import tracking

    mlflow_client(services)
    library = tmp_path / "library"
    (library / "climb").mkdir(parents=True)
    (library / "climb" / "seed_45cm.npz").write_bytes(b"\x00motion\x01" * 50)
    (library / "provenance.json").write_text(json.dumps({"seed": "climb_45", "rounds": [45, 50, 55]}))
    lineage = {"llp.inputs": "{}", "llp.pipeline_run": "bus-test", "llp.stage": "reference_augmentation"}
    with mlflow.start_run() as run:
        uri = tracking.register_dataset(run.info.run_id, "llp-test-library", library, lineage, "run-bus-test")
    assert uri.startswith("models:/llp-test-library/")
    for form in (uri, "models:/llp-test-library@run-bus-test", "models:/llp-test-library/latest"):
        got = tracking.download_dataset(form, tmp_path / "down" / form.replace("/", "_").replace(":", "_"))
        files = sorted(str(p.relative_to(got)) for p in got.rglob("*") if p.is_file())
        assert files == ["climb/seed_45cm.npz", "provenance.json"]
        assert (got / "climb" / "seed_45cm.npz").read_bytes() == b"\x00motion\x01" * 50
    tags = tracking.version_tags(uri)
    assert tags["llp.kind"] == "dataset" and tags["llp.stage"] == "reference_augmentation"
    assert tags["llp.pipeline_run"] == "bus-test"
    with pytest.raises(ValueError, match="is a dataset, not a policy"):
        tracking.load_policy(uri)


OUTAGE_ITERATIONS = 800  # smoke iterations (0.1-0.25 s each here): the 30 s outage, and on for as long after it


@pytest.mark.fault
@pytest.mark.slow  # 2-3 min: make test-slow and make test-faults run it (the default suite stays under 20 min)
def test_training_goes_on_while_the_tracking_server_is_down_and_its_metrics_arrive_after(services, tmp_path):
    """The MLflow server goes away for 30 s mid-stage: training does not stop, the stage is not retried, and
    every iteration's metrics and every checkpoint reach the server once it is back, each exactly once."""
    import subprocess

    import torch
    from mlflow import MlflowClient

    from llp.infra.services import start_mlflow
    from tests.conftest import BIN, ROOT

    creds = {k: v for k, v in services["env"].items() if k.startswith("AWS_")}
    s3_env = {**creds, "MLFLOW_S3_ENDPOINT_URL": services["s3"].url}
    store = tmp_path / "mlflow" / "mlflow.db"
    server = start_mlflow(store, f"s3://{BUCKET}/outage", env_extra=s3_env)
    port = int(server.url.rsplit(":", 1)[1])
    env = {**os.environ, **services["env"], "MLFLOW_TRACKING_URI": server.url, "PYTHONUNBUFFERED": "1"}
    teacher = "stages.locomotion_teacher"
    args = [*SMOKE, "--set", f"run_root={tmp_path}", "--set", f"{teacher}.iterations={OUTAGE_ITERATIONS}",
            "--set", f"{teacher}.checkpoint_every=25", "--set", f"{teacher}.retries=0",
            "--until-stage", "locomotion_teacher", "--run-id", "outage"]  # fmt: skip
    log = open(tmp_path / "outage.log", "w")
    proc = subprocess.Popen([str(BIN / "llp"), "run", *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        client = MlflowClient(server.url)
        deadline = time.monotonic() + 300
        run_id, first = None, []
        while not first:  # wait for the first checkpoint on the server
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "outage.log").read_text()[-3000:]
            time.sleep(1)
            book = tmp_path / "outage" / "ledger.json"
            stages = json.loads(book.read_text())["stages"] if book.exists() else {}
            run_id = stages.get("locomotion_teacher", {}).get("mlflow_run")
            first = client.get_metric_history(run_id, "checkpoint/iteration") if run_id else []
        server.stop()
        local = tmp_path / "outage" / "checkpoints" / "locomotion_teacher" / "latest.pt"
        time.sleep(2)
        at_start = torch.load(local, weights_only=False)["iteration"]
        time.sleep(28)
        at_end = torch.load(local, weights_only=False)["iteration"]
        assert proc.poll() is None, "the run ended while the server was down"
        assert at_end >= at_start + 50, (at_start, at_end)  # training went on: checkpoints kept coming locally
        server = start_mlflow(store, f"s3://{BUCKET}/outage", port=port, env_extra=s3_env)
        assert proc.wait(timeout=600) == 0, (tmp_path / "outage.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
        log.close()
    out = (tmp_path / "outage.log").read_text()
    assert "the tracking server is not answering" in out and "the tracking server is back after" in out
    teacher = json.loads((tmp_path / "outage" / "ledger.json").read_text())["stages"]["locomotion_teacher"]
    assert teacher["executions"] == 1 and teacher["state"] == "completed"
    server = start_mlflow(store, f"s3://{BUCKET}/outage", port=port, env_extra=s3_env)
    try:
        client = MlflowClient(server.url)
        steps = sorted(m.step for m in client.get_metric_history(run_id, "perf/env_steps"))
        assert steps == list(range(OUTAGE_ITERATIONS))  # every iteration, once
        checkpoints = [m.step for m in client.get_metric_history(run_id, "checkpoint/iteration")]
        assert checkpoints[-1] == OUTAGE_ITERATIONS - 1 and len(checkpoints) == len(set(checkpoints))
    finally:
        server.stop()


def test_the_smoke_pipeline_runs_on_mlflow_with_postgresql_and_s3(services, tmp_path, llp):
    """The cluster shape of the tracking server, as infra/README.md sets it up: `mlflow server` with a PostgreSQL
    backend store (Debian's server, started here) and the S3 artifact store; the whole smoke pipeline runs on it."""
    import shutil

    from mlflow import MlflowClient

    from llp.infra.services import start_mlflow, start_postgres

    if not shutil.which("pg_ctl") and not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    s3_env = {k: v for k, v in services["env"].items() if k.startswith(("AWS_", "MLFLOW_S3"))}
    pg = start_postgres(tmp_path / "pg")
    try:
        unused = tmp_path / "mlflow" / "unused.db"
        server = start_mlflow(unused, f"s3://{BUCKET}/pg-artifacts", backend_uri=pg.url, env_extra=s3_env)
        try:
            env = {**services["env"], "MLFLOW_TRACKING_URI": server.url}
            sets = ["--set", f"run_root={tmp_path / 'runs'}", "--run-id", "pg", "--until-stage", "evaluate"]
            result = llp("run", *SMOKE, *sets, env=env)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
            client = MlflowClient(server.url)
            version = client.get_model_version_by_alias("llp-locomotion-teacher", "run-pg")
            assert version.tags.get("llp.sha256")  # registered with its file digests
            import boto3

            creds = services["env"]  # this process's own environment may hold no S3 credentials
            s3 = boto3.client("s3", endpoint_url=services["s3"].url, region_name="us-east-1",
                              aws_access_key_id=creds["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=creds["AWS_SECRET_ACCESS_KEY"])  # fmt: skip
            keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="pg-artifacts/").get("Contents", [])]
            assert any(k.endswith(".pt2") for k in keys), keys[:20]  # the policy went to the S3 artifact store
            teacher = ledger(tmp_path / "runs", "pg")["stages"]["locomotion_teacher"]
            steps = sorted(m.step for m in client.get_metric_history(teacher["mlflow_run"], "perf/env_steps"))
            assert steps == list(range(4))
            assert ledger(tmp_path / "runs", "pg")["stages"]["evaluate"]["state"] == "completed"
            assert not unused.exists()  # the runs live in PostgreSQL
        finally:
            server.stop()
    finally:
        pg.stop()
    location = tmp_path / "pg" / "data-location"  # as root the data sat in a directory of its own under /tmp
    if location.exists():
        assert not Path(location.read_text()).exists()  # removed with the server
