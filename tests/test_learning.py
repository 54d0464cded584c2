"""Learning tests: each trains a real learning rule on a small task (well under 3 minutes on one core)
and asserts it improved past a threshold."""

import torch

from llp.config.schema import build
from llp.learn.amp import AMP, AMPConfig
from llp.learn.configs import ActorConfig, CriticConfig
from llp.learn.learner import Learner, train
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO, PPOConfig
from llp.learn.rollout import RolloutCollector, Teacher
from tests.toy_envs import CueMemory, PointMass, ScriptedExpertEnv, Slider


def setup_module():
    torch.set_num_threads(1)


def test_ppo_solves_point_mass():
    torch.manual_seed(0)
    env = PointMass(num_envs=64, horizon=50, seed=0)
    dims = env.obs_dims()
    actor = Actor(build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [64, 64], "init_std": 0.5}), dims, 2)
    critic = Critic(build(CriticConfig, {"obs": ["critic/state", "critic/time"], "hidden_dims": [64, 64]}), dims)
    cfg = build(PPOConfig, {"num_steps": 50, "learning_rate": 3e-3, "entropy_coef": 0.0, "gamma": 0.98})
    history = train(RolloutCollector(env, actor, critic, 50), Learner(PPO(actor, critic, cfg)), 40)
    first = history[0]["episode/return"]
    last = sum(h["episode/return"] for h in history[-5:]) / 5
    # a motionless point scores about -10 (mean start distance ~2.1 m x 50 steps x 0.1); solved is near -3
    assert first < -8.0
    assert last > -4.5, (first, last)


class ScriptedTeacher(Actor):
    def __init__(self, dims):
        super().__init__(
            build(ActorConfig, {"obs": ["teacher/state"], "hidden_dims": [4], "normalize_obs": False}), dims, 1
        )

    def step(self, frame, memory):
        return ScriptedExpertEnv.expert(frame[:, 0], frame[:, 1])[:, None], memory, None


def test_pure_dagger_copies_expert_on_states_it_never_visits():
    torch.manual_seed(0)
    # the expert itself, from its own starts (|x0| <= 0.5), never leaves |x| <= 0.5
    expert_env = ScriptedExpertEnv(num_envs=256, start=0.5, seed=1)
    max_x = 0.0
    for _ in range(80):
        a = ScriptedExpertEnv.expert(expert_env.x, expert_env.v)[:, None]
        expert_env.step(a)
        max_x = max(max_x, float(expert_env.x.abs().max()))
    assert max_x <= 0.5
    env = ScriptedExpertEnv(num_envs=64, start=3.0, seed=2)
    dims = env.obs_dims()
    student = Actor(build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [64, 64]}), dims, 1)
    cfg = build(
        PPOConfig, {"num_steps": 40, "rl_coef": 0.0, "dagger_coef": 1.0, "learning_rate": 3e-3, "schedule": "fixed"}
    )
    collector = RolloutCollector(
        env, student, None, 40, teachers=[Teacher(ScriptedTeacher(dims), torch.arange(64))], stochastic=False
    )
    train(collector, Learner(PPO(student, None, cfg)), 120)
    # probe states far outside the expert's own distribution: |x| in [1, 3]
    x = torch.cat([torch.linspace(-3, -1, 50), torch.linspace(1, 3, 50)])
    v = torch.linspace(-1.5, 1.5, 100)
    with torch.no_grad():
        pred = student.flat(torch.stack([x, v], 1)[:, None, :])[:, 0]
    target = ScriptedExpertEnv.expert(x, v)
    err = (pred - target).abs().mean()
    assert float(err) < 0.3, float(err)  # expert actions there span about +-8


def _train_cue(gru_hidden: int) -> float:
    torch.manual_seed(0)
    env = CueMemory(num_envs=64, horizon=8, seed=3)
    dims = env.obs_dims()
    actor_cfg = {"obs": ["policy/cue"], "hidden_dims": [32]}
    if gru_hidden:
        actor_cfg.update(encoder_dims=[32], gru_hidden=gru_hidden)
    else:
        actor_cfg.update(hidden_dims=[64, 32])  # a comparable number of weights, no memory
    actor = Actor(build(ActorConfig, actor_cfg), dims, 1)
    teacher = Actor(build(ActorConfig, {"obs": ["teacher/cue"], "hidden_dims": [4], "normalize_obs": False}), dims, 1)
    teacher.step = lambda frame, memory: (frame[:, :1], memory, None)  # the privileged teacher says the cue
    cfg = build(
        PPOConfig,
        {
            "num_steps": 16,
            "rl_coef": 0.0,
            "dagger_coef": 1.0,
            "learning_rate": 3e-3,
            "schedule": "fixed",
            "num_minibatches": 2,
        },
    )
    collector = RolloutCollector(env, actor, None, 16, teachers=[Teacher(teacher, torch.arange(64))], stochastic=False)
    train(collector, Learner(PPO(actor, None, cfg)), 60)
    # evaluate: sign of the action at steps after the cue disappeared vs. the cue
    env_eval = CueMemory(num_envs=128, horizon=8, seed=99)
    eval_collector = RolloutCollector(
        env_eval, actor, None, 16, teachers=[Teacher(teacher, torch.arange(128))], stochastic=False
    )
    ro = eval_collector.collect()
    cue = ro.teacher_actions[..., 0]
    later = (torch.arange(16) % 8 > 0)[:, None].expand(16, 128)
    correct = (torch.sign(ro.actions[..., 0]) == cue)[later]
    return float(correct.float().mean())


def test_gru_student_solves_memory_task_that_mlp_cannot():
    gru = _train_cue(gru_hidden=32)
    mlp = _train_cue(gru_hidden=0)
    assert gru > 0.95, gru
    assert mlp < 0.7, mlp


def test_amp_moves_policy_towards_reference_motion():
    torch.manual_seed(0)
    env = Slider(num_envs=64, horizon=50, seed=4)
    dims = env.obs_dims()
    actor = Actor(build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [64, 64], "init_std": 0.3}), dims, 1)
    critic = Critic(build(CriticConfig, {"obs": ["policy/state"], "hidden_dims": [64, 64]}), dims)
    amp = AMP(
        build(AMPConfig, {"hidden_dims": [64, 64], "style_coef": 10.0, "learning_rate": 3e-4}),
        2,
        [Slider.reference_transitions(8192)],
        dt=0.1,
    )
    cfg = build(PPOConfig, {"num_steps": 50, "learning_rate": 1e-3, "entropy_coef": 0.0})
    collector = RolloutCollector(env, actor, critic, 50, amp_refs=("amp/features", "amp/progress"))

    def speed() -> float:
        probe = RolloutCollector(Slider(num_envs=64, seed=5), actor, None, 50, stochastic=False)
        return float(probe.collect().actions.clamp(-2, 2).abs().mean())

    before = speed()
    train(collector, Learner(PPO(actor, critic, cfg), amp), 100)
    after = speed()
    # the reference moves at |v| = 1; the untrained policy barely moves
    assert before < 0.3, before
    assert abs(after - 1.0) < 0.3, after
