"""Bad input gets a clear error that names it, in seconds, before any state exists (no Ray or server waits)."""

from __future__ import annotations

import sys

import pytest
import torch

SMOKE = ["--profile", "smoke"]
T = "stages.locomotion_teacher"

CASES = [
    (f"{T}.actor.activation=foo", f"{T}.actor.activation", "allowed: elu"),
    (f"{T}.ppo.entropy_coef=.nan", f"{T}.ppo.entropy_coef", "expected a finite number"),
    (f"{T}.ppo.value_coef=.inf", f"{T}.ppo.value_coef", "expected a finite number"),
    (f"{T}.actor.init_std=.inf", f"{T}.actor.init_std", "expected a finite number"),
    (f"{T}.ppo.clip=-1", f"{T}.ppo.clip", "must be positive"),
    (f"{T}.ppo.desired_kl=-1", f"{T}.ppo.desired_kl", "must be positive"),
    (f"{T}.ppo.max_grad_norm=-5", f"{T}.ppo.max_grad_norm", "must be positive"),
    (f"{T}.ppo.num_minibatches=1000", f"{T}.ppo.num_minibatches", "cannot split a rollout of 64 steps"),
    (f"{T}.actor.hidden_dims=[]", f"{T}.actor.hidden_dims", "at least one hidden layer"),
    (f"{T}.critic.hidden_dims=[0]", f"{T}.critic.hidden_dims", "must be >= 1"),
    (f"{T}.env.gait.frequency=[2.0,1.0]", f"{T}.env.gait.frequency", "0 < low <= high"),
    (f"{T}.task=locomotion_paper", f"{T}.actor.obs[3]", "'policy/gait_clock' is not an observation of task"),
    ("sim.backend=bullet", "sim.backend", "allowed values: mujoco, warp"),
    ("sim.device=cuda", "sim.device", "the mujoco backend runs on the cpu only"),
]


@pytest.mark.fault
@pytest.mark.parametrize("setting, key, message", CASES, ids=[c[0].split("=")[0].rsplit(".", 1)[1] for c in CASES])
def test_a_bad_value_is_named_before_anything_starts(tmp_path, llp, setting, key, message):
    root = tmp_path / "runs"
    result = llp("run", *SMOKE, "--set", f"run_root={root}", "--set", setting)
    assert result.returncode == 2, result.stderr[-2000:]
    assert key in result.stderr and message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not root.exists()


@pytest.mark.fault
def test_simulating_on_a_gpu_asks_for_the_colocated_layout_holding_a_gpu(tmp_path, llp):
    root = tmp_path / "runs"
    gpu = ["--set", f"run_root={root}", "--set", "sim.backend=warp", "--set", "sim.device=cuda"]
    decoupled = llp("run", *SMOKE, *gpu, timeout=60)
    assert decoupled.returncode == 2 and "sim.device: cuda simulates on a GPU, which needs resources.mode " \
        "colocated" in decoupled.stderr, decoupled.stderr[-2000:]  # fmt: skip
    no_gpu = llp("run", *SMOKE, *gpu, "--set", "resources.mode=colocated", timeout=60)
    assert no_gpu.returncode == 2 and "resources.learner_gpus: sim.device cuda needs" in no_gpu.stderr
    colocated = ["--set", "resources.mode=colocated", "--set", "resources.learner_gpus=1"]
    groups = llp("run", *SMOKE, *gpu, *colocated, timeout=60)  # merge and transition need the decoupled layout
    assert groups.returncode == 2 and "resources.mode: colocated, but stages ['merge', 'transition'] train env " \
        "groups" in groups.stderr, groups.stderr[-2000:]  # fmt: skip
    if not torch.cuda.is_available():  # the stages before them would wait for a GPU forever
        teacher = llp("run", *SMOKE, *gpu, *colocated, "--until-stage", "locomotion_teacher", timeout=60)
        assert teacher.returncode == 2 and "reserve 1 GPUs (resources.learner_gpus) but this machine has 0" in \
            teacher.stderr, teacher.stderr[-2000:]  # fmt: skip
    assert not root.exists()


