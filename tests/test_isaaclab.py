"""The isaaclab backend's robot: its USD is the MJCF's robot, and it stands in Isaac Lab on Newton as it does in
MuJoCo. These run in the Isaac Lab environment (Python 3.12), so they are opt-in: ``make test-isaaclab``."""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from llp.config.schema import merge
from llp.sim.env import ParkourEnv
from llp.sim.tasks import env_config

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
