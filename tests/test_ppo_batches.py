"""PPO minibatching: every sample used once per epoch, never an empty minibatch, rollout length checked."""

from __future__ import annotations

import pytest
import torch

from llp.config.schema import ConfigError, build
from llp.learn.configs import ActorConfig, CriticConfig
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO, PPOConfig
from llp.learn.rollout import RolloutCollector
from tests.toy_envs import CueMemory, PointMass


def _ppo(env, actor_kw: dict, ppo_kw: dict, critic_obs="critic/state") -> tuple[PPO, RolloutCollector]:
    torch.manual_seed(0)
    actor = Actor(build(ActorConfig, {"hidden_dims": [8], **actor_kw}), env.obs_dims(), env.num_actions)
    critic = Critic(build(CriticConfig, {"obs": [critic_obs], "hidden_dims": [8]}), env.obs_dims())
    ppo = PPO(actor, critic, build(PPOConfig, ppo_kw))
    return ppo, RolloutCollector(env, actor, critic, ppo_kw["num_steps"])


def test_feedforward_minibatches_cover_every_sample_when_the_count_does_not_divide():
    env = PointMass(num_envs=7, horizon=20)
    ppo, collector = _ppo(env, {"obs": ["policy/state"]}, {"num_steps": 5, "num_minibatches": 4})
    ro = collector.collect()  # 35 samples into 4 minibatches: 9, 9, 9, 8
    batches = list(ppo._minibatches(ro))
    sizes = [len(idx) for _, idx in batches]
    assert sorted(sizes) == [8, 9, 9, 9]
    assert sorted(torch.cat([idx for _, idx in batches]).tolist()) == list(range(35))


def test_recurrent_minibatches_cover_every_window():
    """A recurrent minibatch is a random subset of envs with all their windows (rsl_rl's recurrent batches)."""
    env = CueMemory(num_envs=5, horizon=5)
    ppo, collector = _ppo(
        env,
        {"obs": ["policy/cue"], "gru_hidden": 8},
        {"num_steps": 6, "bptt_length": 3, "num_minibatches": 4},
        critic_obs="teacher/cue",
    )
    ro = collector.collect()  # 5 envs into 4 minibatches, each env with its 2 windows in time
    batches = [envs for _, envs in ppo._minibatches(ro)]
    assert sorted(len(b) for b in batches) == [1, 1, 1, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(5))
    samples = [ppo.evaluate(ro, ("windows", b)) for b in batches]
    covered = sorted((int(t), int(e)) for ev in samples for t, e in zip(ev["t"], ev["e"]))
    assert covered == sorted((t, e) for t in range(6) for e in range(5))  # every (step, env) once
    ppo.update(ro)  # and the update runs on them


def test_more_minibatches_than_samples_is_a_clear_error_not_a_crash():
    env = PointMass(num_envs=2, horizon=20)
    ppo, collector = _ppo(env, {"obs": ["policy/state"]}, {"num_steps": 2, "num_minibatches": 8})
    ro = collector.collect()
    with pytest.raises(ValueError, match="num_minibatches=8 but the rollout has only 4 samples"):
        ppo.update(ro)


def test_rollout_length_is_checked_against_the_bptt_window():
    env = CueMemory(num_envs=4, horizon=5)
    ppo, _ = _ppo(
        env,
        {"obs": ["policy/cue"], "gru_hidden": 8},
        {"num_steps": 8, "bptt_length": 4, "num_minibatches": 1},
        critic_obs="teacher/cue",
    )
    short = RolloutCollector(env, ppo.actor, ppo.critic, 6).collect()  # 6 steps, windows of 4
    with pytest.raises(ValueError, match="6 steps does not split into BPTT windows of 4"):
        ppo.update(short)
    with pytest.raises(ConfigError, match="bptt_length"):
        build(PPOConfig, {"num_steps": 6, "bptt_length": 4})