@pytest.mark.fault
def test_an_unreachable_cluster_a_missing_tracking_server_and_too_many_cpus_fail_at_once(tmp_path, llp):
    root = tmp_path / "runs"
    sets = ["--set", f"run_root={root}"]
    ray = llp("run", *SMOKE, *sets, env={"RAY_ADDRESS": "127.0.0.1:1"}, timeout=60)
    assert ray.returncode == 2 and "RAY_ADDRESS=127.0.0.1:1: no Ray head answers there" in ray.stderr
    tracking = llp("run", *SMOKE, *sets, env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, timeout=60)
    assert tracking.returncode == 2 and "MLFLOW_TRACKING_URI=http://127.0.0.1:9: no MLflow server" in tracking.stderr
    cpus = llp("run", *SMOKE, *sets, "--set", "resources.sim_actors=40", timeout=60)
    assert cpus.returncode == 2 and "Ray would wait for them forever" in cpus.stderr
    for result in (ray, tracking, cpus):
        assert "Traceback" not in result.stderr
    assert not root.exists()


def _library(root, change, llp):
    """A copy of the shipped seed's library with one thing broken by ``change(folder)``."""
    import shutil

    source = root / "good"
    if not source.exists():
        assert llp("seeds", "climb_step_25", "--out", str(source), timeout=300).returncode == 0
    broken = root / change.__name__
    shutil.copytree(source, broken)
    change(broken)
    return broken


def not_json(lib):
    (lib / "index.json").write_text('{"entries": [')


def no_motion_file(lib):
    for f in lib.glob("*.npz"):
        f.unlink()


def height_is_text(lib):
    import json

    data = json.loads((lib / "index.json").read_text())
    data["entries"][0]["obstacle"]["height"] = "tall"
    (lib / "index.json").write_text(json.dumps(data))


def id_twice(lib):
    import json

    data = json.loads((lib / "index.json").read_text())
    data["entries"].append(data["entries"][0])
    (lib / "index.json").write_text(json.dumps(data))


def no_entries(lib):
    (lib / "index.json").write_text('{"refs": []}')


LIBRARY_CASES = [
    (not_json, "not valid JSON"),
    (no_motion_file, "the motion files of climb_step_25.r0 are missing"),
    (height_is_text, "entry climb_step_25.r0: obstacle.height: got 'tall', expected a number"),
    (id_twice, "the id 'climb_step_25.r0' appears more than once"),
    (no_entries, "expected an object with a list 'entries'"),
]


@pytest.mark.fault
@pytest.mark.parametrize("change, message", LIBRARY_CASES, ids=[c[0].__name__ for c in LIBRARY_CASES])
def test_a_broken_reference_library_is_named_with_the_file_and_entry(tmp_path_factory, llp, change, message):
    library = _library(tmp_path_factory.getbasetemp() / "libraries", change, llp)
    before = sorted(p.name for p in library.iterdir())
    for args in (["refs", str(library)], ["seeds", "--out", str(library)]):
        result = llp(*args, timeout=120)
        assert result.returncode == 2 and message in result.stderr, result.stderr[-2000:]
        assert "Traceback" not in result.stderr
    assert sorted(p.name for p in library.iterdir()) == before  # nothing was added to a broken library


def cli_cases(tmp):
    a_file = tmp / "a_file"
    a_file.write_text("")
    runs = ["--set", f"run_root={tmp / 'runs'}"]
    return [
        (["run", *SMOKE, *runs, "--run-id", "a" * 300], "a run id is 1-64 letters"),
        (["run", *SMOKE, *runs, "--run-id", "../escape"], "a run id is 1-64 letters"),
        (["run", *SMOKE, *runs, "--until-stage", "nope"], "--until-stage 'nope': not a stage of this pipeline"),
        (["run", *SMOKE, *runs, "--force", "nope"], "--force 'nope': not a stage of this pipeline"),
        (["run", *SMOKE, *runs, "--from-stage", "evaluate", "--until-stage", "locomotion_teacher"], "selects no stage"),
        (["run", "--profile", "nosuch", *runs], "no profile named 'nosuch'"),
        (["bench", "learner", "--device", "tpu"], "--device tpu: choose cpu, or cuda"),
        (["run", *SMOKE, *runs, "--ablation", "single_reference"], "no ablation named 'single_reference' (skills"),
        (["run", *SMOKE, *runs, "--set", "nokey=1"], "nokey: unknown key"),
        (["run", *SMOKE, *runs, "--set", f"{T}.iterations"], "--set expects key.path=value"),
        (["run", *SMOKE, *runs, "--set", f"{T}.iterations=-5"], f"{T}.iterations: must be >= 1"),
        (["run", *SMOKE, *runs, "--set", "seed=1.5"], "seed: got 1.5, expected an integer"),
        (
            ["run", *SMOKE, *runs, "--set", "sim.backend=isaaclab"],
            "sim.backend: isaaclab needs Isaac Lab's environment: run `make isaaclab`",
            {"LLP_ISAACLAB_PYTHON": str(tmp / "no-venv" / "bin" / "python")},
        ),
        (
            ["run", *SMOKE, *runs, "--set", "sim.backend=isaaclab"],
            "sim.backend: isaaclab, but stages ['reference_augmentation', 'evaluate',",
            {"LLP_ISAACLAB_PYTHON": sys.executable},
        ),
        (["run", *SMOKE, "--set", f"run_root={a_file}/runs"], "is a file, not a folder"),
        (["run", *SMOKE, "--set", f"run_root={tmp / ('r' * 300)}"], "is longer than 255 bytes"),
        (["run", *SMOKE, "--set", "run_root=/proc/llp-runs"], "cannot be written"),
        (["resume", "nosuch", "--run-root", str(tmp / "old")], "no pipeline run 'nosuch' under"),
        (["resume", "../x", "--run-root", str(tmp / "old")], "run '../x': a run id is 1-64 letters"),
        (["seeds", "nosuch", "--out", str(tmp / "refs")], "no seeds named 'nosuch'"),
        (["refs", str(tmp)], "is neither a reference library (no index.json) nor a pipeline run"),
        (["evaluate", "--model", "notauri"], "expected a models:/ URI, got 'notauri'"),
        (["evaluate", "--model", "stand-still", "--trials", "0"], "--trials must be >= 1"),
        (
            ["evaluate", "--model", "models:/llp-locomotion-teacher/1", "--set", f"run_root={tmp / 'fresh'}"],
            "no model registry under",
        ),
    ]


