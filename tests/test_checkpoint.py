"""Checkpoints hold everything needed to resume: models, normalisers, optimiser, learning rate, RNG, history."""

import torch

from llp.config.schema import build
from llp.learn.checkpoint import load_checkpoint, save_checkpoint
from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO
from llp.learn.rollout import RolloutCollector
from tests.toy_envs import PointMass


def _learner(seed: int):
    torch.manual_seed(seed)
    env = PointMass(num_envs=16, seed=seed)
    dims = env.obs_dims()
    actor = Actor(build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [16], "num_frames": 2}), dims, 2)
    critic = Critic(build(CriticConfig, {"obs": ["critic/state", "critic/time"], "hidden_dims": [16]}), dims)
    return env, PPO(actor, critic, build(PPOConfig, {"num_steps": 20}))


def test_restored_learner_continues_exactly_like_the_original(tmp_path):
    env, ppo = _learner(0)
    collector = RolloutCollector(env, ppo.actor, ppo.critic, 20)
    for _ in range(3):
        ppo.update(collector.collect())
    path = save_checkpoint(tmp_path / "ckpt.pt", ppo, iteration=2, history=[{"episode/return": -5.0}])
    rollout = collector.collect()
    torch.manual_seed(123)
    expected = ppo.update(rollout)
    expected_params = [p.detach().clone() for p in ppo.actor.parameters()]

    _, fresh = _learner(99)  # different initial weights, same architecture
    state = load_checkpoint(path, fresh)
    assert state["iteration"] == 2 and state["history"] == [{"episode/return": -5.0}]
    assert fresh.learning_rate == load_checkpoint(path, _learner(5)[1])["learning_rate"]
    # running normalisers travel with the models
    assert torch.equal(
        fresh.actor.normalizer.norm._mean, load_checkpoint(path, _learner(7)[1])["actor"]["normalizer.norm._mean"]
    )
    torch.manual_seed(123)
    got = fresh.update(rollout)
    assert got == expected
    for a, b in zip(expected_params, fresh.actor.parameters()):
        assert torch.equal(a, b)


def test_checkpoint_restores_rng_streams(tmp_path):
    _, ppo = _learner(0)
    path = save_checkpoint(tmp_path / "c.pt", ppo, iteration=0)
    after_save = torch.rand(3)
    torch.rand(10)  # advance the stream
    load_checkpoint(path, ppo)
    assert torch.equal(torch.rand(3), after_save)


def test_checkpoint_write_is_atomic(tmp_path):
    _, ppo = _learner(0)
    save_checkpoint(tmp_path / "c.pt", ppo, iteration=0)
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]  # no temporary file left behind


def test_a_nonfinite_update_is_undone_with_a_lower_learning_rate_and_repeats_stop_the_stage():
    import pytest

    from llp.learn.learner import Learner, NonFiniteTraining

    env, ppo = _learner(0)
    learner = Learner(ppo)
    collector = RolloutCollector(env, ppo.actor, ppo.critic, 20)
    metrics = learner.update(collector.collect())  # a good update
    assert metrics["faults/nonfinite_updates"] == 0.0
    before = {k: v.clone() for k, v in ppo.actor.state_dict().items()}
    optimizer_before = ppo.optimizer.state_dict()["state"][0]["exp_avg"].clone()
    lr = ppo.learning_rate

    learner.poison_next = 1  # the next rollout carries a NaN reward
    metrics = learner.update(collector.collect())
    assert metrics == {"faults/nonfinite_updates": 1.0, "policy/learning_rate": lr * 0.5}
    for k, v in ppo.actor.state_dict().items():
        assert torch.equal(v, before[k]), k  # undone: networks, normalisers ...
    assert torch.equal(ppo.optimizer.state_dict()["state"][0]["exp_avg"], optimizer_before)  # ... and Adam
    assert ppo.learning_rate == lr * 0.5 and ppo.optimizer.param_groups[0]["lr"] == lr * 0.5

    metrics = learner.update(collector.collect())  # clean data again: training goes on
    assert metrics["faults/nonfinite_updates"] == 1.0 and learner.nonfinite_streak == 0
    assert all(torch.isfinite(p).all() for p in ppo.actor.parameters())

    learner.poison_next = 3  # max_nonfinite_updates (3) in a row: a clear stop
    learner.update(collector.collect())
    learner.update(collector.collect())
    with pytest.raises(NonFiniteTraining, match="3 updates in a row left NaN or Inf"):
        learner.update(collector.collect())
    assert all(torch.isfinite(p).all() for p in ppo.actor.parameters())
