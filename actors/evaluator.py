"""Evaluation on the Ray pool: trials spread over simulator actors, each running waves of trials.

Plain Python class plus a driver function; the trial logic lives in
``llp.evaluation.trials`` and knows nothing of Ray.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import ray

from llp.config.resources import ResourcesConfig
from llp.evaluation.protocol import Setting, Trial, TrialRecord
from llp.evaluation.trials import StandStill, TrialRules, run_trials
from llp.sim.config import EnvConfig


class EvaluatorWorker:
    """Hosts an env of ``num_envs`` envs and a frozen policy; ``run(trials)`` returns one record per trial."""

    def __init__(
        self, env_cfg: EnvConfig, num_envs: int, seed: int, program: bytes | None, spec: dict | None, threads: int = 1
    ):
        import torch

        from llp.learn.deployable import load_program
        from llp.sim.hosted import parkour_env

        torch.set_num_threads(1)
        # trials judge "stuck" by their own rules: a training env's stall end (goal_stall_s) would read as a fall
        terminations = dataclasses.replace(env_cfg.terminations, goal_stall_s=0.0)
        env_cfg = dataclasses.replace(env_cfg, terminations=terminations)
        self.env = parkour_env(env_cfg, num_envs, seed=seed, threads=threads)  # isaaclab: behind an env server
        # no program: the stand-still baseline
        self.policy = load_program(program, spec) if program is not None else StandStill(self.env.num_actions)
        layout = (spec or {}).get("proprio_layout")
        env_layout = getattr(self.env, "proprio_layout", "locomotion")
        if program is not None and layout not in (None, env_layout):  # a skill expert reads the tracking layout
            self.policy = InLayout(self.policy, env_layout, layout)

    def run(self, settings: list[Setting], trials: list[Trial], rules: TrialRules) -> list[TrialRecord]:
        return run_trials(self.env, self.policy, settings, trials, rules)

    def pid(self) -> int:
        return os.getpid()


class InLayout:
    """A policy that reads proprioception in ``layout``, on an env that gives it in ``env_layout``
    (``llp.sim.proprio``): a skill expert, trained in the tracking task, on the terrain's courses."""

    def __init__(self, policy, env_layout: str, layout: str):
        self.policy, self.env_layout, self.layout = policy, env_layout, layout
        self.initial_memory, self.step = policy.initial_memory, policy.step

    def observe(self, obs: dict):
        from llp.sim.proprio import convert_proprio

        mine = {group: dict(terms) for group, terms in obs.items()}
        for terms in mine.values():
            if "proprio" in terms:
                terms["proprio"] = convert_proprio(terms["proprio"], self.env_layout, self.layout)
        return self.policy.observe(mine)


def evaluate_on_pool(
    resources: ResourcesConfig,
    env_cfg: EnvConfig,
    envs_per_actor: int,
    seed: int,
    program: bytes | None,
    spec: dict | None,
    settings: list[Setting],
    trials: list[Trial],
    rules: TrialRules,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[TrialRecord]:
    """Run ``trials`` on ``resources.sim_actors`` evaluator actors, a wave at a time, as actors free up."""
    actors_n = max(1, min(resources.sim_actors, -(-len(trials) // envs_per_actor)))
    num_envs = min(envs_per_actor, len(trials))
    cls = ray.remote(EvaluatorWorker).options(
        num_cpus=resources.sim_actor_cpus, resources=resources.sim_resources, scheduling_strategy="SPREAD"
    )  # a lost actor fails the stage, whose retry redoes it
    program_ref = ray.put(program) if program is not None else None
    # every actor builds the same env (terrain, camera): a wave's outcome must not depend on which actor ran it
    actors = [cls.remote(env_cfg, num_envs, seed, program_ref, spec, resources.sim_threads) for _ in range(actors_n)]
    waves = [trials[i : i + num_envs] for i in range(0, len(trials), num_envs)]
    records: list[TrialRecord] = []
    pending: dict = {}
    try:
        free = list(actors)
        while waves or pending:
            while free and waves:
                actor = free.pop()
                pending[actor.run.remote(settings, waves.pop(0), rules)] = actor
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                free.append(pending.pop(ref))
                records += ray.get(ref)
                if on_progress is not None:
                    on_progress(len(records), len(trials))
    finally:
        for actor in actors:
            ray.kill(actor)
    return sorted(records, key=lambda r: r.index)
