"""Running trials: waves of envs, each env one trial, each trial ending exactly once.

The runner places a wave of trials on their tiles, reseeds the env from the
wave's trial seeds, gives each trial its command, and steps the policy
(deterministic: the action mean) until every trial of the wave has an outcome:

* goal settings (climbs, vaults, stones, courses): ``success`` when the goal is
  reached; ``stuck`` after ``stuck_s`` without ``stuck_distance`` of progress
  towards it; ``timeout`` at ``duration_s``;
* traverse settings (stairs): walk straight ahead at ``traverse_speed``;
  ``success`` once ``traverse_distance`` from the spawn; ``stuck`` and
  ``timeout`` as above;
* tracking settings (flat, rough): a command drawn from the task's command
  ranges, held for the trial; ``success`` if the robot is still up when the
  trial ends (``duration_s``, or leaving the tile);
* all: ``fall`` when the env terminates the episode.

An env whose trial has ended keeps stepping until the wave is over (the batch
steps together), and nothing it does afterwards is counted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from llp.evaluation.protocol import Setting, Trial, TrialRecord


class StandStill:
    """The trivial baseline: zero actions, so every joint holds the default pose under PD."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions

    def observe(self, obs: dict) -> None:
        return None

    def initial_memory(self, num_envs: int):
        self.num_envs = num_envs
        return _Nothing()

    def step(self, frame, memory):
        return torch.zeros(self.num_envs, self.num_actions), memory, None


class _Nothing:
    """The memory of a policy that remembers nothing: a reset leaves it as it is."""

    def reset(self, done) -> _Nothing:
        return self


@dataclass(frozen=True)
class TrialRules:
    duration_s: float = 10.0
    traverse_speed: float = 0.5
    traverse_distance: float = 3.0
    stuck_s: float = 4.0
    stuck_distance: float = 0.25
    tracking_sigma: float = 0.25  # the kernel's sigma (the lin_vel_tracking term's)


def run_trials(env, policy, settings: list[Setting], trials: list[Trial], rules: TrialRules) -> list[TrialRecord]:
    """Run ``trials`` (any subset of a plan) on ``env`` with ``policy``; one record per trial, in order."""
    records: list[TrialRecord] = []
    n = env.num_envs
    for start in range(0, len(trials), n):
        records += _wave(env, policy, settings, trials[start : start + n], rules)
    return records


