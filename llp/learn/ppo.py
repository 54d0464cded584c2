"""PPO with an asymmetric critic, grouped advantages, online DAgger and scan reconstruction.

One update consumes one ``Rollout``:

* advantages by ``gae`` (time-outs bootstrap from the final state's value),
  normalised per reward group and combined with the configured weights;
* clipped surrogate, clipped value loss (mean over value heads), entropy bonus,
  adaptive learning rate on the KL between the rollout policy and the current one;
* ``loss = rl_coef * PPO + dagger_coef * DAgger + recon_coef * reconstruction``;
  ``rl_coef = 0`` is pure DAgger, ``dagger_coef = 0`` is pure PPO;
* recurrent actors are replayed window by window (``bptt_length`` steps) from
  the memory recorded before each window, so unchanged weights reproduce the
  rollout's log-probabilities exactly; a minibatch is a random subset of envs
  with all their windows (rsl_rl's recurrent minibatches: whole envs);
* it runs on the device of the networks it is given (``Learner.to``): the
  rollout, the minibatch indices, the learning rate (a tensor the optimiser
  reads) and the loss totals stay there, and the update reads values back to
  the host once, for its metrics, however many minibatches it has.

rsl_rl's PPO is not reused as a class: it bootstraps time-outs from V(s_t)
instead of the final state, has one value head, and its recurrent replay pads
trajectories at dones; the pieces it shares with us (MLP, normalisation,
Gaussian distribution) come from rsl_rl.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from llp.learn import distributed
from llp.learn.configs import PPOConfig
from llp.learn.dagger import dagger_loss, sample_weights
from llp.learn.gae import combine_advantages, gae
from llp.learn.host import read_back
from llp.learn.memory import Memory
from llp.learn.models import Actor, Critic
from llp.learn.storage import Rollout


class PPO:
    """The learner: owns actor, critic and optimiser; ``update(rollout)`` does one iteration's learning."""

    def __init__(
        self,
        actor: Actor,
        critic: Critic | None,
        cfg: PPOConfig,
        env_groups: torch.Tensor | None = None,
        rl_envs: torch.Tensor | None = None,
    ):
        self.actor, self.critic, self.cfg = actor, critic, cfg
        self.device = next(actor.parameters()).device
        params = list(actor.parameters()) + (list(critic.parameters()) if critic is not None else [])
        # the rate is a tensor on the device, so that the adaptive schedule changes it without a host read; fused
        # Adam (one kernel per step, on the CPU too) reads it there and keeps its step counts there (float32 on a
        # GPU; float64 on the CPU keeps configured rates exact in the metrics)
        dtype = torch.float32 if self.device.type == "cuda" else torch.float64
        self._lr = torch.tensor(cfg.learning_rate, dtype=dtype, device=self.device)
        self.optimizer = torch.optim.Adam(params, lr=self._lr, fused=True)
        self._parameters = params
        self.env_groups = None if env_groups is None else env_groups.to(self.device)  # [N] expert group (DAgger)
        # [N] bool: the envs PPO's loss covers (None: all; the others learn from labels)
        self.rl_envs = None if rl_envs is None else rl_envs.to(self.device)
        self.num_groups = None if env_groups is None else int(env_groups.max()) + 2  # ids from -1 (no teacher)
        self._stacked: torch.Tensor | None = None
        self.weights = torch.tensor(cfg.advantage_weights, dtype=torch.float32, device=self.device)
        if critic is not None and critic.cfg.num_heads != len(cfg.advantage_weights):
            raise ValueError(
                f"critic has {critic.cfg.num_heads} value heads but advantage_weights has "
                f"{len(cfg.advantage_weights)} entries"
            )

    # ------------------------------------------------------------------ batches
    def _minibatches(self, ro: Rollout):
        """Yield index sets: (time, env) flat indices for feed-forward actors, env subsets x windows otherwise.

        Every sample (or window) lands in exactly one minibatch per epoch; sizes differ by at most one when
        the count does not divide by ``num_minibatches``.
        """
        T, N = ro.num_steps, ro.num_envs
        if not self.actor.is_recurrent:
            for chunk in torch.tensor_split(torch.randperm(T * N, device=self.device), self.cfg.num_minibatches):
                yield ("flat", chunk)
        else:  # a subset of envs, each with every window of the rollout
            for chunk in torch.tensor_split(torch.randperm(N, device=self.device), self.cfg.num_minibatches):
                yield ("windows", chunk)

    def check_rollout(self, ro: Rollout) -> None:
        """Refuse a rollout this learner cannot split: a clear error instead of dropped or empty minibatches."""
        cfg = self.cfg
        if self.actor.is_recurrent:
            if ro.num_steps % cfg.window:
                raise ValueError(
                    f"rollout of {ro.num_steps} steps does not split into BPTT windows of {cfg.window} steps "
                    "(bptt_length must divide num_steps)"
                )
            units, what = ro.num_envs, "envs (a recurrent minibatch takes whole envs)"
        else:
            units, what = ro.num_steps * ro.num_envs, "samples"
        if units < cfg.num_minibatches:
            raise ValueError(
                f"num_minibatches={cfg.num_minibatches} but the rollout has only {units} {what} "
                f"({ro.num_steps} steps x {ro.num_envs} envs): a minibatch would be empty"
            )

    def evaluate(self, ro: Rollout, batch) -> dict[str, torch.Tensor]:
        """Re-run the actor (and critic) on a minibatch; returns flat tensors over its samples."""
        kind, idx = batch
        N = ro.num_envs
        out: dict[str, torch.Tensor] = {}
        if kind == "flat":
            t, e = idx // N, idx % N
            stacked = self._stacked[t, e]
            out["mean"] = self.actor.flat(stacked)
            out["t"], out["e"] = t, e
        else:  # idx: envs; each window replayed from the memory recorded before it
            L, envs = self.cfg.window, idx
            means, latents, ts, es = [], [], [], []
            for s in range(0, ro.num_steps, L):
                memory = ro.memory_at(s, envs)
                mean, latent = self.actor.sequence(ro.actor_obs[s : s + L, envs], memory, ro.dones[s : s + L, envs])
                means.append(mean.reshape(-1, mean.shape[-1]))
                if latent is not None:
                    latents.append(latent.reshape(-1, latent.shape[-1]))
                tt = torch.arange(s, s + L, device=envs.device)[:, None].expand(L, len(envs)).reshape(-1)
                ts.append(tt)
                es.append(envs[None, :].expand(L, len(envs)).reshape(-1))
            out["mean"] = torch.cat(means)
            if latents:
                out["latent"] = torch.cat(latents)
            out["t"], out["e"] = torch.cat(ts), torch.cat(es)
        if self.critic is not None:
            out["values"] = self.critic(ro.critic_obs[out["t"], out["e"]])
        return out

    # ------------------------------------------------------------------ update
    def update(self, ro: Rollout, extra_rewards: torch.Tensor | None = None) -> dict[str, float]:
        """One iteration of learning on ``ro``; ``extra_rewards`` [T, N, H] (e.g. AMP style) join the rewards
        before GAE."""
        cfg = self.cfg
        self.check_rollout(ro)
        rewards = ro.rewards if extra_rewards is None else ro.rewards + extra_rewards
        advantages, returns = self.advantages(ro, extra_rewards)
        # the stacked input of every step, built once per update rather than once per minibatch
        self._stacked = None if self.actor.is_recurrent else ro.stacked_frames()
        groups = None
        if self.env_groups is not None:
            groups = self.env_groups[None, :].expand(ro.num_steps, -1)
        totals: dict[str, torch.Tensor] = {}  # summed on the device, read once at the end
        count = 0
        for _ in range(cfg.num_epochs):
            for batch in self._minibatches(ro):
                ev = self.evaluate(ro, batch)
                t, e = ev["t"], ev["e"]
                losses = self._losses(ro, ev, t, e, advantages, returns, groups)
                loss = losses.pop("loss")
                self.optimizer.zero_grad()
                loss.backward()
                distributed.average_gradients(self._parameters)  # data-parallel learners: one step for all
                nn.utils.clip_grad_norm_(self.actor.parameters(), cfg.max_grad_norm)
                if self.critic is not None:
                    nn.utils.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for k, v in losses.items():
                    totals[k] = totals[k] + v if k in totals else v
                count += 1
        self.actor.update_normalization(ro.actor_obs.reshape(-1, ro.actor_obs.shape[-1]))
        if self.critic is not None:
            self.critic.update_normalization(ro.critic_obs.reshape(-1, ro.critic_obs.shape[-1]))
        values = {f"loss/{k}": v / max(count, 1) for k, v in totals.items()}
        values["policy/learning_rate"] = self._lr
        values["policy/action_std"] = self.actor.std.detach().mean()
        values["policy/mean_reward_per_step"] = rewards.sum(-1).mean()
        return read_back(values)

    def advantages(self, ro: Rollout, extra_rewards: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(advantages [T, N], normalised per reward group and combined; returns [T, N, H]) of a rollout."""
        rewards = ro.rewards if extra_rewards is None else ro.rewards + extra_rewards
        adv, returns = gae(
            rewards,
            ro.values,
            ro.last_values,
            ro.terminated,
            ro.truncated,
            ro.final_values,
            self.cfg.gamma,
            self.cfg.lam,
        )
        return combine_advantages(adv, self.weights, mask=self.rl_envs), returns

    def _losses(self, ro, ev, t, e, advantages, returns, groups) -> dict[str, torch.Tensor]:
        cfg = self.cfg
        mean = ev["mean"]
        dist = self.actor.dist(mean)
        out: dict[str, torch.Tensor] = {}
        loss = torch.zeros((), device=mean.device)
        if cfg.rl_coef > 0:
            # the mean over the samples PPO covers (every sample, or the envs of the groups that learn by RL)
            m = None if self.rl_envs is None else self.rl_envs[e].to(mean.dtype)

            def average(x):
                return x.mean() if m is None else (x * m).sum() / m.sum().clamp_min(1.0)

            log_prob = dist.log_prob(ro.actions[t, e])
            entropy = dist.entropy.mean()
            old_mean, old_std = ro.means[t, e], ro.stds[t, e]
            with torch.no_grad():
                kl = average(_gaussian_kl(old_mean, old_std, mean, dist.std))
                self._adapt_lr(distributed.mean_tensor(kl))
            ratio = torch.exp(log_prob - ro.log_probs[t, e])
            adv = advantages[t, e]
            surrogate = average(torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip, 1 + cfg.clip)))
            loss = loss + cfg.rl_coef * (surrogate - cfg.entropy_coef * entropy)
            out.update(
                surrogate=surrogate.detach(),
                entropy=entropy.detach(),
                kl=kl,
                ratio_deviation=average((ratio - 1).abs()).detach(),
            )
        if self.critic is not None:
            # in a pure-DAgger stage (rl_coef 0) a critic still learns the student's returns: RL fine-tuning
            # then starts from a fitted value function rather than a random one
            values, old_values, ret = ev["values"], ro.values[t, e], returns[t, e]
            clipped = old_values + (values - old_values).clamp(-cfg.clip, cfg.clip)
            value_loss = torch.max((values - ret) ** 2, (clipped - ret) ** 2).mean()
            loss = loss + (cfg.rl_coef if cfg.rl_coef > 0 else 1.0) * cfg.value_coef * value_loss
            out["value"] = value_loss.detach()
        if cfg.dagger_coef > 0:
            if ro.teacher_actions is None:
                raise ValueError("dagger_coef > 0 but the rollout has no teacher labels (attach teachers)")
            g = None if groups is None else groups[t, e]
            w = sample_weights(g, len(t), cfg.balance_groups, self.num_groups, mean.device)
            if ro.labelled is not None:  # envs no teacher labels (another group's) do not imitate anything
                w = w * ro.labelled[e].to(w.dtype)
                w = w / w.sum().clamp_min(1e-12)
            d = dagger_loss(mean, ro.teacher_actions[t, e], w)
            loss = loss + cfg.dagger_coef * d
            out["dagger"] = d.detach()
        if cfg.recon_coef > 0:
            if "latent" not in ev or ro.recon_targets is None:
                raise ValueError("recon_coef > 0 needs a recurrent actor with a decoder and reconstruction targets")
            pred = self.actor.reconstruct(ev["latent"])
            r = ((pred - ro.recon_targets[t, e]) ** 2).mean()
            loss = loss + cfg.recon_coef * r
            out["reconstruction"] = r.detach()
        out["loss"] = loss
        return out

    def _adapt_lr(self, kl: torch.Tensor) -> None:
        """rsl_rl's KL-adaptive schedule, on the device: /1.5 above twice the target, x1.5 below half of it."""
        cfg = self.cfg
        if cfg.schedule != "adaptive":
            return
        lr, target = self._lr, cfg.desired_kl
        lowered, raised = torch.clamp(lr / 1.5, min=1e-5), torch.clamp(lr * 1.5, max=1e-2)
        self._lr.copy_(torch.where(kl > target * 2.0, lowered, torch.where((kl > 0) & (kl < target / 2.0), raised, lr)))

    def set_rule(self, cfg: PPOConfig, fresh_learning_rate: bool) -> None:
        """Learn on under ``cfg`` (a stage's next phase: DAgger, then RL); the learning rate restarts at the
        rule's own unless it is a resumed phase's (restored from its checkpoint)."""
        if len(cfg.advantage_weights) != len(self.cfg.advantage_weights):
            raise ValueError("a new learning rule must keep the number of reward groups")
        self.cfg = cfg
        if fresh_learning_rate:
            self.set_learning_rate(cfg.learning_rate)

    @property
    def learning_rate(self) -> float:
        return float(self._lr)

    @learning_rate.setter
    def learning_rate(self, lr: float) -> None:
        self.set_learning_rate(lr)

    def set_learning_rate(self, lr: float) -> None:
        """Set the rate; every parameter group reads the one rate tensor again (also after an optimiser state
        was loaded, which brings its own)."""
        self._lr.fill_(float(lr))
        for group in self.optimizer.param_groups:
            group["lr"] = self._lr

    # ------------------------------------------------------------------ replay check
    @torch.no_grad()
    def replay_log_probs(self, ro: Rollout) -> torch.Tensor:
        """Log-probabilities of the rollout's actions recomputed by replay, [T, N] (diagnostic and tests)."""
        T, N = ro.num_steps, ro.num_envs
        out = torch.zeros(T, N, device=ro.actions.device)
        if not self.actor.is_recurrent:
            stacked = ro.stacked_frames()
            mean = self.actor.flat(stacked.reshape(T * N, *stacked.shape[2:]))
            return self.actor.dist(mean).log_prob(ro.actions.reshape(T * N, -1)).reshape(T, N)
        L = self.cfg.window
        envs = torch.arange(N, device=ro.actions.device)
        for s in range(0, T, L):
            memory: Memory = ro.memory_at(s, envs)
            mean, _ = self.actor.sequence(ro.actor_obs[s : s + L], memory, ro.dones[s : s + L])
            out[s : s + L] = self.actor.dist(mean).log_prob(ro.actions[s : s + L])
        return out


def _gaussian_kl(mean0: torch.Tensor, std0: torch.Tensor, mean1: torch.Tensor, std1: torch.Tensor) -> torch.Tensor:
    """KL(N(mean0, std0) || N(mean1, std1)) summed over the last axis (torch.distributions' formula, without its
    argument checks, which read values back to the host)."""
    var_ratio = (std0 / std1).pow(2)
    t1 = ((mean0 - mean1) / std1).pow(2)
    return (0.5 * (var_ratio + t1 - 1 - var_ratio.log())).sum(-1)
