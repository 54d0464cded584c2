"""`llp ablate`: a two-ablation sweep on the smoke profile, end to end, through Ray Tune."""

from __future__ import annotations

import json

import pytest

from tests.conftest import BUCKET, SECRET

SWEEP = "S"
EXPERIMENT = "llp-sweep-test"  # its own MLflow experiment: other tests on the same server search by the same tags


def _ledger(root, run: str) -> dict:
    return json.loads((root / run / "ledger.json").read_text())


@pytest.mark.fault
@pytest.mark.slow  # 4 min: make test-slow and make test-faults run it (the default suite stays under 20 min)
def test_a_sweep_shares_untouched_stages_and_resuming_it_runs_only_the_failed_trial(services, tmp_path, llp):
    """Baseline, paper_rewards and no_privileged_critic on the smoke profile. Both ablations change the teacher,
    none the reference augmentation: it runs once in the sweep and is cached in the other trials. The third
    trial's teacher crashes (an injected fault, no retries); `llp ablate --resume` then runs only that trial,
    continuing its pipeline run, and every trial is an MLflow run tagged with its sweep, ablation and seed."""
    root = tmp_path / "runs"
    failing = f"{SWEEP}-no_privileged_critic-s0"
    args = ["ablate", "paper_rewards", "no_privileged_critic", "--profile", "smoke", "--run-root", str(root),
            "--sweep-id", SWEEP, "--set", "stages.locomotion_teacher.retries=0", "--until-stage", "evaluate",
            "--set", f"experiment={EXPERIMENT}"]  # fmt: skip
    fault = {"LLP_INJECT_FAULT": "locomotion_teacher@1", "LLP_INJECT_FAULT_RUNS": failing}
    first = llp(*args, env={**services["env"], **fault}, timeout=1200)
    assert first.returncode == 1, first.stdout[-3000:] + first.stderr[-3000:]
    assert f"trial {failing} failed" in first.stderr and f"llp ablate --resume {SWEEP}" in first.stderr
    runs = [f"{SWEEP}-baseline-s0", f"{SWEEP}-paper_rewards-s0", failing]
    books = {r: _ledger(root, r) for r in runs}
    assert [books[r]["state"] for r in runs] == ["completed", "completed", "failed"]
    ran = {r: {n: s["executions"] for n, s in books[r]["stages"].items()} for r in runs[:2]}
    assert ran[runs[0]] == {"locomotion_teacher": 1, "reference_augmentation": 1, "evaluate": 1}
    assert ran[runs[1]] == {"locomotion_teacher": 1, "reference_augmentation": 0, "evaluate": 1}  # shared
    assert books[runs[1]]["stages"]["reference_augmentation"]["state"] == "cached"
    finished = {r: (root / r / "ledger.json").stat().st_mtime for r in runs[:2]}

    resumed = llp("ablate", "--resume", SWEEP, "--run-root", str(root), env=services["env"], timeout=1200)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    book = _ledger(root, failing)
    assert book["state"] == "completed"
    assert book["stages"]["reference_augmentation"]["state"] == "cached"  # still the baseline's execution
    assert {r: (root / r / "ledger.json").stat().st_mtime for r in runs[:2]} == finished  # not run again
    logs = {r: (root / "sweeps" / SWEEP / "logs" / f"{r}.log").read_text() for r in runs}
    commands = {r: [line for line in text.splitlines() if line.startswith("$ ")] for r, text in logs.items()}
    assert [len(commands[r]) for r in runs] == [1, 1, 2]
    assert " run " in commands[failing][0] and f" resume {failing} " in commands[failing][1]
    for r in runs:
        assert f"| {r.split('-')[1]} | 0 | {r} | done |" in resumed.stdout
    # the trials in MLflow, found by the sweep's tag
    import mlflow

    client = mlflow.MlflowClient(services["env"]["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name(EXPERIMENT)
    found = client.search_runs([exp.experiment_id], f"tags.`llp.sweep` = '{SWEEP}' and tags.`llp.kind` = 'pipeline'")
    tags = sorted((t["llp.ablation"], t["llp.seed"], t["llp.pipeline_run"]) for t in (r.data.tags for r in found))
    assert tags == sorted([("baseline", "0", runs[0]), ("paper_rewards", "0", runs[1]),
                           ("no_privileged_critic", "0", failing)])  # fmt: skip
    # and `llp compare llp.sweep=S` puts them side by side, a column per setting beside the paper's
    out = tmp_path / "cmp"
    compared = llp("compare", f"llp.sweep={SWEEP}", "--experiment", EXPERIMENT, "--out", str(out),
                   env=services["env"], timeout=300)  # fmt: skip
    assert compared.returncode == 0, compared.stdout[-3000:] + compared.stderr[-3000:]
    md = (out / "report.md").read_text()
    assert "| setting | baseline | paper_rewards | no_privileged_critic | paper (reported) |" in md
    # nothing the sweep stored holds a credential
    for path in (root / "sweeps").rglob("*"):
        if path.is_file() and path.stat().st_size < 20_000_000:
            assert SECRET.encode() not in path.read_bytes(), path
    assert BUCKET  # the trials' artifacts went to the test bucket through the shared MLflow server


def test_bad_sweeps_are_refused_before_anything_starts(tmp_path, llp):
    root = tmp_path / "runs"
    cases = [
        (["ablate", "--run-root", str(root)], "name at least one ablation"),
        (["ablate", "single_reference", "--run-root", str(root)], "no ablation named 'single_reference' (skills"),
        (["ablate", "paper_rewards", "--seeds", "0", "--run-root", str(root)], "--seeds 0: must be >= 1"),
        (["ablate", "no_gru", "--from-stage", "nope", "--run-root", str(root)], "--from-stage 'nope': not a stage"),
        (["ablate", "no_gru", "--from-stage", "export", "--until-stage", "depth_student", "--run-root", str(root)],
         "selects no stage"),
        (["ablate", "paper_rewards", "--sweep-id", "../x", "--run-root", str(root)], "sweep id '../x'"),
        (["ablate", "--resume", "nope", "--run-root", str(root)], "no sweep 'nope' to resume"),
        (["ablate", "paper_rewards", "--set", "stages.evaluate.trials=-1", "--run-root", str(root)],
         "stages.evaluate.trials"),
    ]  # fmt: skip
    for argv, message in cases:
        result = llp(*argv, timeout=120)
        assert result.returncode == 2 and message in result.stderr, (argv, result.stderr[-2000:])
    assert not (root / "sweeps").exists() or not any((root / "sweeps").rglob("tuner.pkl"))


def _report(model: str, rate: float) -> dict:
    setting = {"tile_type": "climb", "difficulty": "45 cm", "level": 0, "success_rate": rate,
               "success_ci95": [rate / 2, (1 + rate) / 2], "outcomes": {"success": 10, "fall": 10}}  # fmt: skip
    return {**setting, "model": model, "settings": [setting], "tracking_kernel": 0.5, "standing_tracking_kernel": 0.2}


def test_compare_puts_depth_students_beside_their_teacher_only_when_every_run_trained_one(tmp_path):
    from llp.flows.compare import RunResult, write_report

    def run(run_id, label, student_rate=None):
        r = RunResult(run_id, label, "local", "m-" + run_id, _report(f"models:/teacher-of-{run_id}/1", 0.9))
        if student_rate is not None:
            r.student_report = _report(f"models:/student-of-{run_id}/1", student_rate)
            r.student_teacher_report = _report(f"models:/teacher-of-{run_id}/1", 0.8)
        return r

    both = [run("a", "baseline", 0.6), run("b", "no_gru", 0.2)]
    write_report(both, tmp_path / "students")
    md = (tmp_path / "students" / "report.md").read_text()
    assert "| setting | teacher | baseline | no_gru | paper (reported) |" in md
    assert "| climb 45 cm | 80.0% [40-90] n=20 | 60.0% [30-80] n=20 | 20.0% [10-60] n=20 |" in md
    data = json.loads((tmp_path / "students" / "data.json").read_text())
    assert [d["model"] for d in data] == ["models:/teacher-of-a/1", "models:/student-of-a/1", "models:/student-of-b/1"]
    # one run without a student: the teachers are what both runs have
    write_report([run("a", "baseline", 0.6), run("c", "paper_rewards")], tmp_path / "teachers")
    md = (tmp_path / "teachers" / "report.md").read_text()
    assert "| setting | baseline | paper_rewards | paper (reported) |" in md and "Compared: the teachers" in md


def test_compare_shows_the_deployable_policies_on_the_course_beside_the_papers_transition_ablations(tmp_path):
    from llp.flows.compare import RunResult, write_report

    def course(model: str, rate: float) -> dict:
        report = _report(model, rate)
        report["settings"] = [{**report["settings"][0], "tile_type": "course", "difficulty": "27.5 cm"}]
        return report

    def run(run_id, label, deployable_rate=None):
        r = RunResult(run_id, label, "local", "m-" + run_id, _report(f"models:/teacher-of-{run_id}/1", 0.9))
        r.student_report = _report(f"models:/student-of-{run_id}/1", 0.5)
        if deployable_rate is not None:
            r.final_report = course(f"models:/llp-deployable-policy/{run_id}", deployable_rate)
            r.final_teacher_report = course(f"models:/llp-transition-policy/{run_id}", 0.7)
        return r

    runs = [run("a", "baseline", 0.6), run("b", "no_amp", 0.4), run("c", "no_transition", 0.2)]
    write_report(runs, tmp_path / "final")
    md = (tmp_path / "final" / "report.md").read_text()
    assert "| setting | teacher | baseline | no_amp | no_transition | paper (reported) |" in md
    row = next(line for line in md.splitlines() if line.startswith("| course 27.5 cm |"))
    assert "70.0% [35-85] n=20 | 60.0% [30-80] n=20 | 40.0% [20-70] n=20 | 20.0% [10-60] n=20" in row
    assert "full 98.0%, no amp 51.0%, rough walking and isolated skills 33.0%" in row
    assert "Compared: the deployable policies (closed loop), beside their teacher" in md
    # a run that stopped before the final evaluation: the depth students are what every run has
    write_report([run("a", "baseline", 0.6), run("d", "no_gru")], tmp_path / "students")
    assert "Compared: the depth students" in (tmp_path / "students" / "report.md").read_text()


def test_the_transition_ablations_change_only_what_they_name():
    """The paper's transition ablations: no_amp drops the style reward of the transition stage alone; no_transition
    hands the merged student to the depth student (and the final evaluation judges it as the teacher)."""
    from llp.config.ablation import load_ablation
    from llp.config.pipeline import resolved
    from llp.stages.registry import STAGES, load_pipeline, stage_config

    base = resolved(load_pipeline("local"))["stages"]
    for name, changed in (("no_amp", {"transition"}), ("no_transition", {"depth_student", "evaluate_final"})):
        varied = load_pipeline("local", load_ablation(name).sets)
        assert {s for s in base if base[s] != resolved(varied)["stages"][s]} == changed, name
    assert stage_config(load_pipeline("local", load_ablation("no_amp").sets), "transition").amp.style_coef == 0.0
    isolated = load_pipeline("local", load_ablation("no_transition").sets)
    inputs = STAGES["depth_student"].inputs(stage_config(isolated, "depth_student"))
    assert inputs == {"policy": "merge", "library": "reference_augmentation.library"}  # the course's heights
    assert stage_config(isolated, "evaluate_final").inputs()["teacher"] == "merge.policy"
