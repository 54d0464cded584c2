"""On-policy data collection: the current policy acts, everything exact replay needs is recorded.

Works with any vectorised env whose ``step(actions)`` returns a result with
``obs``, ``reward``, ``terminated``, ``truncated``, ``final_obs`` and ``info``
(``llp.sim.env.ParkourEnv`` and the small test envs). With teachers attached,
each teacher labels the states the student actually visited, reading the
teacher's own observation terms at the same step (online DAgger); with several
teachers, each env is labelled by the teacher of its group.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llp.learn.models import Actor, Critic, gather, parse_refs
from llp.learn.storage import Rollout


@dataclass
class Teacher:
    """A frozen expert and the envs it labels."""

    actor: Actor
    env_ids: torch.Tensor  # [M] envs routed to this teacher
    action_offset: str = "default"  # what its actions offset (PolicySpec.action_offset); the env converts ...
    action_scale: float | None = None  # ... with this scale (None: the env's) ...
    action_joints: list[str] | None = None  # ... on these joints, the others at the default pose (None: the env's)
    proprio_layout: str | None = None  # the proprioception layout it reads (llp.sim.proprio; None: the env's)

    @property
    def meaning(self) -> tuple:
        """(offset, scale, joints, layout): what its actions and observations mean, as the envs' conversions take."""
        return self.action_offset, self.action_scale, self.action_joints, self.proprio_layout

    def foreign(self, env) -> bool:
        """Whether ``env`` must convert this teacher's observations and actions (another action meaning)."""
        own = getattr(env, "action_joint_names", None)
        joints = self.action_joints is not None and own is not None and list(self.action_joints) != list(own)
        scale = self.action_scale is not None and self.action_scale != getattr(env, "action_scale", self.action_scale)
        layout = self.proprio_layout not in (None, getattr(env, "proprio_layout", self.proprio_layout))
        return joints or scale or layout or self.action_offset != getattr(env, "action_offset", "default")


class EpisodeStats:
    """Running episode statistics reported by the env (returns, lengths, success).

    The env's arrays (numpy, or torch tensors on the env's device) are kept as they come and read once, in
    ``summary``: a device env's episodes cost no host copy per step.
    """

    FIELDS = {"return": "episode/return", "length": "episode/length", "terminated": "episode/fall_rate",
              "success": "episode/success_rate", "level": "episode/terrain_level",
              "start_step": "episode/start_step"}  # fmt: skip

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.chunks: dict[str, list] = {key: [] for key in self.FIELDS}

    def add(self, episode: dict) -> None:
        for key in self.FIELDS:
            if key in episode:
                self.chunks[key].append(episode[key])

    def _values(self, key: str) -> list[float]:
        out: list[float] = []
        for chunk in self.chunks[key]:
            if isinstance(chunk, torch.Tensor):
                chunk = chunk.detach().cpu().numpy()
            out += [float(x) for x in chunk]
        return out

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, name in self.FIELDS.items():
            values = self._values(key)
            if values:
                out[name] = sum(values) / len(values)
                if key == "return":
                    out["episode/count"] = float(len(values))
        return out


