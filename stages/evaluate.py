"""Evaluation: a registered policy on every terrain type and level, as tables and pictures.

Envs are spread over all (type, level) tiles with the curriculum frozen; the
policy acts deterministically (its action mean) for ``steps`` policy steps, and
every finished or cut-off episode is scored: fall rate, episode length, and the
velocity-tracking kernel per step (1 = perfect tracking).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field
from llp.stages.common import checked_env_config


@dataclass(kw_only=True)
class EvaluateConfig:
    """What to evaluate and on how much experience."""

    policy: str = field(default="locomotion_teacher", doc="Upstream stage whose 'policy' output is evaluated.")
    task: str = field(default="locomotion", doc="Task config (conf/task/).")
    robot: str = field(default="lightbot0_like", doc="Robot config (conf/robot/).")
    env: dict[str, Any] = field(default_factory=dict, doc="Overrides of the task config (validated).")
    num_envs: int = field(default=100, doc="Envs, spread evenly over (type, level) tiles.")
    steps: int = field(default=500, doc="Policy steps per env (50 Hz: 500 = 10 s).")
    retries: int = field(default=1, doc="Prefect retries of this stage.")

    def validate(self, path: str) -> None:
        check(self.num_envs >= 1, f"{path}.num_envs", "must be >= 1")
        check(self.steps >= 1, f"{path}.steps", "must be >= 1")
        checked_env_config(self.task, self.robot, self.env, path)


def run(ctx, cfg: EvaluateConfig, inputs: dict[str, str]) -> dict[str, str]:
    import numpy as np
    import torch

    from llp.config.schema import merge
    from llp.sim.env import ParkourEnv

    policy = ctx.load_policy(inputs["policy"])
    base = checked_env_config(cfg.task, cfg.robot, cfg.env, "env")
    frozen = {
        "curriculum": {"enabled": False, "initial_levels": "spread", "initial_max_level": base.terrain.num_levels - 1},
        "randomization": {"push_interval_s": None},
    }
    env_cfg = checked_env_config(cfg.task, cfg.robot, merge(cfg.env, frozen), "env")
    env = ParkourEnv(env_cfg, cfg.num_envs, seed=ctx.seed)
    types, levels = env_cfg.terrain.tile_types, env_cfg.terrain.num_levels
    obs = env.reset()
    memory = policy.initial_memory(cfg.num_envs)
    if "lin_vel_tracking" not in env_cfg.rewards:
        raise ValueError("evaluation scores velocity tracking: the task needs a lin_vel_tracking reward term")
    track_col = env.reward_names.index("lin_vel_tracking")
    track_scale = env_cfg.rewards["lin_vel_tracking"].weight * env.dt
    episodes = []
    running_track = np.zeros(cfg.num_envs)
    progress = ctx.progress(cfg.steps, 0, label="evaluate")
    import time

    t0 = time.perf_counter()
    with torch.no_grad():
        for step in range(cfg.steps):
            ctx.fault_point(step)
            action, memory, _ = policy.step(policy.observe(obs), memory)
            result = env.step(action)
            # the tracking kernel of this step, from the terms computed before any reset
            running_track += result.info["weighted_terms"][:, track_col].numpy() / track_scale
            done = (result.terminated | result.truncated).numpy()
            last = step == cfg.steps - 1
            ids = np.arange(cfg.num_envs) if last else np.nonzero(done)[0]
            for i in ids:
                finished = bool(done[i])
                length = (
                    int(result.info["episode"]["length"][list(result.info["episode"]["env_ids"]).index(i)])
                    if finished
                    else int(env.episode_length[i])
                )
                episodes.append(
                    {
                        "type": types[env.column[i]],
                        "level": int(env.level[i]),
                        "fell": bool(result.terminated[i]) if finished else False,
                        "length": max(length, 1),
                        "tracking": running_track[i] / max(length, 1),
                    }
                )
                running_track[i] = 0.0
            memory = memory.reset(result.terminated | result.truncated)
            obs = result.obs
            done_returns = result.info.get("episode", {}).get("return")
            shown = {"perf/env_steps_per_s": (step + 1) * cfg.num_envs / (time.perf_counter() - t0)}
            if done_returns is not None and len(done_returns):
                shown["episode/return"] = float(np.mean(done_returns))
            progress.update(step, shown)
    table = _tables(episodes, types, levels)
    ctx.log_metrics(
        {
            "eval/fall_rate": table["overall"]["fall_rate"],
            "eval/tracking": table["overall"]["tracking"],
            "eval/episode_length_s": table["overall"]["length"] * env_cfg.policy_dt,
            "eval/episodes": float(len(episodes)),
        },
        step=0,
    )
    for t in types:
        ctx.log_metrics(
            {
                f"eval/{t}/fall_rate": table["by_type"][t]["fall_rate"],
                f"eval/{t}/tracking": table["by_type"][t]["tracking"],
            },
            step=0,
        )
    ctx.log_json(table, "evaluation/table.json")
    ctx.log_figure(_figure(table, types, levels, inputs["policy"]), "evaluation/fall_rate.png")
    return {}


def _tables(episodes: list[dict], types: list[str], levels: int) -> dict:
    def summary(rows: list[dict]) -> dict:
        if not rows:
            return {"episodes": 0, "fall_rate": float("nan"), "tracking": float("nan"), "length": float("nan")}
        return {
            "episodes": len(rows),
            "fall_rate": sum(r["fell"] for r in rows) / len(rows),
            "tracking": sum(r["tracking"] for r in rows) / len(rows),
            "length": sum(r["length"] for r in rows) / len(rows),
        }

    return {
        "overall": summary(episodes),
        "by_type": {t: summary([e for e in episodes if e["type"] == t]) for t in types},
        "by_type_level": {
            t: [summary([e for e in episodes if e["type"] == t and e["level"] == lv]) for lv in range(levels)]
            for t in types
        },
    }


def _figure(table: dict, types: list[str], levels: int, policy_uri: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.array([[table["by_type_level"][t][lv]["fall_rate"] for lv in range(levels)] for t in types])
    fig, ax = plt.subplots(figsize=(1.2 * levels + 3, 0.6 * len(types) + 1.8))
    im = ax.imshow(grid, cmap="RdYlGn_r", vmin=0, vmax=1)
    for i in range(len(types)):
        for j in range(levels):
            value = grid[i, j]
            ax.text(j, i, "-" if np.isnan(value) else f"{100 * value:.0f}%", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(levels), [f"level {lv}" for lv in range(levels)])
    ax.set_yticks(range(len(types)), types)
    ax.set_title(f"fall rate per episode\n{policy_uri}", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    fig.tight_layout()
    return fig
