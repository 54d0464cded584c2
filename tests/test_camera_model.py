"""The camera model: its noise, scale and dropouts as configured, and the frames a 50 Hz policy reads from a slower,
later camera."""

from __future__ import annotations

import numpy as np
import pytest

from llp.config.schema import build
from llp.sim.camera_model import CameraModel, CameraModelConfig

QUIET = {"perfect": False, "noise_base": 0.0, "noise_slope": 0.0, "scale": 0.0, "dropout_start": 0.0}


def _camera(n: int = 1, seed: int = 0, **cfg) -> CameraModel:
    return CameraModel(build(CameraModelConfig, cfg), n, (36, 64), dt=0.02, far=4.0, seed=seed)


def _constant(depth: float):
    return lambda ids: np.full((len(ids), 36, 64), depth)


@pytest.mark.parametrize("depth, std", [(1.0, 0.025), (2.0, 0.045)])
def test_the_noise_std_is_base_plus_slope_times_depth(depth, std):
    cam = _camera(**{**QUIET, "noise_base": 0.005, "noise_slope": 0.02, "frame_rate": (50, 50), "latency_s": (0, 0)})
    cam.reset(np.array([0]), _constant(depth))
    frames = []
    for _ in range(20):
        cam.step(_constant(depth))
        assert cam.fresh[0]  # a 50 Hz camera without latency: a new frame every tick
        frames.append(cam.image[0].copy())
    error = np.stack(frames) - depth
    assert abs(error.mean()) < 0.002 and error.std() == pytest.approx(std, rel=0.03)


def test_the_depth_scale_is_drawn_per_episode_within_its_range_and_held():
    cam = _camera(400, **{**QUIET, "scale": 0.05, "frame_rate": (50, 50), "latency_s": (0, 0)})
    cam.reset(np.arange(400), _constant(1.0))
    first = cam.image.mean(axis=(1, 2))
    assert first.min() >= 0.95 and first.max() <= 1.05 and first.min() < 0.96 and first.max() > 1.04
    for _ in range(5):
        cam.step(_constant(1.0))
    np.testing.assert_allclose(cam.image.mean(axis=(1, 2)), first)  # the same scale all episode
    cam.reset(np.arange(200), _constant(1.0))
    assert np.abs(cam.image[:200].mean(axis=(1, 2)) - first[:200]).max() > 0.01  # a new draw per episode


def test_dropout_blocks_read_far_and_persist_for_their_frames():
    cam = _camera(**{**QUIET, "dropout_start": 0.1, "dropout_frames": (4, 4), "frame_rate": (50, 50),
                     "latency_s": (0, 0)})  # fmt: skip
    cam.reset(np.array([0]), _constant(1.0))
    dropped = []
    for _ in range(600):
        cam.step(_constant(1.0))
        dropped.append(cam.image[0] == 4.0)
    dropped = np.stack(dropped)  # [frames, H, W]
    runs = []
    for pixel in dropped.reshape(len(dropped), -1).T[::7]:
        edges = np.diff(np.concatenate([[0], pixel.astype(int), [0]]))
        runs += list(np.nonzero(edges == -1)[0] - np.nonzero(edges == 1)[0])
    runs = [r for r in runs if r]  # runs that end before the last frame
    assert runs and min(runs) == 4  # never shorter than a block's life; overlapping blocks join runs
    share = dropped.any(axis=(1, 2)).mean()
    assert 0.2 < share < 0.5  # about 1 - 0.9^4 of frames show a block


def test_a_30_hz_camera_40_ms_late_repeats_two_frames_in_five_and_is_never_fresher_than_its_latency():
    cam = _camera(**{**QUIET, "frame_rate": (30, 30), "latency_s": (0.04, 0.04)})
    cam.reset(np.array([0]), _constant(1.0))
    fresh, ages = [], []
    for _ in range(3000):
        cam.step(_constant(1.0))
        fresh.append(bool(cam.fresh[0]))
        ages.append(float(cam.age[0]))
    assert 1 - np.mean(fresh) == pytest.approx(0.4, abs=0.01)  # 50 Hz ticks, 30 frames a second
    ages = np.array(ages[10:])
    assert ages.min() >= 0.04 - 1e-9 and ages.max() <= 0.04 + 0.02 + 1 / 30 + 0.02 + 1e-9


def test_stress_settings_hold_frames_and_cut_the_feed_for_a_window():
    held = _camera(**{**QUIET, "frame_rate": (50, 50), "latency_s": (0, 0), "hold_ticks": 2})
    held.reset(np.array([0]), _constant(1.0))
    fresh = []
    for _ in range(30):
        held.step(_constant(1.0))
        fresh.append(bool(held.fresh[0]))
    assert np.mean(fresh) == pytest.approx(1 / 3, abs=0.04)  # each frame shown three ticks
    cut = _camera(**{**QUIET, "frame_rate": (50, 50), "latency_s": (0, 0), "missing_ticks": 15})
    cut.reset(np.array([0]), _constant(1.0), episode_ticks=100)
    fresh = []
    for _ in range(100):
        cut.step(_constant(1.0))
        fresh.append(bool(cut.fresh[0]))
    gaps = np.diff(np.nonzero(fresh)[0])
    assert gaps.max() == 16 and np.sum(gaps > 1) == 1  # one window of 15 ticks without a frame


def test_the_perfect_camera_reads_an_exact_frame_every_tick():
    cam = _camera(perfect=True)
    cam.reset(np.array([0]), _constant(1.5))
    for k in range(5):
        cam.step(_constant(1.0 + k))
        assert cam.fresh[0] and cam.age[0] == 0 and (cam.image[0] == 1.0 + k).all()


def test_a_parkour_env_with_the_camera_model_reads_frames_that_repeat():
    import torch

    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    overrides = {
        "observations": {"policy": ["proprio", "depth"]},
        "camera_model": {"perfect": False, "frame_rate": [30, 30], "latency_s": [0.04, 0.04]},
        "terrain": {"num_levels": 1, "tile_length": 6.0, "tile_width": 6.0, "border": 1.0},
    }
    env = ParkourEnv(env_config("locomotion", "lightbot0_like", overrides), 2, seed=0)
    fresh = []
    for _ in range(50):
        env.step(torch.zeros(2, env.num_actions))
        fresh.append(env.camera.fresh.copy())
    assert 0.3 < 1 - np.mean(fresh) < 0.5
    depth = env.observe()["policy"]["depth"].numpy()
    np.testing.assert_allclose(depth, env.camera.image.reshape(2, -1) / 2.0, atol=1e-6)  # what the policy reads
