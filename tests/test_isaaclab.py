"""The isaaclab backend: its USD is the MJCF's robot, it stands in Isaac Lab on Newton as it does in MuJoCo, the
locomotion task sees the same observations and rewards on it, and the teacher stage trains on it. These need the
Isaac Lab environment (Python 3.12), so they are opt-in: ``make test-isaaclab``."""

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from llp.config.schema import merge
from llp.sim.env import ParkourEnv
from llp.sim.hosted import parkour_env
from llp.sim.tasks import env_config
from tests.conftest import SMOKE, ledger, mlflow_client

ROOT = Path(__file__).resolve().parents[1]
PYTHON = Path(os.environ.get("LLP_ISAACLAB_PYTHON", ROOT / ".venv-isaaclab" / "bin" / "python"))

pytestmark = [
    pytest.mark.isaaclab,
    pytest.mark.skipif(not PYTHON.exists(), reason=f"no Isaac Lab environment at {PYTHON} (make isaaclab)"),
]

STILL = {
    "randomization": {"friction": None, "added_mass": None, "motor_strength": None, "push_interval_s": None,
                      "init_joint_noise": 0.0, "spawn_jitter": 0.0},
    "curriculum": {"enabled": False},
    "terrain": {"tile_types": ["flat"]},
}  # fmt: skip


def in_isaaclab(*args: str, timeout: float = 1200) -> str:
    """Run ``python -m ...`` in the Isaac Lab environment; its stdout's last line."""
    out = subprocess.run([str(PYTHON), "-m", *args], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=timeout)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip().splitlines()[-1]


def test_the_shipped_usd_is_the_mjcf_robot():
    report = json.loads(in_isaaclab("llp.sim.isaaclab.robot_usd", "lightbot0_like", "--check-only"))
    assert report["ok"], report
    assert (report["joints"], round(report["mass_usd"], 3)) == (21, 18.9)


def test_the_robot_stands_in_isaac_lab_as_in_mujoco():
    isaac = json.loads(in_isaaclab("llp.sim.isaaclab.standing", "lightbot0_like", "--seconds", "2"))
    mj = ParkourEnv(env_config(overrides=merge(STILL, {})), 1, seed=0)
    mj.reset()
    heights = []
    for _ in range(100):  # 2 s of zero actions: the default pose held by the PD servos
        mj.step(torch.zeros(1, mj.num_actions))
        heights.append(float(mj.qpos[0, 2] - mj.terrain.height_at(mj.qpos[0:1, :2])[0]))
    isaac_h, mj_h = np.array(isaac["base_height"]), np.array(heights)
    assert len(isaac_h) == len(mj_h) == 100
    # after the first 0.5 s (the two spawn 1 cm apart): the same standing height within 1 cm, and standing
    assert np.abs(isaac_h[25:] - mj_h[25:]).max() < 0.01, (isaac_h[25::10], mj_h[25::10])
    assert isaac_h.min() > 0.4 and abs(isaac["base_pitch"][-1]) < 0.3


SMALL = {"terrain": {"num_levels": 2, "tile_length": 6.0, "tile_width": 6.0, "border": 1.0}}
# one policy step (0.02 s) of the same actions from the same state, the two engines apart by at most (measured at
# the test's seed: 0.076, 0.0016 m, 0.086 and 0.019; docs/isaaclab.md):
STEP_TOLERANCE = {"proprio": 0.2, "height_scan": 0.01, "privileged_motion": 0.2, "reward_term": 0.04}


def assert_same_observations(mj: dict, isaac: dict) -> None:
    """Every term equal to float32 precision, but the feet's contact (Isaac Lab's contact sensor holds the last
    physics step's forces; MuJoCo's are computed at the state)."""
    for group, terms in mj.items():
        for term, value in terms.items():
            other = isaac[group][term]
            if term == "privileged":  # base velocity 3, height 1, foot contacts 2, foot forces 2, physics 3
                value, other = torch.cat([value[:, :4], value[:, 8:]], 1), torch.cat([other[:, :4], other[:, 8:]], 1)
            assert torch.allclose(value, other, atol=1e-5), (group, term, float((value - other).abs().max()))


@pytest.fixture(scope="module")
def both_backends():
    """The locomotion task (randomisation on) on 8 envs of every tile type, on MuJoCo here and on Isaac Lab in its
    env server, with the same seed."""
    cfg = env_config("locomotion", "lightbot0_like", SMALL)
    mj = ParkourEnv(cfg, 8, seed=3)
    isaac = parkour_env(dataclasses.replace(cfg, backend="isaaclab"), 8, seed=3)
    yield mj, isaac
    isaac.close()


