"""The platform spine end to end: Prefect flow, Ray actors, MLflow server with an S3 artifact store."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import BUCKET, SECRET, SMOKE, is_loopback, ledger, mlflow_client

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def smoke_run(services, tmp_path_factory):
    """One smoke pipeline against the MLflow server + S3, then a re-run of it."""
    from tests.conftest import run_llp

    # a run folder of 45 characters: inside the window where Ray's sockets used to overflow 107 bytes
    base = tmp_path_factory.mktemp("runs")
    if len(str(base)) > 43:  # pytest's temp dir leaves no room (as root: /tmp/pytest-of-root/pytest-N/popen-gwK/)
        base = Path(tempfile.mkdtemp(prefix="llp-e2e-"))
    root = base / ("r" * (45 - len(str(base)) - 1))
    assert len(str(root)) == 45, "the temp dir is too long for this test's window"
    env = {**services["env"]}
    listening = set()
    first = run_llp("run", *SMOKE, "--set", f"run_root={root}", "--run-id", "e2e", env=env, listening=listening)
    t0 = time.perf_counter()
    second = run_llp("run", *SMOKE, "--set", f"run_root={root}", "--run-id", "e2e-rerun", env=env)
    rerun_s = time.perf_counter() - t0
    yield {"root": root, "first": first, "second": second, "rerun_s": rerun_s, "listening": listening}
    if not str(base).startswith(str(tmp_path_factory.getbasetemp())):  # a folder of its own: removed
        shutil.rmtree(base, ignore_errors=True)


def test_smoke_pipeline_registers_a_policy_with_lineage_on_s3(services, smoke_run):
    first = smoke_run["first"]
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    book = ledger(smoke_run["root"], "e2e")
    assert book["state"] == "completed"
    assert [s["state"] for s in book["stages"].values()] == ["completed"] * 9
    assert {n: s["executions"] for n, s in book["stages"].items()} == {
        "locomotion_teacher": 1,
        "reference_augmentation": 1,
        "evaluate": 1,
        "skill_climb_step": 1,
        "merge": 1,
        "transition": 1,
        "depth_student": 1,
        "export": 1,
        "evaluate_final": 1,
    }
    client = mlflow_client(services)
    version = client.get_model_version_by_alias("llp-locomotion-teacher", "run-e2e")
    tags = version.tags
    for key in ("llp.inputs", "llp.config_hash", "llp.code_version", "llp.pipeline_run", "llp.stage"):
        assert key in tags
    assert tags["llp.pipeline_run"] == "e2e" and tags["llp.stage"] == "locomotion_teacher"
    assert tags["llp.serialization"] == "pt2"
    # where its numbers came from: the CPU and the instruction set torch's kernels ran on
    import torch

    assert torch.backends.cpu.get_cpu_capability() in tags["llp.host"] and "cores" in tags["llp.host"]
    # the evaluation stage read its input by models:/ URI and logged its tables
    eval_run = client.get_run(book["stages"]["evaluate"]["mlflow_run"])
    assert eval_run.data.params["inputs.policy"] == f"models:/llp-locomotion-teacher/{version.version}"
    assert "eval/fall_rate" in eval_run.data.metrics and "eval/success_rate" in eval_run.data.metrics
    assert eval_run.data.metrics["eval/trials"] == 14  # smoke: 7 settings x 2 trials
    assert eval_run.data.tags["mlflow.parentRunId"] == book["mlflow_parent_run"]
    # the artifacts really are in the S3 bucket: model, checkpoint, plots, evaluation table
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=services["s3"].url,
        region_name="us-east-1",
        aws_access_key_id="llp-test-key",
        aws_secret_access_key=SECRET,
    )
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        for o in page.get("Contents", [])
    ]
    assert any(k.endswith("checkpoints/latest.pt") for k in keys)
    assert any(k.endswith("plots/learning_curve.png") for k in keys)
    assert any(k.endswith("evaluation/success.png") for k in keys)
    assert any(k.endswith("evaluation/report.json") for k in keys)
    assert any("/models/" in k and k.endswith("MLmodel") for k in keys)
    # and a downstream process can load the policy by URI alone
    import mlflow.pytorch
    import torch

    module = mlflow.pytorch.load_model("models:/llp-locomotion-teacher@run-e2e")
    spec = mlflow.models.get_model_info("models:/llp-locomotion-teacher@run-e2e").metadata["llp_policy_spec"]
    out = module(torch.zeros(3, spec["num_frames"] * spec["obs_dim"]))
    assert tuple(out.shape) == (3, spec["num_actions"]) == (3, 12)  # the 12 leg joints
    # and knows what the actions mean: target of action_joints[i] = its default + action_scale * action[i]
    assert len(spec["default_joint_pos"]) == 21 and spec["action_scale"] == 0.25
    assert spec["proprio_layout"] == "locomotion"  # the first blocks of its proprioception (llp.sim.proprio)
    assert len(spec["action_joints"]) == 12 and all(
        "hip" in j or "knee" in j or "ankle" in j for j in spec["action_joints"]
    )


def test_a_local_run_listens_on_loopback_only(smoke_run):
    """Every socket the run's processes listen on (Ray's GCS, raylet, agents and workers, and the driver) is bound
    to 127.0.0.1, never to all interfaces or to the machine's address."""
    listening = smoke_run["listening"]
    names = {name for _, name in listening}
    assert {"gcs_server", "raylet"} <= names, f"the watch never saw Ray's servers: {sorted(listening)}"
    assert any(name.startswith("ray::") for name in names), sorted(listening)
    assert sorted(s for s in listening if not is_loopback(s[0])) == []


