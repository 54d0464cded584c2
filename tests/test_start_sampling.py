from __future__ import annotations

import numpy as np
import pytest

from llp.config.schema import ConfigError
from llp.motion.start_sampling import AdaptiveStarts, StartSampler


def test_uniform_starts_draw_the_same_frames_from_the_same_stream_as_before():
    sampler = StartSampler(AdaptiveStarts(), np.array([116]), dt=0.02)
    last = np.full(64, 115)
    got = sampler.draw(np.zeros(64, dtype=np.int64), last, np.random.default_rng(3))
    want = np.floor(np.random.default_rng(3).uniform(size=64) * 115).astype(np.int64)
    np.testing.assert_array_equal(got, want)


def test_adaptive_starts_gather_just_before_where_episodes_fall_and_keep_a_uniform_share():
    cfg = AdaptiveStarts(bin_s=0.25, alpha=0.05, kernel=2, decay=0.5, uniform=0.1)
    sampler = StartSampler(cfg, np.array([100, 50]), dt=0.02)  # lanes of 2.0 s (8 bins) and 1.0 s (4 bins)
    assert sampler.bins.tolist() == [8, 4]
    np.testing.assert_allclose(sampler.probabilities(0), 1 / 8)  # nothing fell yet: uniform
    lane, frame = np.zeros(10, dtype=np.int64), np.full(10, 65)  # frame 65 of 100: bin 5
    for _ in range(200):
        sampler.record(lane, frame, np.ones(10, dtype=bool))
    p = sampler.probabilities(0)
    assert p.sum() == pytest.approx(1.0)
    # bin 5 weighs 1, bin 4 (one before) 0.5, of 1.5 in all, mixed with 10% spread over 8 bins
    assert p[5] == pytest.approx(0.9 / 1.5 + 0.1 / 8) and p[4] == pytest.approx(0.9 * 0.5 / 1.5 + 0.1 / 8)
    assert p[0] == pytest.approx(0.1 / 8)
    np.testing.assert_allclose(sampler.probabilities(1), 1 / 4)  # the other lane's motion is untouched
    starts = sampler.draw(np.zeros(4000, dtype=np.int64), np.full(4000, 99), np.random.default_rng(0))
    in_bins = np.bincount(starts * 8 // 99, minlength=8)[:8] / 4000
    assert in_bins[4] + in_bins[5] == pytest.approx(p[4] + p[5], abs=0.03)
    assert starts.min() >= 0 and starts.max() < 99


def test_adaptive_starts_refuse_a_start_window_and_bad_numbers_by_name():
    from llp.motion.tracking import tracking_task

    with pytest.raises(ConfigError, match="adaptive_starts.bin_s"):
        tracking_task("tracking", "lightbot0_like", {"start_window_s": 1.0, "adaptive_starts": {"bin_s": 0.25}})
    with pytest.raises(ConfigError, match="adaptive_starts.uniform"):
        tracking_task("tracking", "lightbot0_like", {"adaptive_starts": {"bin_s": 0.25, "uniform": 1.5}})
