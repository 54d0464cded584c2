"""GAE and grouped advantages, pinned with numbers worked out by hand."""

import math

import torch

from llp.learn.gae import combine_advantages, gae


def _one_env(terminated_last: bool, truncated_last: bool):
    rewards = torch.tensor([[[1.0]], [[2.0]]])  # [T=2, N=1, H=1]
    values = torch.tensor([[[0.5]], [[0.4]]])
    final_values = torch.tensor([[[0.0]], [[0.3]]])  # V of the final state after step 1
    terminated = torch.tensor([[False], [terminated_last]])
    truncated = torch.tensor([[False], [truncated_last]])
    last_values = torch.tensor([[0.3]])  # unused at an episode end
    return gae(rewards, values, last_values, terminated, truncated, final_values, gamma=0.9, lam=0.8)


def test_termination_targets_do_not_bootstrap():
    # delta1 = 2 - 0.4 = 1.6, A1 = 1.6, target1 = 2.0
    # delta0 = 1 + 0.9*0.4 - 0.5 = 0.86, A0 = 0.86 + 0.72*1.6 = 2.012, target0 = 2.512
    adv, ret = _one_env(terminated_last=True, truncated_last=False)
    assert torch.allclose(ret[:, 0, 0], torch.tensor([2.512, 2.0]), atol=1e-6)
    assert torch.allclose(adv[:, 0, 0], torch.tensor([2.012, 1.6]), atol=1e-6)


def test_timeout_bootstraps_from_final_state_value():
    # delta1 = 2 + 0.9*0.3 - 0.4 = 1.87, target1 = 2.27 (includes 0.9 x 0.3)
    # A0 = 0.86 + 0.72*1.87 = 2.2064, target0 = 2.7064
    adv, ret = _one_env(terminated_last=False, truncated_last=True)
    assert math.isclose(float(ret[1, 0, 0]), 2.0 + 0.9 * 0.3, abs_tol=1e-6)
    assert math.isclose(float(ret[0, 0, 0]), 2.7064, abs_tol=1e-6)


def test_no_advantage_flows_across_an_episode_boundary():
    # env ends at step 0 (termination); the reward at step 1 belongs to the next episode
    rewards = torch.tensor([[[0.0]], [[100.0]]])
    values = torch.zeros(2, 1, 1)
    adv, _ = gae(
        rewards,
        values,
        torch.zeros(1, 1),
        torch.tensor([[True], [False]]),
        torch.tensor([[False], [False]]),
        torch.zeros(2, 1, 1),
        0.9,
        0.8,
    )
    assert float(adv[0, 0, 0]) == 0.0
    assert float(adv[1, 0, 0]) == 100.0


def test_unfinished_rollout_bootstraps_from_last_values():
    rewards = torch.tensor([[[1.0]]])
    adv, ret = gae(
        rewards,
        torch.tensor([[[0.0]]]),
        torch.tensor([[2.0]]),
        torch.tensor([[False]]),
        torch.tensor([[False]]),
        torch.zeros(1, 1, 1),
        0.5,
        1.0,
    )
    assert math.isclose(float(ret[0, 0, 0]), 1.0 + 0.5 * 2.0)


def test_grouped_advantage_normalisation():
    # group 0 has a scale 100x group 1; each is normalised on its own before weighting
    a0 = torch.tensor([100.0, -100.0, 300.0, -300.0])
    a1 = torch.tensor([1.0, -1.0, -3.0, 3.0])
    adv = torch.stack([a0, a1], dim=-1)  # [4, 2]
    out = combine_advantages(adv, torch.tensor([1.0, 0.5]))
    z0 = (a0 - a0.mean()) / a0.std()
    z1 = (a1 - a1.mean()) / a1.std()
    assert torch.allclose(out, z0 + 0.5 * z1, atol=1e-5)
    # by hand for the first sample: std of [100,-100,300,-300] = sqrt(200000/3) = 258.199
    assert math.isclose(float(out[0]), 100 / 258.1989 + 0.5 * (1 / 2.581989), rel_tol=1e-4)


def test_single_group_is_plain_normalisation():
    adv = torch.tensor([[1.0], [2.0], [3.0]])
    out = combine_advantages(adv, torch.tensor([1.0]))
    assert torch.allclose(out, torch.tensor([-1.0, 0.0, 1.0]), atol=1e-5)