def test_the_locomotion_task_is_the_same_on_isaac_lab_from_the_same_state(both_backends):
    mj, isaac = both_backends
    # the same draws on both: tiles, spawn poses, friction, mass, motor strength, commands
    assert_same_observations(mj.observe(), isaac.call("observe"))
    # ... and they reached Isaac Lab's model: the robot's friction, its base mass, the drives' stiffness
    held = isaac.call("physics_readback")
    np.testing.assert_allclose(held["friction"], mj.friction, rtol=1e-6)
    np.testing.assert_allclose(held["base_mass"], mj._base_mass0 + mj.added_mass, rtol=1e-6)
    np.testing.assert_allclose(held["kp"], mj._gain0[None, :] * mj.motor_strength[:, None], rtol=1e-5)
    zero = torch.zeros(8, mj.num_actions)
    for _ in range(25):  # 0.5 s: every robot settles on its tile's ground, in each engine
        mj.step(zero)
        isaac.step(zero)
    heights_i = np.asarray(isaac.attr("qpos"))[:, 2]
    assert np.abs(heights_i - mj.qpos[:, 2]).max() < 0.02  # the same ground under each robot (boxes, heightfields)

    # MuJoCo's state on Isaac Lab: every observation term the same
    isaac.call("set_physics_state", mj.qpos.copy(), mj.qvel.copy())
    assert_same_observations(mj.observe(), isaac.call("observe"))

    # one policy step of the same actions from that state: every reward term and observation within the tolerance
    actions = 0.3 * torch.randn(8, mj.num_actions, generator=torch.Generator().manual_seed(0))
    before_m, before_i = mj.episode_terms.copy(), np.asarray(isaac.attr("episode_terms"))
    step_m, step_i = mj.step(actions), isaac.step(actions)
    assert not step_m.terminated.any() and not step_i.terminated.any()
    terms_m = mj.episode_terms - before_m
    terms_i = np.asarray(isaac.attr("episode_terms")) - before_i
    worst = {n: float(np.abs(terms_m[:, k] - terms_i[:, k]).max()) for k, n in enumerate(mj.reward_names)}
    assert max(worst.values()) < STEP_TOLERANCE["reward_term"], worst
    obs_m, obs_i = step_m.obs["critic"], step_i.obs["critic"]
    assert (obs_m["proprio"] - obs_i["proprio"]).abs().max() < STEP_TOLERANCE["proprio"]
    assert (obs_m["height_scan"] - obs_i["height_scan"]).abs().max() < STEP_TOLERANCE["height_scan"]
    motion = slice(0, 4)
    gap = (obs_m["privileged"][:, motion] - obs_i["privileged"][:, motion]).abs().max()
    assert gap < STEP_TOLERANCE["privileged_motion"]
    assert torch.equal(obs_m["command"], obs_i["command"]) or (obs_m["command"] - obs_i["command"]).abs().max() < 0.01


@pytest.mark.timeout(900)
def test_the_teacher_stage_trains_on_isaac_lab_and_mujoco_judges_it(services, tmp_path, llp):
    root = tmp_path / "runs"
    out = llp("run", *SMOKE, "--until-stage", "locomotion_teacher", "--set", "sim.backend=isaaclab",
              "--set", f"run_root={root}", "--run-id", "isaac", env=services["env"])  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    book = ledger(root, "isaac")
    assert book["stages"]["locomotion_teacher"]["state"] == "completed"
    client = mlflow_client(services)
    version = client.get_model_version_by_alias("llp-locomotion-teacher", "run-isaac")
    assert client.get_run(version.run_id).data.params["sim.backend"] == "isaaclab"
    # judged on the default backend (MuJoCo): the same observation code, so the policy runs there unchanged
    judged = llp("evaluate", "--model", f"models:/llp-locomotion-teacher/{version.version}", *SMOKE, "--json",
                 env=services["env"])  # fmt: skip
    assert judged.returncode == 0, judged.stdout[-3000:] + judged.stderr[-3000:]
    report = json.loads(judged.stdout.strip().splitlines()[-1])
    assert report["model"] == f"models:/llp-locomotion-teacher/{version.version}"
    trials = sum(sum(row["outcomes"].values()) for row in report["tracking_by_command"].values())
    assert trials > 0 and report["sim"] == {"backend": "mujoco", "device": "cpu"}

    # the sim-to-sim tool: the same envs, seeds and commands on each engine, falls counted
    from llp.bench.sim2sim import falls
    from llp.flows import tracking
    from llp.learn.spec import FrozenPolicy

    uri = f"models:/llp-locomotion-teacher/{version.version}"
    frozen = FrozenPolicy(uri, *tracking.download_policy(uri))
    for engine in ("mujoco", "isaaclab"):
        out = falls(frozen, engine, num_envs=4, seconds=0.5)
        assert (out["engine"], out["envs"]) == (engine, 4) and len(out["fell_at_s"]) == out["fell"] <= 4
