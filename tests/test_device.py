"""Device-aware learning: the update stays on the learner's device, and checkpoints move between devices.

The guard records every op the update dispatches: reads of a value back to the host (``.item()``, ``float()``,
``bool()`` of a tensor, masks with data-dependent shapes), tensors made from host data, copies between devices,
and ops whose tensors sit on another device than the learner's. On the CPU (CI) only the first two kinds can
show; on a GPU (the device machine) every kind can. The update reads its metrics back once per learner part
(PPO, the AMP style reward, the discriminators, the NaN check), however many minibatches and epochs it has.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from llp.config.schema import build
from llp.learn.amp import AMP
from llp.learn.configs import ActorConfig, AMPConfig, CriticConfig, PPOConfig
from llp.learn.learner import Learner
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO
from llp.learn.rollout import RolloutCollector
from tests.toy_envs import Slider

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
READS = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default", "aten.item.default"}
MADE_FROM_HOST = {"aten.lift_fresh.default", "aten.lift_fresh_copy.default"}


class HostTraffic(TorchDispatchMode):
    """Counts what crosses between host and device (see the module doc), by op name."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device, self.seen = device, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        out = func(*args, **kwargs)
        outs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        if name in READS or name in MADE_FROM_HOST:
            self.seen.append(name)
        elif any(t.device != self.device for t in tensors + outs if t.dim() > 0):
            self.seen.append(f"{name} across devices")
        return out


def _learner(device: str, epochs: int, minibatches: int, schedule: str = "adaptive"):
    """A PPO + DAgger (group-balanced, on some envs) + AMP (on some envs) learner and a rollout for it."""
    torch.manual_seed(0)
    env = Slider(num_envs=8, horizon=10)
    dims = env.obs_dims()
    actor = Actor(build(ActorConfig, {"obs": ["policy/state"], "hidden_dims": [16], "num_frames": 2}), dims, 1)
    critic = Critic(build(CriticConfig, {"obs": ["policy/state"], "hidden_dims": [16]}), dims)
    ro = RolloutCollector(env, actor, critic, 8, amp_refs=("amp/features", "amp/progress")).collect()
    ro.teacher_actions = torch.zeros_like(ro.actions)
    ro.labelled = torch.arange(8) < 4
    cfg = build(
        PPOConfig,
        {"num_steps": 8, "num_epochs": epochs, "num_minibatches": minibatches, "schedule": schedule,
         "dagger_coef": 1.0, "balance_groups": True},
    )  # fmt: skip
    groups = torch.tensor([0, 0, 1, 1, -1, -1, -1, -1])
    actor, critic = actor.to(device), critic.to(device)
    ppo = PPO(actor, critic, cfg, env_groups=groups, rl_envs=torch.arange(8) >= 4)
    amp = AMP(build(AMPConfig, {"hidden_dims": [8], "triggers": [0.0]}), 2, [Slider.reference_transitions(64)] * 2,
              dt=0.1, envs=torch.arange(8) >= 4).to(device)  # fmt: skip
    return Learner(ppo, amp), ro


@pytest.mark.parametrize("device", DEVICES)
def test_an_update_reads_back_to_the_host_the_same_few_times_however_many_minibatches_it_has(device):
    counts = {}
    for epochs, minibatches in ((1, 1), (3, 4)):
        learner, ro = _learner(device, epochs, minibatches)
        ro = ro.to(device)  # the rollout arrives on the device (co-located) or is moved there once (decoupled)
        learner.update(ro)  # (the first update builds what it caches)
        with HostTraffic(torch.device(device)) as traffic:
            metrics = learner.update(ro)
        assert {"loss/surrogate", "loss/dagger", "amp/style_reward", "amp/phase1_loss"} <= set(metrics)
        counts[(epochs, minibatches)] = sorted(traffic.seen)
    # on the CPU nothing is read back through an op at all; on a GPU the metric reads are copies to the host
    assert counts[(1, 1)] == counts[(3, 4)]
    if device == "cpu":
        assert counts[(1, 1)] == []
    else:
        assert len(counts[(1, 1)]) <= 5, counts[(1, 1)]


def test_the_adaptive_rate_changes_on_the_device_and_the_optimiser_uses_it():
    learner, ro = _learner("cpu", 2, 2)
    ppo = learner.ppo
    ppo.set_learning_rate(1e-3)
    ppo._adapt_lr(torch.tensor(1.0))  # KL far above twice the target: /1.5
    assert ppo.learning_rate == pytest.approx(1e-3 / 1.5)
    ppo._adapt_lr(torch.tensor(1e-4))  # below half the target: x1.5
    assert ppo.learning_rate == pytest.approx(1e-3)
    ppo._adapt_lr(torch.tensor(0.01))  # in between: kept
    assert ppo.learning_rate == pytest.approx(1e-3)
    assert all(g["lr"] is ppo._lr for g in ppo.optimizer.param_groups)  # the optimiser reads that tensor
    before = {k: v.clone() for k, v in ppo.actor.state_dict().items()}
    ppo.set_learning_rate(0.0)
    learner.update(ro)
    assert all(torch.equal(before[k], v) for k, v in ppo.actor.state_dict().items() if "normalizer" not in k)


def test_a_learner_moves_to_a_device_with_its_optimiser_state_and_gives_cpu_weights(tmp_path):
    """``Learner.to`` after some learning: the same networks and Adam moments there; ``weights()`` (for the
    simulators) on the CPU; a checkpoint written on one device restores on another and continues alike."""
    device = DEVICES[-1]
    learner, ro = _learner("cpu", 2, 2, schedule="fixed")
    learner.update(ro)
    twin, _ = _learner("cpu", 2, 2, schedule="fixed")
    twin.load(learner.save(str(tmp_path / "before.pt"), 1, []))  # stays on the CPU
    learner.to(device)
    assert all(p.device.type == device for p in learner.actor.parameters())
    moments = [s["exp_avg"] for s in learner.ppo.optimizer.state.values()]
    assert moments and all(m.device.type == device for m in moments)
    assert all(v.device.type == "cpu" for v in learner.weights()["actor"].values())
    restored, _ = _learner("cpu", 2, 2, schedule="fixed")
    restored.load(learner.save(str(tmp_path / "moved.pt"), 1, []))  # written on `device`, read on the CPU
    results = []
    for one in (learner, restored, twin):
        torch.manual_seed(1)
        results.append(one.update(ro))
    for key in ("loss/surrogate", "loss/dagger", "loss/value", "policy/action_std"):
        for other in results[1:]:
            assert other[key] == pytest.approx(results[0][key], rel=1e-4, abs=1e-6), key
