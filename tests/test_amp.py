"""AMP: gradient penalty, phase hand-off, and the style reward reaching the advantages."""

import math

import pytest
import torch
import torch.nn as nn

from llp.config.schema import ConfigError, build
from llp.learn.amp import AMP, AMPConfig, gradient_penalty, phase_weights
from llp.learn.configs import ActorConfig, CriticConfig
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO, PPOConfig
from llp.learn.rollout import RolloutCollector
from tests.toy_envs import Slider


class LinearDisc(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.tensor(w)

    def forward(self, x):
        return x @ self.w + x.pow(2).sum(-1) * 0.0


def test_gradient_penalty_of_a_known_discriminator():
    # D(x) = w . x has gradient w everywhere: penalty = (10 / 2) * |w|^2 = 5 * (9 + 16) = 125
    gp = gradient_penalty(LinearDisc([3.0, 4.0]), torch.randn(7, 2), weight=10.0)
    assert math.isclose(float(gp.detach()), 125.0, rel_tol=1e-6)


def test_gradient_penalty_of_a_quadratic_discriminator():
    class Quad(nn.Module):
        def forward(self, x):
            return (x**2).sum(-1)  # gradient 2x

    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    # E |2x|^2 = (4 + 16) / 2 = 10; times weight/2 = 1 -> 10
    assert math.isclose(float(gradient_penalty(Quad(), x, weight=2.0).detach()), 10.0, rel_tol=1e-6)


def test_phase_weights_hard_and_smooth():
    progress = torch.tensor([-1.0, 0.0, 0.5, 3.0])
    hard = phase_weights(progress, [0.0, 2.0], "hard", 0.2)
    assert hard.argmax(-1).tolist() == [0, 1, 1, 2]
    smooth = phase_weights(progress, [0.0], "smooth", 0.2)
    assert torch.allclose(smooth.sum(-1), torch.ones(4))
    assert math.isclose(float(smooth[1, 1]), 0.5, abs_tol=1e-6)  # at the trigger: half walk, half skill
    assert float(smooth[0, 0]) > 0.99 and float(smooth[3, 1]) > 0.99


def test_trigger_positions_must_increase():
    with pytest.raises(ConfigError, match="strictly increasing"):
        build(AMPConfig, {"triggers": [1.0, 0.5]})


def test_style_reward_is_softplus_of_logit():
    amp = AMP(build(AMPConfig, {}), 2, [Slider.reference_transitions(64)], dt=0.1)
    x = torch.randn(5, 2)
    y = torch.randn(5, 2)
    logits = amp.discriminators[0](torch.cat([x, y], -1))
    assert torch.allclose(amp.style_reward(x, y, torch.zeros(5)), torch.nn.functional.softplus(logits))


def test_style_reward_enters_the_advantages():
    env = Slider(num_envs=8, horizon=20)
    dims = env.obs_dims()
    torch.manual_seed(0)
    actor = Actor(build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [16]}), dims, 1)
    critic = Critic(build(CriticConfig, {"obs": ["policy/state"], "hidden_dims": [16]}), dims)
    collector = RolloutCollector(env, actor, critic, 16, amp_refs=("amp/features", "amp/progress"))
    ro = collector.collect()
    assert float(ro.rewards.abs().sum()) == 0.0  # the env itself gives no reward here
    amp = AMP(build(AMPConfig, {"style_coef": 2.0}), 2, [Slider.reference_transitions(256)], dt=0.1)
    extra = amp.extra_rewards(ro, num_groups=1)
    style = amp.style_reward(ro.amp_obs, ro.extras["amp_next"], ro.amp_phase)
    assert torch.allclose(extra[..., 0], 2.0 * 0.1 * style)
    from llp.learn.gae import gae

    cfg = build(PPOConfig, {"num_steps": 16})
    adv_without, _ = gae(
        ro.rewards, ro.values, ro.last_values, ro.terminated, ro.truncated, ro.final_values, cfg.gamma, cfg.lam
    )
    adv_with, _ = gae(
        ro.rewards + extra, ro.values, ro.last_values, ro.terminated, ro.truncated, ro.final_values, cfg.gamma, cfg.lam
    )
    assert not torch.allclose(adv_with, adv_without)
    # the PPO update consumes the same sum: its reported mean reward is the style reward's mean
    ppo = PPO(actor, critic, cfg)
    metrics = ppo.update(ro, extra_rewards=extra)
    assert math.isclose(metrics["policy/mean_reward_per_step"], float(extra.mean()), rel_tol=1e-5)


def test_amp_transition_pairs_use_the_final_state_at_episode_ends():
    env = Slider(num_envs=4, horizon=3)
    dims = env.obs_dims()
    actor = Actor(build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [8]}), dims, 1)
    collector = RolloutCollector(env, actor, None, 3, amp_refs=("amp/features", "amp/progress"))
    ro = collector.collect()
    nxt = ro.extras["amp_next"]
    # within an episode, next features are the following step's features
    assert torch.allclose(nxt[0], ro.amp_obs[1])
    # at the last step (time-out), the next state is the final state: x advanced by 0.1 * v, not a reset
    x_final = ro.amp_obs[2][:, 0] + 0.1 * ro.actions[2][:, 0].clamp(-2, 2)
    assert torch.allclose(nxt[2][:, 0], x_final, atol=1e-6)