def test_reference_augmentation_registers_a_library_whose_grown_entry_links_to_its_seed(services, smoke_run, llp):

    from llp.flows import tracking

    book = ledger(smoke_run["root"], "e2e")
    uri = book["stages"]["reference_augmentation"]["outputs"]["library"]
    assert uri.startswith("models:/llp-reference-library/")
    mlflow_client(services)
    folder = tracking.download_dataset(uri, smoke_run["root"] / "downloaded-library")
    entries = {e["id"]: e for e in json.loads((folder / "index.json").read_text())["entries"]}
    # smoke tracks the seed at its own height (round 1, track_seed), then raises it once (round 2)
    assert set(entries) == {"climb_step_25.r0", "climb_step_25.r1", "climb_step_25.r2"}
    tracked, grown = entries["climb_step_25.r1"], entries["climb_step_25.r2"]
    assert tracked["parent"] == "climb_step_25.r0" and tracked["obstacle"]["height"] == pytest.approx(0.25)
    assert "climb_step_25.r0 at its own height" in tracked["made_by"]
    assert [a["name"] for a in tracked["acceptance"]] == ["kinematic", "scene", "dynamic"]  # its rollout's checks
    assert grown["parent"] == "climb_step_25.r1" and grown["seed"] == "climb_step_25" and grown["round"] == 2
    assert grown["obstacle"]["height"] == pytest.approx(0.275)  # 25 cm + the 2.5 cm step
    assert "climb_step_25.r1 raised by 0.025 m" in grown["made_by"]
    assert [a["name"] for a in grown["acceptance"]] == ["kinematic", "scene", "dynamic"]
    assert grown["acceptance"][2]["numbers"]["trials"] == 4 and grown["success_rate"] is not None
    assert grown["tracking_error_m"] > 0 and (folder / "climb_step_25.r2.npz").is_file()
    assert 0.0 <= grown["heading_drift_deg"] < 180.0  # measured, not judged (no max_heading_drift_deg set)
    shown = llp("refs", "e2e", "--run-root", str(smoke_run["root"]))
    assert shown.returncode == 0
    assert "| climb_step_25.r2 | climb_step | 2 | climb_step_25.r1 | climb 27.5 cm |" in shown.stdout
    lineage = llp("refs", "e2e", "--run-root", str(smoke_run["root"]), "--lineage", "climb_step_25.r2")
    assert lineage.stdout.strip() == (
        "climb_step_25.r2 (round 2, 27.5 cm) <- climb_step_25.r1 (round 1, 25 cm) <- climb_step_25.r0 (round 0, 25 cm)"
    )


