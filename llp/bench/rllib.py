"""`llp bench rllib`: this project's PPO against RLlib's PPO on the same env, same networks, one run.

Both train on ``ParkourEnv`` (locomotion task, 64 envs, 24 steps per env per
iteration, 5 epochs x 4 minibatches, actor and critic MLPs [512, 256, 128] over
the 259 policy observations), one process and one torch thread each, RLlib with
its local env runner and local learner (the new API stack, Ray 2.60). RLlib
expects gymnasium's next-step auto-reset, so the adapter below holds an ended
env's reset observation back for one step; the simulation work is identical.
env-steps/s are counted from each library's own step counters over wall time,
first iteration (start-up) excluded.

The sampler comparison (``sampler_ratio_256``, ``sampler_ratio_1024``) times rollout collection alone, the
part where the libraries differ (their PPO arithmetic is the same): this project's ``RolloutCollector``
against RLlib's ``SingleAgentEnvRunner.sample`` on the same env and actor network, 24 steps per env per round.
Ours does more per step: it also evaluates the critic (for GAE) and keeps the frame memory for exact replay;
RLlib's runner evaluates the policy alone (its learner computes values later).
"""

from __future__ import annotations

import os
import time

import numpy as np
import torch

NUM_STEPS = 24
HIDDEN = [512, 256, 128]
OBS = ["policy/proprio", "policy/command", "policy/height_scan"]
TERMS = [ref.split("/")[1] for ref in OBS]


def _env(num_envs: int, seed: int):
    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    return ParkourEnv(env_config(), num_envs, seed=seed)


def ours(num_envs: int, iterations: int) -> float:
    from llp.config.schema import build
    from llp.learn.configs import ActorConfig, CriticConfig, PPOConfig
    from llp.learn.learner import Learner, train_iteration
    from llp.learn.models import Actor, Critic
    from llp.learn.ppo import PPO
    from llp.learn.rollout import RolloutCollector

    torch.manual_seed(0)
    env = _env(num_envs, 0)
    dims = env.obs_dims()
    actor = Actor(build(ActorConfig, {"obs": OBS, "hidden_dims": HIDDEN}), dims, env.num_actions)
    critic = Critic(build(CriticConfig, {"obs": OBS, "hidden_dims": HIDDEN}), dims)
    ppo = Learner(PPO(actor, critic, build(PPOConfig, {"num_steps": NUM_STEPS, "num_epochs": 5, "num_minibatches": 4})))
    collector = RolloutCollector(env, actor, critic, NUM_STEPS)
    train_iteration(collector, ppo)
    t0 = time.perf_counter()
    steps = 0
    for _ in range(iterations):
        steps += int(train_iteration(collector, ppo)["perf/env_steps"])
    return steps / (time.perf_counter() - t0)


def sampler_ours(num_envs: int, rounds: int) -> tuple[int, float]:
    """(env steps, seconds) of this project's rollout collection (policy, critic, rollout storage)."""
    from llp.config.schema import build
    from llp.learn.configs import ActorConfig, CriticConfig
    from llp.learn.models import Actor, Critic
    from llp.learn.rollout import RolloutCollector

    torch.manual_seed(0)
    env = _env(num_envs, 0)
    dims = env.obs_dims()
    actor = Actor(build(ActorConfig, {"obs": OBS, "hidden_dims": HIDDEN}), dims, env.num_actions)
    critic = Critic(build(CriticConfig, {"obs": OBS, "hidden_dims": HIDDEN}), dims)
    collector = RolloutCollector(env, actor, critic, NUM_STEPS)
    collector.collect()  # start-up
    t0 = time.perf_counter()
    steps = 0
    for _ in range(rounds):
        ro = collector.collect()
        steps += ro.num_steps * ro.num_envs
    return steps, time.perf_counter() - t0


def sampler_rllib(num_envs: int, rounds: int) -> tuple[int, float]:
    """(env steps, seconds) of RLlib's env runner on the same env and actor network (new API stack, local
    runner)."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import gymnasium as gym
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    cls = _vector_env_class()
    config = _rllib_config(num_envs).environment(cls, env_config={"seed": 0, "num_envs": num_envs})
    config = config.env_runners(gym_env_vectorize_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT)
    runner = SingleAgentEnvRunner(config=config)
    try:
        runner.sample(num_timesteps=num_envs * NUM_STEPS)  # start-up
        env = runner.env.unwrapped
        before = env.simulated
        t0 = time.perf_counter()
        for _ in range(rounds):
            runner.sample(num_timesteps=num_envs * NUM_STEPS)
        # the env steps simulated: RLlib's own count leaves out each auto-reset step (the step that reports an
        # ended env's fresh start), which the adapter spends simulating all the same
        return env.simulated - before, time.perf_counter() - t0
    finally:
        runner.stop()


def _rllib_config(num_envs: int):
    """RLlib's PPO config matching ours: the same rollout length, batch, epochs, networks (ELU MLPs)."""
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig as RLlibPPOConfig

    return (
        RLlibPPOConfig()
        .environment("llp_parkour", env_config={"seed": 0}, normalize_actions=False, clip_actions=False)
        .env_runners(
            num_env_runners=0,
            num_envs_per_env_runner=num_envs,
            gym_env_vectorize_mode=gym.VectorizeMode.VECTOR_ENTRY_POINT,
            rollout_fragment_length=NUM_STEPS,
        )
        .learners(num_learners=0)
        .training(
            train_batch_size_per_learner=num_envs * NUM_STEPS,
            minibatch_size=num_envs * NUM_STEPS // 4,
            num_epochs=5,
            lr=1e-3,
            gamma=0.99,
            lambda_=0.95,
            clip_param=0.2,
        )
        .rl_module(
            model_config={
                "fcnet_hiddens": HIDDEN,
                "fcnet_activation": "elu",
                "vf_share_layers": False,
                "head_fcnet_hiddens": [],
            }
        )
        .resources(num_cpus_for_main_process=1)
    )


