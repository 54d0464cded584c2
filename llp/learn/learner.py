"""The one learner every stage uses, and the one way to build its data collection.

``Learner.update(rollout)`` is a training iteration's learning: the AMP style
reward (if any) joins the rewards before GAE, PPO / DAgger / reconstruction
update the networks, the discriminators train. The same object runs in the
learner actor (decoupled layout), in the co-located actor and in plain loops.
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch

from llp.learn import distributed
from llp.learn.amp import AMP
from llp.learn.checkpoint import load_checkpoint, save_checkpoint
from llp.learn.host import read_back
from llp.learn.models import Actor, Critic, parse_refs, term_width
from llp.learn.ppo import PPO
from llp.learn.rollout import RolloutCollector, Teacher
from llp.learn.spec import TrainSpec
from llp.learn.storage import Rollout


class NonFiniteTraining(RuntimeError):
    """Updates kept producing NaN or Inf: the stage stops (its last checkpoint is intact)."""


class Learner:
    """PPO (with its DAgger and reconstruction terms) plus optional AMP.

    An update that leaves a NaN or an Inf in a loss or in any parameter is undone (the networks, optimiser
    and discriminators go back to their state before it), the learning rate is lowered by
    ``ppo.nonfinite_lr_factor``, and the event is counted in the metrics (``faults/nonfinite_updates``);
    ``ppo.max_nonfinite_updates`` of them in a row raise ``NonFiniteTraining``."""

    def __init__(self, ppo: PPO, amp: AMP | None = None):
        self.ppo, self.amp = ppo, amp
        self.nonfinite_updates = 0  # in all
        self.nonfinite_streak = 0  # in a row
        self.poison_next = 0  # chaos drills: that many coming updates see a NaN reward (inject_nonfinite)

    @property
    def actor(self) -> Actor:
        return self.ppo.actor

    @property
    def device(self) -> torch.device:
        return self.ppo.device

    def update(self, rollout: Rollout) -> dict[str, float]:
        before = self._state()
        if self.poison_next > 0:
            self.poison_next -= 1
            rollout.rewards = rollout.rewards.clone()
            rollout.rewards[0, 0, 0] = float("nan")
        metrics = self._update(rollout.to(self.device))
        bad = sorted(k for k, v in metrics.items() if not math.isfinite(v)) + self._nonfinite_parameters()
        if distributed.any_true(bool(bad), self.device) and not bad:  # another data-parallel learner's update went bad
            bad = ["another learner's update"]
        if not bad:
            self.nonfinite_streak = 0
            metrics["faults/nonfinite_updates"] = float(self.nonfinite_updates)
            return metrics
        self._restore(before)
        self.nonfinite_updates += 1
        self.nonfinite_streak += 1
        lowered = self.ppo.learning_rate * self.ppo.cfg.nonfinite_lr_factor
        self.ppo.set_learning_rate(lowered)
        if self.nonfinite_streak >= self.ppo.cfg.max_nonfinite_updates:
            raise NonFiniteTraining(
                f"{self.nonfinite_streak} updates in a row left NaN or Inf in {', '.join(bad[:5])}; each was undone "
                f"and the learning rate lowered to {lowered:.2e}. The networks are as after the last good update; "
                f"the stage's last checkpoint is intact"
            )
        return {
            "faults/nonfinite_updates": float(self.nonfinite_updates),
            "policy/learning_rate": lowered,
        }

    def _state(self) -> dict:
        return copy.deepcopy(
            {
                "actor": self.ppo.actor.state_dict(),
                "critic": None if self.ppo.critic is None else self.ppo.critic.state_dict(),
                "optimizer": self.ppo.optimizer.state_dict(),
                "amp": None if self.amp is None else self.amp.state_dict(),
            }
        )

    def _restore(self, state: dict) -> None:
        self.ppo.actor.load_state_dict(state["actor"])
        if self.ppo.critic is not None:
            self.ppo.critic.load_state_dict(state["critic"])
        self.ppo.optimizer.load_state_dict(state["optimizer"])
        if self.amp is not None:
            self.amp.load_state_dict(state["amp"])

    def _nonfinite_parameters(self) -> list[str]:
        """The names of the floating-point tensors holding a NaN or an Inf (one read back to the host)."""
        modules = {"actor": self.ppo.actor, "critic": self.ppo.critic}
        if self.amp is not None:
            modules["amp"] = self.amp
        names, finite = [], []
        for prefix, module in modules.items():
            if module is None or not hasattr(module, "state_dict"):
                continue
            for name, value in module.state_dict().items():
                if torch.is_tensor(value) and value.is_floating_point():
                    names.append(f"{prefix}.{name}")
                    finite.append(torch.isfinite(value).all())
        if not finite:
            return []
        flags = torch.stack(finite).cpu().tolist()
        return [n for n, ok in zip(names, flags) if not ok]

    def _update(self, rollout: Rollout) -> dict[str, float]:
        extra = None
        metrics: dict[str, float] = {}
        if self.amp is not None:
            extra = self.amp.extra_rewards(rollout, rollout.rewards.shape[-1])
            with torch.no_grad():  # what the style reward did to the advantages (diagnostic)
                with_style, _ = self.ppo.advantages(rollout, extra)
                without, _ = self.ppo.advantages(rollout, None)
            style = extra[..., self.amp.cfg.reward_group]
            style = style if self.amp.env_index is None else style[:, self.amp.env_index]  # the envs it covers
            metrics = read_back(
                {
                    "amp/advantage_change": (with_style - without).abs().mean(),
                    "amp/style_reward": style.mean() / (self.amp.cfg.style_coef * self.amp.dt),
                }
            )
        metrics.update(self.ppo.update(rollout, extra_rewards=extra))
        if self.amp is not None:
            metrics.update(self.amp.update(rollout))
        return metrics

    def weights(self) -> dict:
        """The networks' weights on the CPU (for the simulators, wherever the learner runs)."""
        return {
            "actor": _on_cpu(self.ppo.actor.state_dict()),
            "critic": None if self.ppo.critic is None else _on_cpu(self.ppo.critic.state_dict()),
        }

    def to(self, device: str | torch.device) -> Learner:
        """Networks, optimiser state, discriminators and the PPO's per-env tensors on ``device``; a new
        learner's, or one restored from a checkpoint (either device's)."""
        device = torch.device(device)
        state = self.ppo.optimizer.state_dict()
        self.ppo.actor.to(device)
        if self.ppo.critic is not None:
            self.ppo.critic.to(device)
        ppo = PPO(self.ppo.actor, self.ppo.critic, self.ppo.cfg, None, self.ppo.rl_envs)
        ppo.env_groups, ppo.num_groups = _moved(self.ppo.env_groups, device), self.ppo.num_groups
        ppo.optimizer.load_state_dict(state)
        ppo.set_learning_rate(self.ppo.learning_rate)
        self.ppo = ppo
        if self.amp is not None:
            self.amp.to(device)
            amp_state = self.amp.optimizer.state_dict()
            params = self.amp.discriminators.parameters()
            self.amp.optimizer = torch.optim.Adam(params, lr=self.amp.cfg.learning_rate, fused=True)
            self.amp.optimizer.load_state_dict(amp_state)
        return self

    def save(self, path: str, iteration: int, history: list) -> str:
        return str(save_checkpoint(path, self.ppo, iteration, amp=self.amp, history=history))

    def load(self, path: str) -> dict:
        state = load_checkpoint(path, self.ppo, amp=self.amp)
        return {"iteration": state["iteration"], "history": state["history"]}