def test_the_depth_student_learns_from_the_transition_policy_and_is_exported_with_lineage_to_the_first_stage(
    services, smoke_run
):
    """The smoke pipeline ends in the deployable policy: the depth student (distilled, then fine-tuned) read the
    transition policy by URI, drives every joint it drives from depth, proprioception and command, trained in the
    terrain and course groups, was evaluated beside it on the same trials, and its ONNX and TorchScript files act
    as it does and carry the chain of models back to the first stage."""
    from llp.flows import tracking

    client = mlflow_client(services)
    book = ledger(smoke_run["root"], "e2e")
    first = book["stages"]["locomotion_teacher"]["outputs"]["policy"]
    teacher = book["stages"]["transition"]["outputs"]["policy"]
    student = book["stages"]["depth_student"]["outputs"]
    library = book["stages"]["reference_augmentation"]["outputs"]["library"]  # the course's heights
    assert json.loads(tracking.version_tags(student["policy"])["llp.inputs"]) == {"policy": teacher, "library": library}
    spec = client.get_model_version(*tracking.parse_model_uri(student["policy"]))
    import mlflow

    policy_spec = mlflow.models.get_model_info(student["policy"]).metadata["llp_policy_spec"]
    assert spec.tags["llp.stage"] == "depth_student" and policy_spec["recurrent"] is True
    assert policy_spec["obs"] == ["policy/proprio", "policy/command", "depth/depth"]  # the paper's deployed inputs
    assert policy_spec["num_actions"] == 21 == len(policy_spec["action_joints"])  # every joint, as its teacher
    assert policy_spec["camera"]["camera_model"]["perfect"] is False and len(policy_spec["pd_gains"]["kp"]) == 21
    run = client.get_run(book["stages"]["depth_student"]["mlflow_run"])
    trials = {who: run.data.metrics[f"eval/{who}/success_rate"] for who in ("teacher", "distilled", "fine-tuned")}
    assert all(0.0 <= v <= 1.0 for v in trials.values())
    assert 0 <= run.data.metrics["eval/fine-tuned/course/success_rate"] <= 1  # the course from its approach
    for group in ("terrain", "course"):  # both groups rolled out, each labelled by the transition policy
        assert any(k.startswith(f"group/{group}/") for k in run.data.metrics), sorted(run.data.metrics)
    history = client.get_metric_history(run.info.run_id, "phase/finetune")
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [0.0, 0.0, 0.0, 1.0, 1.0]  # smoke: 3 + 2
    assert {m.step for m in client.get_metric_history(run.info.run_id, "loss/dagger")} == {0, 1, 2}
    assert {m.step for m in client.get_metric_history(run.info.run_id, "loss/surrogate")} == {3, 4}
    deployable = book["stages"]["export"]["outputs"]["deployable"]
    folder = tracking.download_dataset(deployable, smoke_run["root"] / "downloaded-deployable")
    assert {p.name for p in folder.iterdir()} == {"policy.onnx", "policy_torchscript.pt", "policy.json"}
    info = json.loads((folder / "policy.json").read_text())
    assert info["policy"] == student["policy"] and info["inputs"] == ["obs", "h_in"]
    assert max(info["agreement_max_abs_diff"].values()) < 1e-4
    assert 0 < info["step_time_ms_one_thread"]["onnx"]["median_ms"] < 20
    chain = json.loads(tracking.version_tags(deployable)["llp.lineage"])
    assert chain[0] == student["policy"] and set(chain[1:3]) == {teacher, library} and first in chain


