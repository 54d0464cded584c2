"""Online DAgger: labels come from the teachers, on the states the student visited, routed per group."""

import torch
import torch.nn as nn

from llp.config.schema import build
from llp.learn.dagger import dagger_loss, sample_weights
from llp.learn.models import Actor, ActorConfig
from llp.learn.rollout import RolloutCollector, Teacher
from tests.toy_envs import ScriptedExpertEnv


class LinearTeacher(Actor):
    """A teacher whose action is a fixed linear function of its own observation: w . obs."""

    def __init__(self, dims, weights):
        super().__init__(
            build(ActorConfig, {"obs": ["teacher/state"], "hidden_dims": [4], "normalize_obs": False}), dims, 1
        )
        self.w = torch.tensor(weights)
        self.calls = 0

    def step(self, frame, memory):
        self.calls += 1
        return (frame @ self.w)[:, None], memory, None


def _student(dims):
    torch.manual_seed(0)
    return Actor(build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [8]}), dims, 1)


def test_labels_are_teacher_actions_on_student_visited_states():
    env = ScriptedExpertEnv(num_envs=6, start=3.0)
    dims = env.obs_dims()
    teacher = LinearTeacher(dims, [-2.0, -1.5])
    student = _student(dims)
    collector = RolloutCollector(env, student, None, 10, teachers=[Teacher(teacher, torch.arange(6))])
    ro = collector.collect()
    # actor_obs is what the student saw at each step; the label must be the teacher's action on exactly that state
    expected = ro.actor_obs @ torch.tensor([-2.0, -1.5])
    assert torch.allclose(ro.teacher_actions[..., 0], expected, atol=1e-6)
    # and those states were produced by the student's actions, not the teacher's
    assert not torch.allclose(ro.actions[..., 0], ro.teacher_actions[..., 0])


def test_multi_expert_routing_labels_each_group_by_its_own_teacher():
    env = ScriptedExpertEnv(num_envs=6)
    dims = env.obs_dims()
    a, b = LinearTeacher(dims, [1.0, 0.0]), LinearTeacher(dims, [0.0, 10.0])
    group_a, group_b = torch.tensor([0, 1, 2]), torch.tensor([3, 4, 5])
    collector = RolloutCollector(env, _student(dims), None, 5, teachers=[Teacher(a, group_a), Teacher(b, group_b)])
    ro = collector.collect()
    obs = ro.actor_obs
    assert torch.allclose(ro.teacher_actions[:, group_a, 0], obs[:, group_a, 0])
    assert torch.allclose(ro.teacher_actions[:, group_b, 0], 10 * obs[:, group_b, 1])
    assert a.calls == 5 and b.calls == 5


def test_teachers_run_without_gradients():
    env = ScriptedExpertEnv(num_envs=4)
    dims = env.obs_dims()
    teacher = Actor(build(ActorConfig, {"obs": ["teacher/state"], "hidden_dims": [8]}), dims, 1)
    collector = RolloutCollector(env, _student(dims), None, 3, teachers=[Teacher(teacher, torch.arange(4))])
    ro = collector.collect()
    assert not ro.teacher_actions.requires_grad


def test_sample_weights_uniform_and_group_balanced():
    w = sample_weights(None, 4, balance_groups=False)
    assert torch.allclose(w, torch.full((4,), 0.25))
    groups = torch.tensor([0, 0, 0, 1])  # three samples of expert 0, one of expert 1
    w = sample_weights(groups, 4, balance_groups=True)
    assert torch.allclose(w, torch.tensor([1 / 6, 1 / 6, 1 / 6, 1 / 2]))
    assert torch.isclose(w[:3].sum(), w[3:].sum())
    assert torch.isclose(w.sum(), torch.tensor(1.0))


def test_dagger_loss_value():
    student = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    teacher = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    # per sample: mean of squares = (1 + 4)/2 = 2.5 and (1 + 1)/2 = 1.0; weights 0.25/0.75
    loss = dagger_loss(student, teacher, torch.tensor([0.25, 0.75]))
    assert abs(float(loss) - (0.25 * 2.5 + 0.75 * 1.0)) < 1e-6


def test_a_dagger_step_moves_the_student_towards_its_labels_and_only_where_they_are_used():
    """One gradient step on the DAgger loss brings the student's actions closer to the teacher's labels, in
    proportion to each sample's weight; a sample of weight 0 (an unlabelled env) pulls nothing."""
    student = nn.Linear(2, 2, bias=False)
    with torch.no_grad():
        student.weight.copy_(torch.eye(2))
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    labels = torch.tensor([[0.0, 0.0], [0.0, 5.0]])
    before = float(dagger_loss(student(x), labels, torch.tensor([1.0, 0.0])).detach())
    dagger_loss(student(x), labels, torch.tensor([1.0, 0.0])).backward()
    with torch.no_grad():
        student.weight -= 0.5 * student.weight.grad
    after = float(dagger_loss(student(x), labels, torch.tensor([1.0, 0.0])))
    assert after < before
    # the second sample (weight 0) left its row alone: column 1 of the weights is still the identity's
    assert torch.equal(student.weight[:, 1], torch.tensor([0.0, 1.0]))


def test_envs_no_teacher_labels_do_not_imitate_anything():
    """A teacher for half the envs: the other half's labels (zeros) are marked unused, and the DAgger loss
    is the labelled envs' alone, however many unlabelled envs the rollout has."""
    from llp.learn.configs import PPOConfig
    from llp.learn.ppo import PPO

    env = ScriptedExpertEnv(num_envs=6, start=3.0)
    dims = env.obs_dims()
    teacher = LinearTeacher(dims, [-2.0, -1.5])
    student = _student(dims)
    ro = RolloutCollector(env, student, None, 8, teachers=[Teacher(teacher, torch.tensor([0, 1, 2]))]).collect()
    assert ro.labelled.tolist() == [True, True, True, False, False, False]
    cfg = PPOConfig(rl_coef=0.0, dagger_coef=1.0, num_epochs=1, num_minibatches=1, learning_rate=0.0)
    with torch.no_grad():
        mean = student.flat(ro.stacked_frames().reshape(48, *ro.stacked_frames().shape[2:])).reshape(8, 6, 1)
    expected = ((mean - ro.teacher_actions)[:, :3] ** 2).mean()
    metrics = PPO(student, None, cfg).update(ro)
    assert abs(metrics["loss/dagger"] - float(expected)) < 1e-5