@pytest.mark.fault
def test_bad_command_lines_get_one_clear_line_and_leave_nothing_behind(tmp_path, tmp_path_factory, llp):
    old = tmp_path / "old" / "20261201-010203-abcd"  # a run from before, so `resume nosuch` can list it
    old.mkdir(parents=True)
    (old / "config.yaml").write_text("{}")
    cases = cli_cases(tmp_path)
    # a user's fresh machine: an earlier test in this process may have pointed MLflow at its server through the
    # environment (mlflow.set_tracking_uri sets MLFLOW_TRACKING_URI), which would give `llp evaluate` a registry
    fresh = {"MLFLOW_TRACKING_URI": None, "PREFECT_API_URL": None, "LLP_INJECT_FAULT": None}
    fresh_dir = tmp_path_factory.mktemp("cwd")  # and a folder with no runs/ (the checkout's own may hold a registry)
    for args, message, *env in cases:
        result = llp(*args, env={**fresh, **(env[0] if env else {})}, timeout=120, cwd=fresh_dir)
        shown = " ".join(a if len(a) < 60 else a[:20] + "..." for a in args)
        assert result.returncode == 2, f"{shown}: rc {result.returncode}\n{result.stderr[-1500:]}"
        assert message in result.stderr, f"{shown}: {result.stderr[-1500:]}"
        assert "Traceback" not in result.stderr, shown
        assert len(result.stderr.strip().splitlines()) == 1, f"{shown}: {result.stderr}"
    assert "(runs: 20261201-010203-abcd)" in llp("resume", "nosuch", "--run-root", str(tmp_path / "old")).stderr
    assert not (tmp_path / "fresh").exists()  # `llp evaluate` of a model in no registry wrote nothing there
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "old"]  # no runs/, refs/, escape/ or prefect/
    assert not (tmp_path.parent / "escape").exists()
    assert list(fresh_dir.iterdir()) == []  # nothing written where the commands ran
    assert len(cases) + len(LIBRARY_CASES) + len(CASES) + 3 >= 30  # with the motion-file and config cases, more