def test_the_final_evaluation_runs_the_deployable_files_in_closed_loop_as_the_torch_student(services, smoke_run, llp):
    """Stage 7 on what the pipeline makes: the transition policy, the depth student and the deployable ONNX file
    beside standing still, on the same trials (terrain, the course from its approach and the climb from the
    skill's start at the library's height); the ONNX file and the torch student end every trial alike, and
    `llp evaluate` on the deployable runs the same files with the same outcomes."""
    import mlflow

    from llp.flows.stage_run import stage_seed
    from llp.stages.registry import load_pipeline

    client = mlflow_client(services)
    book = ledger(smoke_run["root"], "e2e")
    outputs = {s: book["stages"][s]["outputs"] for s in ("transition", "depth_student", "export")}
    run_id = book["stages"]["evaluate_final"]["mlflow_run"]
    reports = {}
    for who in ("teacher", "student", "deployable", "stand_still"):
        path = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=f"evaluation/reports/{who}.json",
                                                   dst_path=str(smoke_run["root"] / "final-reports"))  # fmt: skip
        reports[who] = json.loads(Path(path).read_text())
    assert reports["teacher"]["model"] == outputs["transition"]["policy"]
    assert reports["student"]["model"] == outputs["depth_student"]["policy"]
    assert reports["deployable"]["model"] == outputs["export"]["deployable"]
    settings = [(s["tile_type"], s["difficulty"]) for s in reports["deployable"]["settings"]]
    # smoke's library: the seed tracked at 25 cm and one raise to 27.5 cm, every course at both
    assert settings[-4:] == [("course", "25 cm"), ("course", "27.5 cm"), ("climb", "25 cm"), ("climb", "27.5 cm")]
    assert ("flat", "-") in settings and reports["deployable"]["trials"] == 14 + 4 + 4
    for who in ("teacher", "student", "stand_still"):  # the same trials for every policy
        assert [r["seed"] for r in reports[who]["records"]] == [r["seed"] for r in reports["deployable"]["records"]]
    outcomes = lambda who: [r["outcome"] for r in reports[who]["records"]]  # noqa: E731
    assert outcomes("deployable") == outcomes("student")
    assert client.get_run(run_id).data.metrics["eval/deployable_vs_student/same_outcome"] == 1.0
    # which commands the tracking trials fell on, per policy: every flat and rough trial counted once
    from llp.sim.command_regions import slug

    tracking = sum(s["trials"] for s in reports["deployable"]["settings"] if s["kind"] == "tracking")
    regions = reports["deployable"]["tracking_by_command"]
    assert tracking > 0 and sum(sum(r["outcomes"].values()) for r in regions.values()) == tracking
    metrics = client.get_run(run_id).data.metrics
    for region, row in regions.items():
        assert metrics[f"eval/deployable/command/{slug(region)}/success_rate"] == row["success_rate"]
    # `llp evaluate` on the deployable: the ONNX file closed loop, with the stage's protocol and seed
    seed = stage_seed(load_pipeline("smoke"), "evaluate_final")
    common = ["--profile", "smoke", "--set", f"run_root={smoke_run['root']}", "--trials", "2", "--seed", str(seed)]
    common += ["--set", "stages.evaluate_final.protocol.course_env.terrain.climb_heights=[0.25,0.275]", "--json"]
    result = llp("evaluate", "--model", "models:/llp-deployable-policy@run-e2e", *common, env=services["env"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    again = json.loads(result.stdout.strip().splitlines()[-1])
    assert again["model"] == outputs["export"]["deployable"]
    assert [s["outcomes"] for s in again["settings"]] == [s["outcomes"] for s in reports["deployable"]["settings"]]


def test_the_skill_expert_learns_from_the_exact_tracker_and_library_of_its_run(services, smoke_run):
    """The climb-and-step expert's version records the very library and tracker versions reference augmentation
    registered in this run, its actor reads no reference, it went through both phases, and it was evaluated
    beside the expert and its phase-A self from both starts."""
    import mlflow

    from llp.flows import tracking

    book = ledger(smoke_run["root"], "e2e")
    upstream = book["stages"]["reference_augmentation"]["outputs"]
    skill = book["stages"]["skill_climb_step"]["outputs"]["policy"]
    tags = tracking.version_tags(skill)
    teacher = book["stages"]["locomotion_teacher"]["outputs"]["policy"]  # its walk starts phase B's walking episodes
    assert json.loads(tags["llp.inputs"]) == {"library": upstream["library"], "tracker": upstream["tracker"],
                                              "teacher": teacher}  # fmt: skip
    chain = [e["uri"] for e in tracking.lineage_chain(skill)]
    assert chain[0] == skill and sorted(chain[1:]) == sorted([upstream["library"], upstream["tracker"], teacher])
    # every accepted round's tracker is registered with its library entry, the last one the stage's 'tracker';
    # the smoke profile's phase A routes each to its own round's lane (phase_a: every)
    from llp.skills.library import skill_references

    refs = skill_references(tracking.download_dataset(upstream["library"], smoke_run["root"] / "lib"), "climb_step")
    trackers = [r.tracker for r in refs]
    assert len(refs) == 2 and trackers[-1] == upstream["tracker"] and len(set(trackers)) == 2
    library_key = tracking.version_tags(upstream["library"])["llp.cache_key"]
    assert all(tracking.version_tags(t)["llp.cache_key"] == library_key for t in trackers)  # the same stage run
    spec = mlflow.models.get_model_info(skill).metadata["llp_policy_spec"]
    assert spec["obs"] == ["policy/proprio", "policy/height_scan", "policy/command"] and spec["num_frames"] == 5
    assert spec["action_offset"] == "default" and spec["num_actions"] == 21 == len(spec["action_joints"])
    assert spec["proprio_layout"] == "tracking"
    run = mlflow_client(services).get_run(book["stages"]["skill_climb_step"]["mlflow_run"])
    for who in ("tracking_expert", "skill_policy", "default_pose", "after_phase_A"):
        assert 0 <= run.data.metrics[f"eval/{who}/success_rate"] <= 1  # from the hardest reference's first pose
        assert 0 <= run.data.metrics[f"eval/standing_start/{who}/success_rate"] <= 1  # phase B's starts
        assert 0 <= run.data.metrics[f"eval/walk-in_start/{who}/success_rate"] <= 1  # up to walk_in_m behind
        assert 0 <= run.data.metrics[f"eval/walking_start/{who}/success_rate"] <= 1  # walking in at the start
        assert 0 <= run.data.metrics[f"eval/walking_lead-in/{who}/success_rate"] <= 1  # ... and from behind it
    phases = mlflow_client(services).get_metric_history(run.info.run_id, "phase/generalization")
    assert [m.value for m in sorted(phases, key=lambda m: m.step)] == [0, 0, 0, 1, 1]  # 3 DAgger + PPO, 2 PPO
    assert run.data.params["inputs.tracker"] == upstream["tracker"]


def test_the_merged_student_records_its_experts_reads_no_group_and_is_evaluated_per_group(services, smoke_run):
    """The merge's version records the teacher, library and skill expert this run registered; its actor reads
    proprioception, scan and command of every joint (no group term, by spec and by input width); each group
    was trained (its own metrics) and evaluated beside its expert and a do-nothing baseline."""
    import mlflow

    from llp.flows import tracking

    book = ledger(smoke_run["root"], "e2e")
    stages = book["stages"]
    merged = stages["merge"]["outputs"]["policy"]
    assert json.loads(tracking.version_tags(merged)["llp.inputs"]) == {
        "teacher": stages["locomotion_teacher"]["outputs"]["policy"],
        "reference_augmentation": stages["reference_augmentation"]["outputs"]["library"],
        "skill_climb_step": stages["skill_climb_step"]["outputs"]["policy"],
    }
    info = mlflow.models.get_model_info(merged)
    spec = info.metadata["llp_policy_spec"]
    assert spec["obs"] == ["policy/proprio", "policy/height_scan", "policy/command"] and spec["num_frames"] == 5
    assert spec["obs_dim"] == 69 + 187 + 3  # one frame: the three terms' widths, nothing else
    assert spec["num_actions"] == 21 == len(spec["action_joints"]) and spec["proprio_layout"] == "locomotion"
    client = mlflow_client(services)
    run = client.get_run(stages["merge"]["mlflow_run"])
    metrics = run.data.metrics
    assert metrics["loss/dagger"] > 0
    assert "group/locomotion/reward_terms/lin_vel_tracking" in metrics
    assert "group/climb_step/reward_terms/anchor_pos" in metrics
    for key in ("locomotion/locomotion_teacher", "locomotion/merged_student", "locomotion/stand_still",
                "climb_step/climb_step_expert", "climb_step/merged_student", "climb_step/default_pose",
                "climb_step_walking_start/merged_student", "climb_step_walking_lead-in/merged_student"):  # fmt: skip
        assert 0 <= metrics[f"eval/{key}/success_rate"] <= 1
    assert len(client.get_metric_history(run.info.run_id, "loss/dagger")) == 3


def test_the_transition_policy_starts_from_the_merge_learns_with_amp_and_reads_no_group(services, smoke_run):
    """The transition stage's version records the merged student, teacher, library and skill expert of this run;
    the AMP style reward changed the advantages every iteration; PPO starts after the critic's warm-up; the
    actor reads no group term (the critic does); and the course, the terrain and the skill's course were
    evaluated before and after."""
    import mlflow

    from llp.flows import tracking

    book = ledger(smoke_run["root"], "e2e")
    stages = book["stages"]
    policy = stages["transition"]["outputs"]["policy"]
    assert json.loads(tracking.version_tags(policy)["llp.inputs"]) == {
        "student": stages["merge"]["outputs"]["policy"],
        "teacher": stages["locomotion_teacher"]["outputs"]["policy"],
        "reference_augmentation": stages["reference_augmentation"]["outputs"]["library"],
        "skill_climb_step": stages["skill_climb_step"]["outputs"]["policy"],
    }
    spec = mlflow.models.get_model_info(policy).metadata["llp_policy_spec"]
    assert spec["obs"] == ["policy/proprio", "policy/height_scan", "policy/command"]
    assert spec["obs_dim"] == 69 + 187 + 3 and spec["num_actions"] == 21
    client = mlflow_client(services)
    run = client.get_run(stages["transition"]["mlflow_run"])
    changes = client.get_metric_history(run.info.run_id, "amp/advantage_change")
    assert len(changes) == 3 and all(m.value > 0 for m in changes)  # the style reward entered the advantages
    # the critic's warm-up (smoke: 1 iteration) has no PPO on the course; the iterations after it do
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss/surrogate")] == [1, 2]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss/value")] == [0, 1, 2]
    metrics = run.data.metrics
    assert metrics["loss/dagger"] > 0 and "loss/surrogate" in metrics
    assert "group/course/reward_terms/goal_approach" in metrics and "group/course/dagger/label_error" not in metrics
    for key in ("course/approach/merged_student", "course/approach/transition_policy", "course/approach/stand_still",
                "locomotion/transition_policy", "climb_step/transition_policy",
                "climb_step/merged_student"):  # fmt: skip
        assert 0 <= metrics[f"eval/{key}/success_rate"] <= 1
    assert json.loads(run.data.params["stage.critic.obs"])[-1] == "group/onehot"  # the critic knows the group
    # where each course trial ended is in the stage's table: every trial once, under its outcome
    table = mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/evaluation/transition.json")
    for who, row in table["course/approach"].items():
        ends = row["ends_to_goal_m"]
        assert sum(e["trials"] for e in ends.values()) == row["trials"], who
        assert all(e["min"] <= e["median"] <= e["max"] for e in ends.values())


