"""`llp bench rllib`'s sampler comparison: both samplers step the same env the same number of times."""

from __future__ import annotations

from llp.bench.rllib import NUM_STEPS, sampler_ours, sampler_rllib


def test_both_samplers_collect_the_same_number_of_env_steps_of_the_same_env():
    (ours, ours_s), (theirs, theirs_s) = sampler_ours(4, 2), sampler_rllib(4, 2)
    # 4 envs x 24 steps x 2 rounds, start-up round excluded; RLlib's runner takes a step more per auto-reset (the
    # step that reports an ended env's fresh start), within its rounds
    assert ours == 4 * NUM_STEPS * 2
    assert theirs % 4 == 0 and ours <= theirs <= 1.5 * ours
    assert ours_s > 0 and theirs_s > 0
