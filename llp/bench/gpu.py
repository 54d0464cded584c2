"""`llp bench gpu`: the co-located GPU layout's figures (issue 12), in one run on the device machine.

For each env count, on the locomotion terrain (the teacher's task, ``sim.backend: warp``):

  env_policy_steps_per_s       the full device env (``DeviceParkourEnv``: physics, proprioception, command,
                               187-point height scan, foot rays, every reward and termination term, resets)
  physics_policy_steps_per_s   MuJoCo Warp alone on the same worlds (``decimation`` steps per policy step)
  colocated_env_steps_per_s    whole training iterations of the teacher (24 steps of every env with the
                               actor and critic, then PPO's 5 epochs x 4 minibatches), collector and learner
                               on the same device, rollouts never copied to the host

and, once, the PPO update of the teacher network (``llp bench learner``'s measure) at the largest count, and
at the smallest count the same task computed on the host (``ParkourEnv`` on the same Warp device, reading the
state back each step): ``device_over_host_task`` is what keeping the task on the device gains.
Wall clock, with the device synchronised at both ends of each timed block; the two env measures alternate
in blocks so that drift hits both alike. The same code runs on the CPU at small counts (CI), where Warp's CPU
kernels make it a test, not a figure.
"""

from __future__ import annotations

import time

import torch

# issue 12's targets (the Isaac Lab + rsl_rl anchor: about 330k env steps/s for a humanoid on one RTX 4090)
TARGETS = {
    "env_policy_steps_per_s_at_16k": 500_000,
    "env_over_physics": 0.6,
    "ppo_update_samples_per_s": 1_000_000,
    "colocated_env_steps_per_s": 300_000,
}
NUM_STEPS = 24  # the teacher's PPO settings (conf/pipeline.yaml, locomotion_teacher)
ACTOR = {"obs": ["policy/proprio", "policy/command", "policy/height_scan", "policy/gait_clock"], "num_frames": 5,
         "hidden_dims": [512, 256, 128], "init_std": 0.5}  # fmt: skip
CRITIC = {"obs": ["critic/proprio", "critic/command", "critic/height_scan", "critic/privileged", "critic/gait_clock"],
          "hidden_dims": [512, 256, 128]}  # fmt: skip


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _env(num_envs: int, device: str, seed: int, on_device: bool = True):
    from llp.sim.backend import simulating_on
    from llp.sim.device_env import DeviceParkourEnv
    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    with simulating_on("warp", device):
        cfg = env_config(overrides={"robot": {"policy_joints": [".*(hip|knee|ankle).*"]}})
    return (DeviceParkourEnv if on_device else ParkourEnv)(cfg, num_envs, seed=seed)


def host_task(num_envs: int, device: str, steps: int, seed: int) -> float:
    """Policy steps/s of ``ParkourEnv`` on the same Warp device: physics there, the task in numpy on the host."""
    env = _env(num_envs, device, seed, on_device=False)
    zeros = torch.zeros(num_envs, env.num_actions)
    for _ in range(3):
        env.step(zeros)
    t0 = time.perf_counter()
    for _ in range(steps):
        env.step(zeros)  # (each step ends with the state read back: no separate synchronisation)
    return steps * num_envs / (time.perf_counter() - t0)


def env_and_physics(env, steps: int, rounds: int = 5) -> tuple[float, float]:
    """(env policy steps/s, physics policy steps/s) over ``steps`` policy steps each, in alternating blocks."""
    zeros = torch.zeros(env.num_envs, env.num_actions, device=env.device)
    for _ in range(3):  # CUDA graph capture, caches
        env.step(zeros)
    block = max(1, steps // rounds)
    t_env = t_phys = 0.0
    for _ in range(rounds):
        _sync(env.device)
        t0 = time.perf_counter()
        for _ in range(block):
            env.step(zeros)
        _sync(env.device)
        t1 = time.perf_counter()
        for _ in range(block):
            env.batch.step(nstep=env.cfg.decimation)
        _sync(env.device)
        t2 = time.perf_counter()
        t_env += t1 - t0
        t_phys += t2 - t1
    n = block * rounds * env.num_envs
    return n / t_env, n / t_phys


def colocated(env, iterations: int) -> float:
    """Env steps/s of whole co-located teacher iterations (collect + update) on the env's device."""
    from llp.config.schema import build
    from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
    from llp.learn.learner import Learner, train_iteration
    from llp.learn.models import Actor, Critic
    from llp.learn.ppo import PPO
    from llp.learn.rollout import RolloutCollector

    torch.manual_seed(0)
    dims = env.obs_dims()
    actor = Actor(build(ActorConfig, ACTOR), dims, env.num_actions).to(env.device)
    critic = Critic(build(CriticConfig, CRITIC), dims).to(env.device)
    ppo = PPO(actor, critic, build(PPOConfig, {"num_steps": NUM_STEPS, "num_epochs": 5, "num_minibatches": 4}))
    learner = Learner(ppo)
    collector = RolloutCollector(env, actor, critic, NUM_STEPS)
    train_iteration(collector, learner)  # start-up
    _sync(env.device)
    t0 = time.perf_counter()
    steps = 0
    for _ in range(iterations):
        steps += int(train_iteration(collector, learner)["perf/env_steps"])
    _sync(env.device)
    return steps / (time.perf_counter() - t0)


def run(device: str = "cuda", num_envs: tuple[int, ...] = (4096, 16384, 32768), steps: int = 100,
        iterations: int = 3, seed: int = 0) -> dict:  # fmt: skip
    from llp.bench import learner as learner_bench
    from llp.sim.backend import check_backend

    check_backend("warp", device, "--device")
    kind = torch.device(device).type
    if kind == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: torch sees no GPU on this machine")
    rows = {}
    for n in num_envs:
        env = _env(n, device, seed)
        env_rate, phys_rate = env_and_physics(env, steps)
        rows[str(n)] = {
            "env_policy_steps_per_s": round(env_rate, 1),
            "physics_policy_steps_per_s": round(phys_rate, 1),
            "env_over_physics": round(env_rate / phys_rate, 3),
            "colocated_env_steps_per_s": round(colocated(env, iterations), 1),
        }
        del env
        if kind == "cuda":
            torch.cuda.empty_cache()
    first = str(num_envs[0])
    rows[first]["host_task_env_policy_steps_per_s"] = round(host_task(num_envs[0], device, steps, seed), 1)
    rows[first]["device_over_host_task"] = round(
        rows[first]["env_policy_steps_per_s"] / rows[first]["host_task_env_policy_steps_per_s"], 3
    )
    update = learner_bench.run(device=device, num_envs=max(num_envs), repeats=2)
    return {
        "device": device,
        "gpu": torch.cuda.get_device_name(torch.device(device)) if kind == "cuda" else None,
        "task": "locomotion terrain (teacher: 12 leg joints, 5-frame MLP [512, 256, 128])",
        "steps": steps,
        "per_num_envs": rows,
        "ppo_update_samples_per_s": update["samples_per_s"],
        "ppo_update_num_envs": max(num_envs),
        "targets": TARGETS,
    }