@pytest.mark.fault
def test_a_skill_stage_killed_in_phase_b_resumes_in_phase_b(services, smoke_run, tmp_path, llp):
    """The crash comes after the first phase-B iteration (3), which the checkpoint of iteration 3 covers: the
    retry goes straight on in phase B (its env, no expert) and logs every iteration once."""
    env = {**services["env"], "LLP_INJECT_FAULT": "skill_climb_step@3"}
    stage = ["--from-stage", "skill_climb_step", "--until-stage", "skill_climb_step"]
    result = llp("run", *SMOKE, "--set", f"run_root={tmp_path}", *stage, "--run-id", "skill-retried", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    skill = ledger(tmp_path, "skill-retried")["stages"]["skill_climb_step"]
    assert skill["executions"] == 2 and skill["state"] == "completed"
    assert "resumed in phase B; phase A's policy is not evaluated" in result.stdout
    client = mlflow_client(services)
    phases = client.get_metric_history(skill["mlflow_run"], "phase/generalization")
    assert sorted((m.step, m.value) for m in phases) == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1)]
    metrics = client.get_run(skill["mlflow_run"]).data.metrics
    assert 0 <= metrics["eval/standing_start/skill_policy/success_rate"] <= 1
    assert "eval/after_phase_A/success_rate" not in metrics


