"""The evaluation protocol: settings, trials, outcomes and success rates with Wilson intervals.

A *setting* is one tile type at one difficulty level. A *trial* is one
spawn-to-goal attempt in one setting with its own seed; it ends exactly once,
with one of the outcomes below. Success rates are reported with Wilson score
95% intervals, which stay inside [0, 1] and are honest at 0% and 100%.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

OUTCOMES = ("success", "fall", "stuck", "timeout")
Z95 = 1.959963984540054  # two-sided 95% quantile of the standard normal


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) with no trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


@dataclass(frozen=True)
class Setting:
    tile_type: str
    level: int
    difficulty: str  # in the paper's units, e.g. "60 cm" or "step 7.5 cm"
    kind: str  # "goal" (reach the goal), "traverse" (walk a distance), "tracking" (follow commands, stay up)
    trials: int


@dataclass(frozen=True)
class Trial:
    index: int  # position in the plan; trial i of a plan always gets the same seed
    setting: int  # index into the plan's settings
    seed: int


@dataclass
class TrialRecord:
    """What one trial ended with."""

    index: int
    setting: int
    seed: int
    outcome: str  # one of OUTCOMES
    duration_s: float
    progress_m: float  # distance made good: towards the goal, or away from the spawn
    tracking_kernel: float  # mean per-step exp(-|v_xy - c_xy|^2 / sigma) over the trial
    standing_tracking_kernel: float  # the same kernel for a robot standing still on the same commands
    to_goal_m: float | None = None  # goal settings: the distance left to the goal when the trial ended
    command: list[float] | None = None  # the held (vx, vy) command in the base frame, m/s

    def to_dict(self) -> dict:
        return asdict(self)


def plan_trials(settings: list[Setting], seed: int) -> list[Trial]:
    """Every setting's trials, each with its own seed derived from (seed, setting, repetition)."""
    trials = []
    for s_idx, setting in enumerate(settings):
        for rep in range(setting.trials):
            trials.append(Trial(len(trials), s_idx, _mix(seed, s_idx, rep)))
    return trials


def _mix(*values: int) -> int:
    h = 1469598103934665603
    for v in values:
        h = ((h ^ (v & 0xFFFFFFFF)) * 1099511628211) % (1 << 63)
    return h % (1 << 31)


def summarize(settings: list[Setting], records: list[TrialRecord]) -> dict:
    """The report: one row per setting and an overall row, each with outcome counts, the success rate and its
    Wilson interval, the fall rate and the tracking kernels. Refuses records that do not match the plan one to
    one (a trial counted twice or not at all)."""
    indices = sorted(r.index for r in records)
    expected = sum(s.trials for s in settings)
    if indices != list(range(expected)):
        raise ValueError(f"expected exactly one record per trial (0..{expected - 1}), got {len(records)} records")
    rows = []
    for s_idx, setting in enumerate(settings):
        mine = [r for r in records if r.setting == s_idx]
        rows.append({**asdict(setting), **_stats(mine)})
    types = list(dict.fromkeys(s.tile_type for s in settings))
    by_type = {t: _stats([r for r in records if settings[r.setting].tile_type == t]) for t in types}
    tracking = [r for r in records if settings[r.setting].kind == "tracking"]
    return {"trials": len(records), **_stats(records), "by_type": by_type, "settings": rows,
            "tracking_by_command": by_command(tracking)}  # fmt: skip


def _stats(records: list[TrialRecord]) -> dict:
    n = len(records)
    counts = {o: sum(r.outcome == o for r in records) for o in OUTCOMES}
    low, high = wilson_interval(counts["success"], n)
    mean = lambda key: sum(getattr(r, key) for r in records) / n if n else float("nan")  # noqa: E731
    return {
        "success_rate": counts["success"] / n if n else float("nan"),
        "success_ci95": [low, high],
        "fall_rate": counts["fall"] / n if n else float("nan"),
        "outcomes": counts,
        "tracking_kernel": mean("tracking_kernel"),
        "standing_tracking_kernel": mean("standing_tracking_kernel"),
        "mean_progress_m": mean("progress_m"),
        "mean_duration_s": mean("duration_s"),
        "ends_to_goal_m": ends_to_goal(records),
    }


def ends_to_goal(records: list[TrialRecord]) -> dict:
    """Where the goal settings' trials ended, per outcome: how many, and the least, median and most distance left
    to the goal (metres); {} when no record is on a goal setting. A course whose trials all fall 0.1-0.3 m short of
    an obstacle, or all stop where it comes into view, reads here without replaying a trial."""
    out = {}
    for outcome in OUTCOMES:
        left = sorted(r.to_goal_m for r in records if r.outcome == outcome and r.to_goal_m is not None)
        if left:
            out[outcome] = {"trials": len(left), "min": left[0], "median": float(np.median(left)), "max": left[-1]}
    return out


def by_command(records: list[TrialRecord]) -> dict:
    """The tracking trials' success by where their command lies (``llp.sim.command_regions``): which commands
    a policy falls on, e.g. a teacher that walks forward but falls walking backward and sideways. {} without
    commands."""
    from llp.sim.command_regions import REGIONS, command_region

    with_command = [r for r in records if r.command is not None]
    groups = {region: [r for r in with_command if command_region(r.command) == region] for region in REGIONS}
    return {region: _stats(mine) for region, mine in groups.items() if mine}


TRANSITION_TYPES = ("course", "course_succession")


def evaluation_levels(terrain) -> int:
    """Levels for evaluation: enough that every climb and vault height of the config appears (45-75 cm in 5 cm
    steps is 7 levels), and never fewer than the task trains on."""
    from llp.sim.terrain import GOAL_TYPES

    levels = terrain.num_levels
    types = set(terrain.tile_types)
    if types & {"climb", "course", "course_succession"}:
        levels = max(levels, len(terrain.climb_heights))
    if types & {"vault", "trapezoid_vault", "saddle_vault", "course", "course_succession"}:
        levels = max(levels, len(terrain.vault_heights))
    return levels if types & GOAL_TYPES else terrain.num_levels


def settings_for(terrain, trials: int, transition_trials: int, traverse_types: list[str]) -> list[Setting]:
    """One setting per tile type and distinct difficulty (a flat tile is one setting, not one per level)."""
    from llp.sim.terrain import GOAL_TYPES, difficulty

    settings, seen = [], set()
    for tile_type in terrain.tile_types:
        for level in range(terrain.num_levels):
            label = difficulty(terrain, tile_type, level)
            if (tile_type, label) in seen:
                continue
            seen.add((tile_type, label))
            kind = "goal" if tile_type in GOAL_TYPES else "traverse" if tile_type in traverse_types else "tracking"
            n = transition_trials if tile_type in TRANSITION_TYPES else trials
            settings.append(Setting(tile_type, level, label, kind, n))
    return settings
