"""`llp bench learner`: PPO update throughput for the paper-size networks, on the CPU or a GPU (``--device``).

Synthetic rollouts of the real observation sizes (``--num-envs``, 64 by default, x 24 steps), made on the
device the learner runs on: the
locomotion teacher (MLP [512, 256, 128] over 5 stacked frames of proprioception,
command and the 187-point scan; privileged critic of the same size) and the
depth student (MLP encoder [512, 256] over a 64x36 depth image plus
proprioception -> GRU 256 -> MLP [512, 256, 128], with the scan-reconstruction
decoder). samples_per_s counts every sample once per epoch it is trained on.
"""

from __future__ import annotations

import time

import torch

from llp.config.schema import build
from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
from llp.learn.models import Actor, Critic
from llp.learn.ppo import PPO
from llp.learn.storage import Rollout


def _rollout(actor: Actor, critic: Critic, T: int, N: int, recon: int | None, device: str) -> Rollout:
    A = actor.num_actions
    obs = torch.randn(T, N, actor.obs_dim)
    frames = fresh = hidden = None
    if actor.num_frames > 1:
        frames = torch.randn(T, N, actor.num_frames - 1, actor.obs_dim)
        fresh = torch.zeros(T, N, dtype=torch.bool)
    if actor.is_recurrent:
        hidden = torch.zeros(T, actor.cfg.gru_layers, N, actor.cfg.gru_hidden)
    mean = torch.zeros(T, N, A)
    std = torch.ones(T, N, A)
    actions = torch.randn(T, N, A)
    log_probs = torch.distributions.Normal(mean, std).log_prob(actions).sum(-1)
    dones = torch.rand(T, N) < 0.02
    return Rollout(
        actor_obs=obs,
        critic_obs=torch.randn(T, N, critic.obs_dim),
        actions=actions,
        log_probs=log_probs,
        means=mean,
        stds=std,
        values=torch.zeros(T, N, 1),
        rewards=torch.randn(T, N, 1),
        terminated=dones,
        truncated=torch.zeros(T, N, dtype=torch.bool),
        final_values=torch.zeros(T, N, 1),
        last_values=torch.zeros(N, 1),
        frames=frames,
        fresh=fresh,
        hidden=hidden,
        recon_targets=torch.randn(T, N, recon) if recon else None,
    ).to(device)


def _measure(
    actor_cfg: dict, critic_cfg: dict, dims: dict, ppo_cfg: dict, recon: int | None, repeats: int, device: str, n: int
) -> float:
    torch.manual_seed(0)
    actor = Actor(build(ActorConfig, actor_cfg), dims, 21).to(device)
    critic = Critic(build(CriticConfig, critic_cfg), dims).to(device)
    cfg = build(PPOConfig, ppo_cfg)
    ppo = PPO(actor, critic, cfg)
    ro = _rollout(actor, critic, cfg.num_steps, n, recon, device)
    ppo.update(ro)  # warm-up
    _wait(device)
    t0 = time.perf_counter()
    for _ in range(repeats):
        ppo.update(ro)
    _wait(device)
    elapsed = time.perf_counter() - t0
    return repeats * cfg.num_steps * n * cfg.num_epochs / elapsed


def _wait(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def run(repeats: int = 3, threads: int = 1, device: str = "cpu", num_envs: int = 64) -> dict:
    kind = device.split(":")[0]
    if kind not in ("cpu", "cuda") or (kind == "cuda" and not torch.cuda.is_available()):
        raise ValueError(f"--device {device}: choose cpu, or cuda where torch sees a GPU (it sees none here)")
    torch.set_num_threads(threads)
    dims = {
        "policy": {"proprio": 69, "command": 3, "height_scan": 187, "depth": 64 * 36},
        "critic": {"proprio": 69, "command": 3, "height_scan": 187, "privileged": 11},
    }
    critic = {
        "obs": ["critic/proprio", "critic/command", "critic/height_scan", "critic/privileged"],
        "hidden_dims": [512, 256, 128],
    }
    teacher = _measure(
        {
            "obs": ["policy/proprio", "policy/command", "policy/height_scan"],
            "num_frames": 5,
            "hidden_dims": [512, 256, 128],
        },
        critic,
        dims,
        {"num_steps": 24},
        None,
        repeats,
        device,
        num_envs,
    )
    student = _measure(
        {
            "obs": ["policy/depth", "policy/proprio", "policy/command"],
            "encoder_dims": [512, 256],
            "gru_hidden": 256,
            "hidden_dims": [512, 256, 128],
            "reconstruct": "critic/height_scan",
        },
        critic,
        dims,
        {"num_steps": 24, "bptt_length": 24, "recon_coef": 1.0},
        187,
        repeats,
        device,
        num_envs,
    )
    return {
        "device": str(torch.device(device)),
        "threads": threads,
        "num_envs": num_envs,
        "num_steps": 24,
        "epochs": 5,
        "minibatches": 4,
        "teacher_mlp": "5 x 259 -> [512, 256, 128] -> 21",
        "samples_per_s": round(teacher, 1),
        "student_gru": "(2304 + 72) -> [512, 256] -> GRU 256 -> [512, 256, 128] -> 21, decoder -> 187",
        "gru_student_samples_per_s": round(student, 1),
    }