def test_rerun_of_a_completed_pipeline_executes_nothing(services, smoke_run):
    second = smoke_run["second"]
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    book = ledger(smoke_run["root"], "e2e-rerun")
    assert {n: (s["state"], s["executions"]) for n, s in book["stages"].items()} == {
        "locomotion_teacher": ("cached", 0),
        "reference_augmentation": ("cached", 0),
        "evaluate": ("cached", 0),
        "skill_climb_step": ("cached", 0),
        "merge": ("cached", 0),
        "transition": ("cached", 0),
        "depth_student": ("cached", 0),
        "export": ("cached", 0),
        "evaluate_final": ("cached", 0),
    }
    client = mlflow_client(services)
    versions = client.search_model_versions("name='llp-locomotion-teacher'")
    first = client.get_model_version_by_alias("llp-locomotion-teacher", "run-e2e")
    rerun = client.get_model_version_by_alias("llp-locomotion-teacher", "run-e2e-rerun")
    assert rerun.version == first.version  # the rerun got the cached version, with its own alias
    assert len({v.version for v in versions if v.tags.get("llp.pipeline_run") in ("e2e", "e2e-rerun")}) == 1


@pytest.mark.fault
def test_no_credential_reaches_params_tags_or_artifacts(services, smoke_run, tmp_path):
    import mlflow

    client = mlflow_client(services)
    exp = client.get_experiment_by_name("llp")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) >= 3
    for run in runs:
        blob = json.dumps({"params": run.data.params, "tags": run.data.tags})
        assert SECRET not in blob and "llp-test-key" not in blob
        local = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(tmp_path / run.info.run_id))
        for path in Path(local).rglob("*"):
            if path.is_file():
                assert SECRET.encode() not in path.read_bytes(), path
    for version in client.search_model_versions("name='llp-locomotion-teacher'"):
        assert SECRET not in json.dumps(version.tags)
    # log lines: what the runs printed, and every file they and the servers wrote (ledgers, configs, Ray's and
    # the servers' logs)
    for result in (smoke_run["first"], smoke_run["second"]):
        assert SECRET not in result.stdout + result.stderr
    scanned = []
    for folder in (smoke_run["root"], services["root"]):
        for parent, _, files in os.walk(folder, followlinks=True):  # the run's ray/ may link to Ray's temp dir
            for name in files:
                path = Path(parent) / name
                if path.is_file() and path.stat().st_size < 50_000_000:
                    assert SECRET.encode() not in path.read_bytes(), path
                    scanned.append(name)
    assert "ledger.json" in scanned and any(n.startswith("raylet") for n in scanned), sorted(scanned)[:50]