def _on_cpu(state: dict) -> dict:
    return {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in state.items()}


def _moved(t: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
    return None if t is None else t.to(device)


def build_networks(spec: TrainSpec, obs_dims: dict, num_actions: int) -> tuple[Actor, Critic | None]:
    actor = Actor(spec.actor, obs_dims, num_actions)
    critic = Critic(spec.critic, obs_dims) if spec.critic is not None else None
    return actor, critic


def build_learner(
    spec: TrainSpec,
    obs_dims: dict,
    num_actions: int,
    env_groups: torch.Tensor | None,
    rl_envs: torch.Tensor | None = None,
    amp_envs: torch.Tensor | None = None,
    device: str | torch.device = "cpu",
) -> Learner:
    """The learner for ``spec`` on envs with observation widths ``obs_dims``; ``env_groups`` [N] is the teacher
    group of every env the learner will see (for balanced DAgger weights), ``rl_envs`` [N] the envs PPO's loss
    covers and ``amp_envs`` [N] those the AMP prior covers (None: all); the learner works on ``device``."""
    actor, critic = build_networks(spec, obs_dims, num_actions)
    actor.to(device)
    if critic is not None:
        critic.to(device)
    ppo = PPO(actor, critic, spec.ppo, env_groups=env_groups if spec.ppo.balance_groups else None, rl_envs=rl_envs)
    amp = None
    if spec.amp is not None:
        width = term_width(obs_dims, parse_refs([spec.amp.features]))
        amp = AMP(spec.amp.cfg, width, spec.amp.references, dt=spec.env.policy_dt, envs=amp_envs).to(device)
    return Learner(ppo, amp)


def teacher_groups(spec: TrainSpec, columns: np.ndarray) -> torch.Tensor:
    """[N] index of the teacher labelling each env (by its tile type, or in a tracking env by its lane; -1: none),
    for envs on tile (lane) ``columns``."""
    groups = torch.full((len(columns),), -1, dtype=torch.long)
    if not spec.teachers:
        return groups
    terrain = hasattr(spec.env, "terrain")
    types = spec.env.terrain.tile_types if terrain else [lane.reference_id for lane in spec.env.references()]
    for k, teacher in enumerate(spec.teachers):
        wanted = set((teacher.tile_types if terrain else teacher.lanes) or types)
        mine = torch.tensor([types[c] in wanted and groups[i] < 0 for i, c in enumerate(columns)], dtype=torch.bool)
        groups[mine] = k
    return groups


def build_collector(env, spec: TrainSpec, actor: Actor, critic: Critic | None) -> RolloutCollector:
    """The rollout collector of a simulator: teachers loaded and routed to their env groups, reward groups,
    AMP features and progress, reconstruction targets."""
    groups = teacher_groups(spec, env.course_state()["column"])
    teachers = [
        Teacher(
            t.policy.load(),
            torch.nonzero(groups == k)[:, 0],
            t.policy.spec.get("action_offset", "default"),
            t.policy.spec.get("action_scale"),
            t.policy.spec.get("action_joints"),
            t.policy.spec.get("proprio_layout"),
        )
        for k, t in enumerate(spec.teachers)
    ]
    return RolloutCollector(
        env,
        actor,
        critic,
        spec.ppo.num_steps,
        teachers=[t for t in teachers if len(t.env_ids)],
        reward_groups=spec.reward_groups,
        amp_refs=(spec.amp.features, spec.amp.progress) if spec.amp is not None else None,
        recon_ref=spec.actor.reconstruct,
        teacher_drives=spec.ppo.teacher_drives,
    )


def iteration_metrics(learn: dict, sim: dict, steps: int, collect_s: float, update_s: float) -> dict[str, float]:
    """One iteration's metrics, the same in every layout."""
    metrics = {**learn, **sim}
    metrics["perf/collect_s"] = collect_s
    metrics["perf/update_s"] = update_s
    metrics["perf/env_steps_per_s"] = steps / max(collect_s + update_s, 1e-9)
    metrics["perf/env_steps"] = float(steps)
    return metrics


def train_iteration(collector: RolloutCollector, learner: Learner) -> dict[str, float]:
    """One iteration in one process (co-located layout and plain loops)."""
    t0 = time.perf_counter()
    rollout = collector.collect()
    t1 = time.perf_counter()
    learn = learner.update(rollout)
    t2 = time.perf_counter()
    return iteration_metrics(learn, collector.pop_metrics(), rollout.num_steps * rollout.num_envs, t1 - t0, t2 - t1)


def train(
    collector: RolloutCollector,
    learner: Learner,
    iterations: int,
    *,
    start_iteration: int = 0,
    callback=None,
) -> list[dict[str, float]]:
    """Run iterations ``start_iteration .. iterations-1`` in this process; returns the metrics of each."""
    history = []
    for it in range(start_iteration, iterations):
        metrics = train_iteration(collector, learner)
        metrics["iteration"] = float(it)
        history.append(metrics)
        if callback is not None:
            callback(it, metrics)
    return history