class RolloutCollector:
    """Steps an env with a policy for ``num_steps`` per call and returns a ``Rollout``."""

    def __init__(
        self,
        env,
        actor: Actor,
        critic: Critic | None,
        num_steps: int,
        *,
        teachers: list[Teacher] | None = None,
        stochastic: bool = True,
        reward_groups: list[list[str]] | None = None,
        amp_refs: tuple[str, str] | None = None,
        recon_ref: str | None = None,
        teacher_drives: float = 0.0,
    ):
        self.env, self.actor, self.critic = env, actor, critic
        self.num_steps = num_steps
        # where the env keeps its tensors (a device env: the GPU that simulates; the rollout stays there)
        self.device = torch.device(getattr(env, "device", "cpu"))
        self.teachers = teachers or []
        for teacher in self.teachers:  # experts label, they do not learn: eval mode, and no_grad in collect()
            if hasattr(teacher.actor, "eval"):
                teacher.actor.eval()
            if self.device.type != "cpu":  # beside the env: their labels are made where the states are
                teacher.actor.to(self.device)
                teacher.env_ids = teacher.env_ids.to(self.device)
        self.stochastic = stochastic
        self.reward_groups = reward_groups
        if reward_groups:
            names = list(env.reward_names)
            unknown = [n for g in reward_groups for n in g if n not in names]
            if unknown:
                raise ValueError(f"reward groups name unknown reward terms {unknown}; the env has {names}")
            self._group_matrix = torch.zeros(len(names), len(reward_groups))
            for j, group in enumerate(reward_groups):
                for name in group:
                    self._group_matrix[names.index(name), j] = 1.0
        self.amp_refs = parse_refs([amp_refs[0], amp_refs[1]]) if amp_refs else None
        self.recon_ref = parse_refs([recon_ref])[0] if recon_ref else None
        self.obs = env.reset()
        self.memory = actor.initial_memory(env.num_envs)
        self.teacher_memory = [t.actor.initial_memory(len(t.env_ids)) for t in self.teachers]
        self.stats = EpisodeStats()
        self.term_sums: dict[str, float] = {}
        self.term_count = 0
        self.end_counts: dict[str, int] = {}
        self.end_details: dict[str, int] = {}  # falls by where and how (an env's own breakdown), per episode ended
        self.label_error, self.label_steps = 0.0, 0
        if reward_groups:
            self._group_matrix = self._group_matrix.to(self.device)
        self._labelled = torch.zeros(env.num_envs, dtype=torch.bool, device=self.device)
        for teacher in self.teachers:
            self._labelled[teacher.env_ids] = True
        self._num_labelled = int(self._labelled.sum())  # (once: asked every step it would wait for a GPU)
        self._any_labelled = self._num_labelled > 0
        self.set_teacher_drives(teacher_drives)

    def set_teacher_drives(self, share: float) -> None:
        """From now on, ``share`` of the labelled envs' episodes are driven by their teacher (DAgger's beta):
        drawn afresh for every env now and at each of its resets."""
        self.teacher_drives = float(share)
        self._driven = torch.zeros(self.env.num_envs, dtype=torch.bool, device=self.device)
        self._draw_driven(torch.ones_like(self._driven))

    def _draw_driven(self, envs: torch.Tensor) -> None:
        if self.teacher_drives <= 0.0:  # (no draw at all: a student that always drives uses no random numbers)
            return
        draw = (torch.rand(self.env.num_envs, device=self.device) < self.teacher_drives) & self._labelled
        self._driven = torch.where(envs, draw, self._driven)

    def _values(self, obs) -> torch.Tensor:
        if self.critic is None:
            return torch.zeros(self.env.num_envs, 1, device=self.device)
        return self.critic(self.critic.observe(obs))

    def _group_rewards(self, result) -> torch.Tensor:
        """[N, H]: total reward, or one column per reward group (sums of named terms, weighted, times dt)."""
        if not self.reward_groups:
            return result.reward[:, None]
        per_term = result.info["weighted_terms"]  # [N, terms] in env.reward_names order
        return per_term @ self._group_matrix

    @torch.no_grad()
    def collect(self) -> Rollout:
        env, actor, T, N = self.env, self.actor, self.num_steps, self.env.num_envs
        A = actor.num_actions
        actor_obs, critic_obs, actions, log_probs, means, stds = [], [], [], [], [], []
        values, rewards, terminated, truncated, final_values = [], [], [], [], []
        frames, fresh, hidden, teacher_actions, recon, amp_obs, amp_next, progress = [], [], [], [], [], [], [], []
        for _ in range(T):
            obs = self.obs
            frame = actor.observe(obs)
            if self.memory.frames is not None:
                frames.append(self.memory.frames.clone())
                fresh.append(self.memory.fresh.clone())
            if self.memory.hidden is not None:
                hidden.append(self.memory.hidden.clone())
            mean, self.memory, _ = actor.step(frame, self.memory)
            dist = actor.dist(mean)
            action = dist.sample() if self.stochastic else mean
            log_probs.append(dist.log_prob(action))
            means.append(mean)
            stds.append(dist.std.expand_as(mean))
            if self.teachers:
                label = torch.zeros(N, A, device=self.device)
                for k, teacher in enumerate(self.teachers):
                    sub = {g: {t: v[teacher.env_ids] for t, v in terms.items()} for g, terms in obs.items()}
                    foreign = teacher.foreign(env)
                    meaning = teacher.meaning
                    if foreign:  # its own last action in its proprioception, its actions as this env's
                        sub = env.teacher_obs(sub, teacher.env_ids, *meaning)
                    t_mean, self.teacher_memory[k], _ = teacher.actor.step(
                        teacher.actor.observe(sub), self.teacher_memory[k]
                    )
                    if foreign:
                        t_mean = env.convert_actions(t_mean, teacher.env_ids, *meaning)
                    label[teacher.env_ids] = t_mean
                teacher_actions.append(label)
                if self._any_labelled:  # how far the acting student is from its labels (read at pop_metrics)
                    per_env = (mean - label).pow(2).mean(dim=1) * self._labelled
                    self.label_error = self.label_error + per_env.sum() / self._num_labelled
                    self.label_steps += 1
            if self.recon_ref is not None:
                recon.append(gather(obs, [self.recon_ref]))
            if self.amp_refs is not None:
                amp_obs.append(gather(obs, [self.amp_refs[0]]))
                progress.append(gather(obs, [self.amp_refs[1]])[:, 0])
            c_obs = self.critic.observe(obs) if self.critic is not None else frame
            value = self._values(obs)
            executed = action
            if self.teacher_drives > 0.0 and self.teachers:  # these episodes go where the teacher takes them
                executed = torch.where(self._driven[:, None], label, action)
            result = env.step(executed)
            done = result.terminated | result.truncated
            fv = torch.zeros_like(value)
            # (on a GPU every step: asking whether any env was truncated would wait for the device)
            if result.final_obs is not None and (self.device.type != "cpu" or bool(result.truncated.any())):
                fv = self._values(result.final_obs) * result.truncated[:, None].to(value.dtype)
            if self.amp_refs is not None:
                nxt = gather(result.obs, [self.amp_refs[0]])
                if result.final_obs is not None and bool(done.any()):
                    nxt = torch.where(done[:, None], gather(result.final_obs, [self.amp_refs[0]]), nxt)
                amp_next.append(nxt)
            actor_obs.append(frame)
            critic_obs.append(c_obs)
            actions.append(action)
            values.append(value)
            rewards.append(self._group_rewards(result))
            terminated.append(result.terminated.clone())
            truncated.append(result.truncated.clone())
            final_values.append(fv)
            if "episode" in result.info:
                self.stats.add(result.info["episode"])
            for name, v in result.info.get("reward_terms", {}).items():  # floats, or a device env's 0-d tensors
                self.term_sums[name] = self.term_sums.get(name, 0.0) + v
            for cause, count in result.info.get("ends", {}).items():  # episodes ended, by cause
                self.end_counts[cause] = self.end_counts.get(cause, 0) + int(count)
            for detail, count in result.info.get("end_details", {}).items():
                self.end_details[detail] = self.end_details.get(detail, 0) + int(count)
            self.term_count += 1
            self.memory = self.memory.reset(done)
            self._draw_driven(done)
            for k, teacher in enumerate(self.teachers):
                self.teacher_memory[k] = self.teacher_memory[k].reset(done[teacher.env_ids])
            self.obs = result.obs
        last_values = self._values(self.obs)
        stack = torch.stack
        return Rollout(
            actor_obs=stack(actor_obs),
            critic_obs=stack(critic_obs),
            actions=stack(actions),
            log_probs=stack(log_probs),
            means=stack(means),
            stds=stack(stds),
            values=stack(values),
            rewards=stack(rewards),
            terminated=stack(terminated),
            truncated=stack(truncated),
            final_values=stack(final_values),
            last_values=last_values,
            frames=stack(frames) if frames else None,
            fresh=stack(fresh) if fresh else None,
            hidden=stack(hidden) if hidden else None,
            teacher_actions=stack(teacher_actions) if teacher_actions else None,
            labelled=self._labelled.clone() if teacher_actions else None,
            recon_targets=stack(recon) if recon else None,
            amp_obs=stack(amp_obs) if amp_obs else None,
            amp_phase=stack(progress) if progress else None,
            extras={"amp_next": stack(amp_next)} if amp_next else {},
        )

    def pop_metrics(self) -> dict[str, float]:
        """Episode statistics and mean reward terms since the last call."""
        out = self.stats.summary()
        if self.term_count:
            out.update({f"reward_terms/{k}": float(v) / self.term_count for k, v in self.term_sums.items()})
        ended = sum(self.end_counts.values())
        if ended:
            out.update({f"episode_ends/{k}": v / ended for k, v in self.end_counts.items()})
            out.update({f"episode_ends/detail/{k}": v / ended for k, v in self.end_details.items()})
        if self.label_steps:  # mean squared error per joint between the student's action mean and its label
            out["dagger/label_error"] = float(self.label_error) / self.label_steps
        if self.teacher_drives > 0.0:
            out["dagger/teacher_drives"] = self.teacher_drives
        self.stats.clear()
        self.term_sums, self.term_count, self.end_counts, self.end_details = {}, 0, {}, {}
        self.label_error, self.label_steps = 0.0, 0
        return out