def test_an_ablation_run_is_tagged_and_llp_compare_puts_it_beside_the_default(services, smoke_run, tmp_path, llp):
    """`llp run --ablation paper_rewards` changes the reward set and tags its run; `llp compare` finds it by tag and
    the default run by id, from MLflow alone. The HTML renders in headless Chromium with its table rows and both
    pictures loaded; the report is logged as a comparison run."""
    import re
    import shutil
    import subprocess

    sets = ["--set", f"run_root={smoke_run['root']}", "--run-id", "ablated", "--ablation", "paper_rewards"]
    sets += ["--until-stage", "evaluate"]  # the teacher's ablation: compare reads the teacher's evaluation
    ablated = llp("run", *SMOKE, *sets, env=services["env"])
    assert ablated.returncode == 0, ablated.stdout[-3000:] + ablated.stderr[-3000:]
    config = (smoke_run["root"] / "ablated" / "config.yaml").read_text()
    assert "task: locomotion_paper" in config
    out = tmp_path / "cmp"
    result = llp("compare", "e2e", "llp.ablation=paper_rewards", "--out", str(out), env=services["env"])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    md = (out / "report.md").read_text()
    assert "| setting | e2e | paper_rewards | paper (reported) |" in md
    report = json.loads((out / "data.json").read_text())
    assert [r["run_id"] for r in report] == ["e2e", "ablated"]
    settings = report[0]["report"]["settings"]
    assert len(settings) >= 2
    for s in settings:
        assert f"| {s['tile_type']} {s['difficulty']}".replace(" -", "") in md
    assert "| climb | 75 cm | depth student | 33.4% |" in md and "| course | all | no amp | 51.0% |" in md
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "needs Debian's chromium (the Makefile installs it)"
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", "--dump-dom"]
    dom = subprocess.run([*browser, (out / "report.html").as_uri()], capture_output=True, text=True, timeout=180).stdout
    assert 'data-images="2/2"' in dom, dom[-2000:]  # both plots decoded by the browser
    main = dom.split('<table class="main">', 1)[1].split("</table>", 1)[0]
    assert len(re.findall(r"<tr>", main)) == 1 + len(settings) + 2  # header, one per setting, overall, kernel
    client = mlflow_client(services)
    exp = client.get_experiment_by_name("llp")
    runs = client.search_runs([exp.experiment_id], "tags.`llp.kind` = 'comparison'")
    assert runs and runs[0].data.tags["llp.compared"] == "e2e,ablated"
    names = [f.path for f in client.list_artifacts(runs[0].info.run_id, "report")]
    assert {"report/report.html", "report/report.md", "report/success.png", "report/curves.png"} <= set(names)
    missing = llp("compare", "no-such-run", env=services["env"])
    assert missing.returncode == 2 and "'no-such-run': no pipeline run matches it" in missing.stderr


def test_bad_config_fails_fast_without_creating_state(tmp_path, llp):
    root = tmp_path / "runs"
    t0 = time.perf_counter()
    result = llp("run", *SMOKE, "--set", f"run_root={root}", "--set", "stages.locomotion_teacher.envs_per_actor=-8")
    elapsed = time.perf_counter() - t0
    assert result.returncode == 2
    assert "stages.locomotion_teacher.envs_per_actor" in result.stderr and "must be >= 1" in result.stderr
    assert not root.exists()
    result = llp("run", *SMOKE, "--set", f"run_root={root}", "--set", "resources.mode=gpu")
    assert result.returncode == 2 and "'decoupled', 'colocated'" in result.stderr
    result = llp("run", "--profile", "nightly", "--set", f"run_root={root}")
    assert result.returncode == 2 and "smoke" in result.stderr and "cluster" in result.stderr
    assert not root.exists()
    assert elapsed < 5.0  # process start included; the validation itself is well under a second