def _wave(env, policy, settings: list[Setting], wave: list[Trial], rules: TrialRules) -> list[TrialRecord]:
    n, k = env.num_envs, len(wave)
    types = list(env.cfg.terrain.tile_types)
    ids = np.arange(n)
    # envs beyond the wave repeat its trials so that the whole batch is on valid tiles; they are not counted
    slot = [wave[i % k] for i in range(n)]
    env.reseed(wave[0].seed)
    columns = np.array([types.index(settings[t.setting].tile_type) for t in slot])
    levels = np.array([settings[t.setting].level for t in slot])
    obs = env.assign_tiles(ids, columns, levels)
    kinds = np.array([settings[t.setting].kind for t in slot])
    state = env.course_state()
    _command(env, kinds, state, rules, np.random.default_rng(wave[0].seed + 1))
    obs = env.observe()
    command_xy = env.course_state()["command"][:, 0:2]
    standing_kernel = np.exp(-np.sum(command_xy**2, axis=1) / rules.tracking_sigma)
    spawn, goal = state["spawn"], state["goal"]

    memory = policy.initial_memory(n)
    active = np.arange(n) < k
    outcome = np.array([""] * n, dtype=object)
    steps = np.zeros(n, dtype=np.int64)
    kernel_sum = np.zeros(n)
    progress = np.zeros(n)
    best = np.zeros(n)  # best progress so far, and when it last improved by stuck_distance
    last_gain_step = np.zeros(n, dtype=np.int64)
    dt = env.dt
    max_steps = int(round(rules.duration_s / dt))
    stuck_steps = int(round(rules.stuck_s / dt))
    with torch.no_grad():
        for step in range(1, max_steps + 1):
            action, memory, _ = policy.step(policy.observe(obs), memory)
            result = env.step(action)
            now = env.course_state()
            # the kernel of this step from the env's own velocity estimate, before any reset
            vel = result.info["base_velocity"]
            kernel = np.exp(-np.sum((vel - command_xy) ** 2, axis=1) / rules.tracking_sigma)
            live = active & (outcome == "")
            kernel_sum[live] += kernel[live]
            steps[live] = step
            done = (result.terminated | result.truncated).numpy()
            xy = now["xy"]
            made = np.where(
                np.isnan(goal[:, 0]),
                np.linalg.norm(xy - spawn, axis=1),
                np.linalg.norm(goal - spawn, axis=1) - np.linalg.norm(goal - xy, axis=1),
            )
            progress[live & ~done] = made[live & ~done]
            gained = live & (progress >= best + rules.stuck_distance)
            best[gained], last_gain_step[gained] = progress[gained], step
            success_flags = _episode_success(result, n)
            for i in np.nonzero(live)[0]:
                if done[i]:
                    if bool(result.terminated[i]):
                        outcome[i] = "fall"
                    elif kinds[i] == "goal":
                        outcome[i] = "success" if success_flags[i] else "timeout"
                    elif kinds[i] == "traverse":
                        outcome[i] = "success" if progress[i] >= rules.traverse_distance else "timeout"
                    else:
                        outcome[i] = "success"  # still up when the trial ended (time or edge of the tile)
                elif kinds[i] == "traverse" and progress[i] >= rules.traverse_distance:
                    outcome[i] = "success"
                elif kinds[i] != "tracking" and step - last_gain_step[i] >= stuck_steps:
                    outcome[i] = "stuck"
            memory = memory.reset(result.terminated | result.truncated)
            obs = result.obs
            if not (active & (outcome == "")).any():
                break
    left = active & (outcome == "")
    outcome[left] = np.where(kinds[left] == "tracking", "success", "timeout")
    return [
        TrialRecord(
            index=t.index,
            setting=t.setting,
            seed=t.seed,
            outcome=str(outcome[i]),
            duration_s=float(steps[i] * dt),
            progress_m=float(progress[i]),
            tracking_kernel=float(kernel_sum[i] / max(steps[i], 1)),
            standing_tracking_kernel=float(standing_kernel[i]),
            to_goal_m=None if np.isnan(goal[i, 0]) else float(np.linalg.norm(goal[i] - spawn[i]) - progress[i]),
            command=None if kinds[i] == "goal" else [float(v) for v in command_xy[i]],
        )
        for i, t in enumerate(wave)
    ]


def _command(env, kinds: np.ndarray, state: dict, rules: TrialRules, rng: np.random.Generator) -> None:
    """Traverse trials walk straight ahead; tracking trials get a command from the task's ranges, held."""
    c = env.cfg.commands
    trav = np.nonzero(kinds == "traverse")[0]
    if len(trav):
        env.command_envs(trav, np.tile([rules.traverse_speed, 0.0], (len(trav), 1)), state["yaw"][trav])
    track = np.nonzero(kinds == "tracking")[0]
    if len(track):
        vel = np.stack([rng.uniform(*c.lin_vel_x, size=len(track)), rng.uniform(*c.lin_vel_y, size=len(track))], 1)
        still = rng.uniform(size=len(track)) < c.standing_fraction
        vel[still] = 0.0
        heading = state["yaw"][track] + rng.uniform(-np.pi, np.pi, size=len(track))
        env.command_envs(track, vel, heading)


def _episode_success(result, n: int) -> np.ndarray:
    flags = np.zeros(n, dtype=bool)
    episode = result.info.get("episode")
    if episode is not None and "success" in episode:
        flags[np.asarray(episode["env_ids"])] = np.asarray(episode["success"], dtype=bool)
    return flags