@pytest.mark.fault
def test_a_missing_upstream_model_stops_the_run_before_its_first_stage(tmp_path):
    """A stage's input from a stage this invocation does not run is resolved before any stage starts: with an
    empty registry the skill stage's library is named, and no stage has run (earlier, the evaluate stage's missing
    teacher was found only after reference augmentation had trained for 9 minutes)."""
    import json
    import os
    import subprocess

    from tests.conftest import BIN, ROOT

    root = tmp_path / "runs"
    # a user's fresh machine: no tracking server (an earlier test in this process may have pointed MLflow at its
    # own registry through the environment), so the run's own empty SQLite registry is the one asked
    drop = ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "MLFLOW_S3_ENDPOINT_URL", "LLP_INJECT_FAULT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    args = ["run", *SMOKE, "--set", f"run_root={root}", "--run-id", "orphan", "--from-stage", "reference_augmentation",
            "--until-stage", "skill_climb_step"]  # fmt: skip
    result = subprocess.run([str(BIN / "llp"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "stage input llp-locomotion-teacher does not exist yet: run stage 'locomotion_teacher' first" in (
        result.stderr
    ), result.stderr[-2000:]
    state = json.loads((root / "orphan" / "ledger.json").read_text())
    assert state["state"] == "failed" and not state.get("stages")
    assert not (root / "orphan" / "checkpoints").exists()


@pytest.mark.fault
def test_reference_augmentation_that_accepts_no_round_fails_and_is_retried_with_nothing_registered(tmp_path):
    """A library of the seed alone has no tracker, and the skill stage would find no teacher: the stage fails with
    the round's numbers, Prefect retries it (from round 1, with other seeds: the same seeds replay the same
    rounds), and neither attempt registers a library or tracker."""
    import json
    import os
    import subprocess

    from mlflow import MlflowClient

    from tests.conftest import BIN, ROOT

    root = tmp_path / "runs"
    drop = ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "MLFLOW_S3_ENDPOINT_URL", "LLP_INJECT_FAULT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    stage, r = "reference_augmentation", "stages.reference_augmentation"
    args = ["run", *SMOKE, "--set", f"run_root={root}", "--run-id", "no-round", "--from-stage", stage,
            "--until-stage", stage, "--set", f"{r}.min_success=1.0", "--set", f"{r}.retries=1",
            "--set", f"{r}.trials=8"]  # fmt: skip
    result = subprocess.run([str(BIN / "llp"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-3000:]
    assert "[llp] reference_augmentation: running (attempt 2)" in out, out[-3000:]  # Prefect retried it ...
    assert "[llp] reference_augmentation: attempt 2 trains and tries with seeds from " in out  # ... with other seeds
    assert out.count("[llp] reference_augmentation: growth stops: round 1 fails its acceptance: dynamic:") == 2
    assert "accepted no round" in out and "no tracker for the skill stages" in out, out[-3000:]
    assert "Traceback" not in out, out[-3000:]  # the reasons in one line each; the tracebacks in the ledger
    book = json.loads((root / "no-round" / "ledger.json").read_text())
    stage = book["stages"]["reference_augmentation"]
    assert book["state"] == "failed" and stage["state"] == "failed" and len(stage["attempts"]) == 2
    assert not stage.get("outputs")
    registry = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    assert [m.name for m in registry.search_registered_models()] == []


@pytest.mark.fault
def test_a_misspelled_fault_drill_is_refused_before_any_work(tmp_path, llp):
    """LLP_INJECT_FAULT with a stage that is not in the pipeline, or an unknown kind, stops the run at once (a drill
    that silently never fires would pass a test that checks recovery for nothing)."""
    import os

    runs = ["--set", f"run_root={tmp_path / 'runs'}", "--until-stage", "locomotion_teacher"]
    for spec, message in (
        ("locomotion_teachr@2", "'locomotion_teachr' is not a stage of this pipeline"),
        ("locomotion_teacher@2:kilsim", "expected <stage>@<iteration>[:nan<K>|:killsim|:pause<S>]"),
        ("locomotion_teacher@two", "expected <stage>@<iteration>"),
    ):
        result = llp("run", *SMOKE, *runs, env={**os.environ, "LLP_INJECT_FAULT": spec}, timeout=120)
        assert result.returncode == 2 and message in result.stderr, (spec, result.stderr[-1500:])
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("ledger.json"))


@pytest.mark.fault
def test_a_second_run_on_a_run_root_in_use_is_refused_naming_the_first(tmp_path, llp):
    """Two `llp run`s on one run root would start two Prefect servers on one database: the second is refused at
    once, naming the process that holds the root; once that one ends, the root is free again."""
    import subprocess
    import time

    from tests.conftest import BIN, ROOT

    sets = ["--set", f"run_root={tmp_path}", "--until-stage", "locomotion_teacher"]
    first = subprocess.Popen([str(BIN / "llp"), "run", *SMOKE, *sets, "--run-id", "first"], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.time() + 120
        while not (tmp_path / ".llp.lock").is_file() or not (tmp_path / ".llp.lock").read_text().strip():
            assert time.time() < deadline and first.poll() is None, "the first run never took the run root"
            time.sleep(0.2)
        second = llp("run", *SMOKE, *sets, "--run-id", "second", timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"run root {tmp_path} is in use by another llp command (pid {first.pid})" in second.stderr
        assert not (tmp_path / "second").exists()
    finally:
        first.wait(timeout=600)
    assert first.returncode == 0
    again = llp("run", *SMOKE, *sets, "--run-id", "first", timeout=600)  # free again: all cached
    assert again.returncode == 0, again.stderr[-2000:]