def test_status_and_stages_commands(smoke_run, llp):
    status = llp("status", "e2e", "--run-root", str(smoke_run["root"]))
    assert status.returncode == 0
    assert "locomotion_teacher" in status.stdout and "models:/llp-locomotion-teacher/" in status.stdout
    for stage, model in (("skill_climb_step", "llp-skill-climb-step"), ("merge", "llp-merged-student"),
                         ("transition", "llp-transition-policy"), ("depth_student", "llp-depth-student"),
                         ("export", "llp-deployable-policy")):  # fmt: skip
        row = next(line for line in status.stdout.splitlines() if line.startswith(stage))
        assert "completed" in row and f"models:/{model}/" in row
    assert "Prefect flow run" in status.stdout
    # Ray ran outside the (too long) run folder, and the run folder links to its logs
    assert f"Ray logs: {smoke_run['root'] / 'e2e' / 'ray'} -> " in status.stdout
    assert (smoke_run["root"] / "e2e" / "ray" / "session_latest" / "logs").is_dir()
    stages = llp("stages")
    assert "locomotion_teacher" in stages.stdout and "llp-locomotion-teacher" in stages.stdout


def test_llp_evaluate_reports_one_outcome_per_trial_beside_the_stand_still_baseline(services, smoke_run, llp):
    env = {**services["env"]}
    common = ["--profile", "smoke", "--set", f"run_root={smoke_run['root']}", "--trials", "3", "--json"]
    result = llp("evaluate", "--model", "models:/llp-locomotion-teacher/latest", *common, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("trials", "success_rate", "fall_rate", "tracking_kernel", "standing_tracking_kernel", "settings"):
        assert key in report
    assert report["model"].startswith("models:/llp-locomotion-teacher/") and "latest" not in report["model"]
    # the final evaluation's protocol: 7 terrain settings, and the course and the climb at both of its heights
    assert report["trials"] == 33 == sum(sum(row["outcomes"].values()) for row in report["settings"])
    assert all(sum(row["outcomes"].values()) == 3 for row in report["settings"])
    assert "95% CI" in result.stdout and "stairs_up" in result.stdout and "course" in result.stdout
    baseline = llp("evaluate", "--model", "stand-still", *common, env=env)
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    standing = json.loads(baseline.stdout.strip().splitlines()[-1])
    # the same trials: the same commands, so the same standing kernel
    assert standing["standing_tracking_kernel"] == report["standing_tracking_kernel"]
    missing = llp("evaluate", "--model", "models:/llp-no-such-model/1", *common, env=env)
    assert missing.returncode == 2 and "no registered model 'llp-no-such-model'" in missing.stderr


@pytest.mark.fault
def test_a_corrupted_policy_file_is_refused_by_version_and_file_before_any_work(services, smoke_run, llp):
    import boto3

    s3 = boto3.client("s3", endpoint_url=services["s3"].url, region_name="us-east-1",
                      aws_access_key_id="llp-test-key", aws_secret_access_key=SECRET)  # fmt: skip
    registered = mlflow_client(services).get_model_version_by_alias("llp-locomotion-teacher", "run-e2e")
    version = registered.version
    stored_as = registered.source.rstrip("/").rsplit("/", 1)[-1]  # models:/m-<id>: the logged model's folder
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
    keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    program = [k for k in keys if f"/{stored_as}/" in k and k.endswith(".pt2")]
    assert len(program) == 1, (registered.source, [k for k in keys if k.endswith(".pt2")])
    original = s3.get_object(Bucket=BUCKET, Key=program[0])["Body"].read()
    common = ["--profile", "smoke", "--set", f"run_root={smoke_run['root']}", "--trials", "1", "--json"]
    try:
        s3.put_object(Bucket=BUCKET, Key=program[0], Body=original[:-64] + b"x" * 64)  # same size, bytes changed
        bad = llp("evaluate", "--model", f"models:/llp-locomotion-teacher/{version}", *common, env=services["env"])
        assert bad.returncode == 2, bad.stdout[-2000:] + bad.stderr[-2000:]
        assert f"models:/llp-locomotion-teacher/{version}: file " in bad.stderr
        assert "does not match its registered sha256" in bad.stderr and "Traceback" not in bad.stderr
        assert "trials" not in bad.stdout  # refused before any trial ran
    finally:
        s3.put_object(Bucket=BUCKET, Key=program[0], Body=original)
