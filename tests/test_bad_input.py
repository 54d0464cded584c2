"""Bad input gets a clear error that names it, in seconds, before any state exists (no Ray or server waits)."""

from __future__ import annotations

import pytest

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
]


@pytest.mark.parametrize("setting, key, message", CASES, ids=[c[0].split("=")[0].rsplit(".", 1)[1] for c in CASES])
def test_a_bad_value_is_named_before_anything_starts(tmp_path, llp, setting, key, message):
    root = tmp_path / "runs"
    result = llp("run", *SMOKE, "--set", f"run_root={root}", "--set", setting)
    assert result.returncode == 2, result.stderr[-2000:]
    assert key in result.stderr and message in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not root.exists()


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