def _vector_env_class():
    import gymnasium as gym

    class ParkourVectorEnv(gym.vector.VectorEnv):
        """ParkourEnv behind gymnasium's VectorEnv API with next-step auto-reset (what RLlib expects)."""

        metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

        def __init__(self, config: dict):
            self.env = _env(int(config.get("num_envs", 64)), int(config.get("seed", 0)))
            self.num_envs = self.env.num_envs
            obs_dim = sum(self.env.obs_dims()["policy"][t] for t in TERMS)  # the terms it passes on (OBS)
            self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
            self.single_action_space = gym.spaces.Box(-10.0, 10.0, (self.env.num_actions,), np.float32)
            self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
            self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
            self._pending = np.zeros(self.num_envs, dtype=bool)
            self._reset_obs = None
            self.simulated = 0  # env steps simulated (num_envs per step call)

        @staticmethod
        def _flat(obs) -> np.ndarray:
            return torch.cat([obs["policy"][t] for t in TERMS], -1).numpy()

        def reset(self, *, seed=None, options=None):
            self._pending[:] = False
            return self._flat(self.env.reset()), {}

        def step(self, actions):
            result = self.env.step(torch.as_tensor(np.asarray(actions), dtype=torch.float32))
            self.simulated += self.num_envs
            obs = self._flat(result.obs)
            reward = result.reward.numpy().copy()
            term, trunc = result.terminated.numpy().copy(), result.truncated.numpy().copy()
            if self._pending.any():  # envs that ended last step: report their (already reset) start now
                reward[self._pending] = 0.0
                term[self._pending] = trunc[self._pending] = False
            done = term | trunc
            if done.any():  # report the final state now, the fresh start next step
                obs[done] = self._flat(result.final_obs)[done]
            self._pending = done
            return obs, reward, term, trunc, {}

    return ParkourVectorEnv


def rllib(num_envs: int, iterations: int) -> float:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray
    from ray.tune.registry import register_env

    cls = _vector_env_class()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=True, logging_level="ERROR")
    try:
        register_env("llp_parkour", lambda cfg: cls(dict(cfg)))
        config = _rllib_config(num_envs)
        algo = config.build_algo()
        result = algo.train()
        last = result["num_env_steps_sampled_lifetime"]
        t0 = time.perf_counter()
        for _ in range(iterations):
            result = algo.train()
        steps = result["num_env_steps_sampled_lifetime"] - last
        rate = steps / (time.perf_counter() - t0)
        algo.stop()
        return rate
    finally:
        ray.shutdown()


def run(iterations: int = 6, num_envs: int = 64, sampler_envs: tuple[int, ...] = (256, 1024), rounds: int = 3) -> dict:
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    sampler = {}
    for n in sampler_envs:  # each pair back to back, so that both see the same machine load
        (s_a, t_a), (s_b, t_b) = sampler_ours(n, rounds), sampler_rllib(n, rounds)
        a, b = s_a / t_a, s_b / t_b
        sampler[n] = (a, b)
        print(f"[llp] sampler, {n} envs: ours {a:.0f}, RLlib {b:.0f} env-steps/s", flush=True)
    ours_rate = ours(num_envs, iterations)
    rllib_rate = rllib(num_envs, iterations)
    return {
        **{f"sampler_ours_{n}": round(a, 1) for n, (a, _) in sampler.items()},
        **{f"sampler_rllib_{n}": round(b, 1) for n, (_, b) in sampler.items()},
        **{f"sampler_ratio_{n}": round(a / b, 2) for n, (a, b) in sampler.items()},
        "sampler_rounds": rounds,
        "num_envs": num_envs,
        "steps_per_env_per_iteration": NUM_STEPS,
        "hidden_dims": HIDDEN,
        "iterations": iterations,
        "threads": 1,
        "ours_env_steps_per_s": round(ours_rate, 1),
        "rllib_env_steps_per_s": round(rllib_rate, 1),
        "ratio": round(ours_rate / rllib_rate, 2),
    }
