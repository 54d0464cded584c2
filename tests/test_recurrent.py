"""Recurrent replay, per-env memory resets and frame-stack equivalence."""

import torch

from llp.config.schema import build
from llp.learn.configs import ActorConfig, CriticConfig
from llp.learn.memory import Memory, stack_frames
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO, PPOConfig
from llp.learn.rollout import RolloutCollector
from tests.toy_envs import CueMemory

DIMS = {"policy": {"obs": 3}}


def _actor(**kw) -> Actor:
    torch.manual_seed(0)
    cfg = build(ActorConfig, {"obs": ["policy/obs"], "hidden_dims": [16], **kw})
    return Actor(cfg, DIMS, num_actions=2)


def test_recurrent_replay_reproduces_rollout_log_probs():
    env = CueMemory(num_envs=16, horizon=5)
    torch.manual_seed(1)
    actor = Actor(
        build(ActorConfig, {"obs": ["policy/cue"], "hidden_dims": [32], "encoder_dims": [16], "gru_hidden": 24}),
        env.obs_dims(),
        1,
    )
    critic = Critic(build(CriticConfig, {"obs": ["teacher/cue"], "hidden_dims": [16]}), env.obs_dims())
    ppo = PPO(actor, critic, build(PPOConfig, {"num_steps": 12, "bptt_length": 4}))
    collector = RolloutCollector(env, actor, critic, 12)
    collector.collect()  # start mid-episode so windows begin with non-zero hidden states
    ro = collector.collect()
    assert ro.hidden is not None and float(ro.hidden.abs().sum()) > 0
    assert bool(ro.dones.any())  # episodes end inside the windows
    replay = ppo.replay_log_probs(ro)
    ratio = torch.exp(replay - ro.log_probs)
    assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-5)


def test_replay_without_initial_hidden_state_drifts():
    """The defect this guards against: replaying from zero hidden states changes the log-probabilities."""
    env = CueMemory(num_envs=8, horizon=5)
    torch.manual_seed(1)
    actor = Actor(build(ActorConfig, {"obs": ["policy/cue"], "hidden_dims": [32], "gru_hidden": 24}), env.obs_dims(), 1)
    collector = RolloutCollector(env, actor, None, 8)
    collector.collect()
    ro = collector.collect()
    zero = Memory(hidden=torch.zeros_like(ro.hidden[0]))
    with torch.no_grad():
        mean, _ = actor.sequence(ro.actor_obs, zero, ro.dones)
        drift = (actor.dist(mean).log_prob(ro.actions) - ro.log_probs).abs().max()
    assert float(drift) > 1e-3


def test_hidden_state_reset_touches_only_done_envs():
    actor = _actor(gru_hidden=8)
    memory = actor.initial_memory(4)
    frame = torch.randn(4, 3)
    for _ in range(3):
        _, memory, _ = actor.step(frame, memory)
    before = memory.hidden.clone()
    done = torch.tensor([False, True, False, False])
    after = memory.reset(done)
    assert torch.equal(after.hidden[:, 1], torch.zeros_like(before[:, 1]))
    for env in (0, 2, 3):
        assert torch.equal(after.hidden[:, env], before[:, env])


def test_frame_stack_step_and_sequence_agree():
    actor = _actor(num_frames=5)
    T, N = 11, 3
    frames = torch.randn(T, N, 3)
    dones = torch.zeros(T, N, dtype=torch.bool)
    dones[3, 1] = True  # env 1 resets after step 3
    dones[7, 0] = True
    memory = actor.initial_memory(N)
    stepwise = []
    with torch.no_grad():
        for t in range(T):
            mean, memory, _ = actor.step(frames[t], memory)
            stepwise.append(mean)
            memory = memory.reset(dones[t])
        seq, _ = actor.sequence(frames, actor.initial_memory(N), dones)
    # same inputs; a batched matmul may round differently from per-step ones, hence the tiny tolerance
    assert torch.allclose(torch.stack(stepwise), seq, atol=1e-6, rtol=0)


def test_frame_history_restarts_after_reset():
    memory = Memory(frames=torch.zeros(2, 2, 1), fresh=torch.tensor([True, True]))
    s1, memory = stack_frames(torch.tensor([[1.0], [5.0]]), memory, 3)
    assert s1[:, :, 0].tolist() == [[1, 1, 1], [5, 5, 5]]  # first frame fills the history
    s2, memory = stack_frames(torch.tensor([[2.0], [6.0]]), memory, 3)
    assert s2[:, :, 0].tolist() == [[1, 1, 2], [5, 5, 6]]
    memory = memory.reset(torch.tensor([False, True]))
    s3, memory = stack_frames(torch.tensor([[3.0], [9.0]]), memory, 3)
    assert s3[:, :, 0].tolist() == [[1, 2, 3], [9, 9, 9]]  # env 1 sees nothing of its last episode


def test_feedforward_replay_ratio_is_one():
    from tests.toy_envs import PointMass

    env = PointMass(num_envs=8)
    torch.manual_seed(0)
    actor = Actor(
        build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [16], "num_frames": 3}), env.obs_dims(), 2
    )
    collector = RolloutCollector(env, actor, None, 60)
    ro = collector.collect()
    ppo = PPO(actor, None, build(PPOConfig, {"num_steps": 60, "bptt_length": 60}))
    assert torch.allclose(ppo.replay_log_probs(ro), ro.log_probs, atol=1e-5)
