"""The evaluation protocol: Wilson intervals by hand, one outcome per trial, the stand-still baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from llp.evaluation.protocol import (
    Setting,
    TrialRecord,
    evaluation_levels,
    plan_trials,
    settings_for,
    summarize,
    wilson_interval,
)


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        # worked out by hand: centre = (p + z^2/2n) / (1 + z^2/n), half = z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n)
        (5, 10, 0.23659, 0.76341),
        (0, 10, 0.0, 0.27753),
        (10, 10, 0.72247, 1.0),
        (98, 100, 0.92999, 0.99450),
    ],
)
def test_wilson_interval_matches_hand_computed_values(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-5) and hi == pytest.approx(high, abs=1e-5)


def test_every_paper_height_is_a_setting():
    from llp.sim.tasks import env_config

    cfg = env_config(overrides={"terrain": {"tile_types": ["climb", "vault", "flat"], "num_levels": 5}})
    levels = evaluation_levels(cfg.terrain)
    assert levels == 7  # 45..75 cm in 5 cm steps
    terrain = type(cfg.terrain)(**{**cfg.terrain.__dict__, "num_levels": levels})
    settings = settings_for(terrain, trials=500, transition_trials=100, traverse_types=[])
    climbs = [s.difficulty for s in settings if s.tile_type == "climb"]
    vaults = [s.difficulty for s in settings if s.tile_type == "vault"]
    assert climbs == ["45 cm", "50 cm", "55 cm", "60 cm", "65 cm", "70 cm", "75 cm"]
    assert vaults == ["40 cm", "45 cm", "50 cm"]
    assert [s.kind for s in settings if s.tile_type == "flat"] == ["tracking"]  # one flat setting, not seven
    assert all(s.trials == 500 for s in settings)


def _records(settings, outcomes):
    return [
        TrialRecord(t.index, t.setting, t.seed, outcome, 1.0, 0.0, 0.5, 0.4)
        for t, outcome in zip(plan_trials(settings, 0), outcomes)
    ]


def test_summary_counts_each_trial_once_and_refuses_anything_else():
    settings = [Setting("climb", 3, "60 cm", "goal", 4), Setting("vault", 0, "40 cm", "goal", 2)]
    trials = plan_trials(settings, seed=3)
    assert len({t.seed for t in trials}) == 6 and plan_trials(settings, seed=3) == trials
    records = _records(settings, ["success", "success", "fall", "stuck", "timeout", "success"])
    report = summarize(settings, records)
    climb, vault = report["settings"]
    assert climb["outcomes"] == {"success": 2, "fall": 1, "stuck": 1, "timeout": 0}
    assert climb["success_rate"] == 0.5 and climb["success_ci95"] == pytest.approx(list(wilson_interval(2, 4)))
    assert vault["outcomes"] == {"success": 1, "fall": 0, "stuck": 0, "timeout": 1}
    assert report["trials"] == 6 and report["success_rate"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="exactly one record per trial"):
        summarize(settings, records + records[:1])  # a trial counted twice
    with pytest.raises(ValueError, match="exactly one record per trial"):
        summarize(settings, records[1:])  # a trial not counted


def test_the_report_says_which_commands_the_tracking_trials_fell_on():
    """Success by command region: a policy that falls walking backward and sideways reads as such; goal trials
    (no command) are left out."""
    from llp.sim.command_regions import command_region

    assert command_region([0.0, 0.0]) == "standing"
    assert command_region([0.5, 0.1]) == "forward" and command_region([0.0, -0.2]) == "forward, sideways"
    assert command_region([-0.2, 0.14]) == "backward" and command_region([-0.2, 0.3]) == "backward, sideways"
    settings = [Setting("flat", 0, "-", "tracking", 6), Setting("climb", 0, "45 cm", "goal", 1)]
    records = _records(settings, ["success", "success", "fall", "fall", "success", "success", "fall"])
    commands = [[0.0, 0.0], [0.6, 0.0], [-0.2, 0.25], [-0.25, -0.3], [-0.1, 0.0], [0.3, 0.2], None]
    for r, c in zip(records, commands):
        r.command = c
    regions = summarize(settings, records)["tracking_by_command"]
    assert list(regions) == ["standing", "forward", "forward, sideways", "backward", "backward, sideways"]
    assert regions["backward, sideways"]["outcomes"] == {"success": 0, "fall": 2, "stuck": 0, "timeout": 0}
    assert regions["forward"]["success_rate"] == 1.0 and regions["backward"]["success_rate"] == 1.0
    assert sum(sum(r["outcomes"].values()) for r in regions.values()) == 6  # the climb trial is not counted


def test_the_report_says_where_goal_trials_ended_per_outcome():
    settings = [Setting("climb", 0, "45 cm", "goal", 4), Setting("flat", 0, "-", "tracking", 2)]
    left = [0.1, None, 0.3, 0.9, None, None]  # the second climb trial succeeded at the goal: 0 left
    records = _records(settings, ["fall", "success", "fall", "stuck", "success", "fall"])
    for r, m in zip(records, left):
        r.to_goal_m = 0.0 if r.outcome == "success" and r.setting == 0 else m
    climb, flat = summarize(settings, records)["settings"]
    assert climb["ends_to_goal_m"] == {
        "success": {"trials": 1, "min": 0.0, "median": 0.0, "max": 0.0},
        "fall": {"trials": 2, "min": 0.1, "median": pytest.approx(0.2), "max": 0.3},
        "stuck": {"trials": 1, "min": 0.9, "median": 0.9, "max": 0.9},
    }
    assert flat["ends_to_goal_m"] == {}  # no goal on a tracking setting


def test_goal_trials_on_the_simulator_record_the_distance_left_to_the_goal():
    """Standing still on a climb tile: stuck (or fallen) near the spawn, with the whole approach and the platform
    still to go; the distance left and the progress made add up to the spawn's distance from the goal."""
    from llp.evaluation.trials import StandStill, TrialRules, run_trials
    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    cfg = env_config(
        overrides={
            "terrain": {"tile_types": ["climb"], "num_levels": 1},
            "curriculum": {"enabled": False},
            "randomization": {"push_interval_s": None},
            "commands": {"resample_s": 10.0},
        }
    )
    env = ParkourEnv(cfg, 2, seed=0)
    settings = [Setting("climb", 0, "45 cm", "goal", 2)]
    records = run_trials(env, StandStill(env.num_actions), settings, plan_trials(settings, seed=5),
                         TrialRules(duration_s=1.0, stuck_s=0.6))  # fmt: skip
    spawn_to_goal = cfg.terrain.approach_length + cfg.terrain.platform_goal
    for r in records:
        assert r.outcome in ("stuck", "fall")
        assert r.to_goal_m + r.progress_m == pytest.approx(spawn_to_goal, abs=0.25)  # the spawn's jitter
        assert r.to_goal_m > spawn_to_goal - 0.5
    ends = summarize(settings, records)["settings"][0]["ends_to_goal_m"]
    assert sum(e["trials"] for e in ends.values()) == 2


def test_trials_on_the_simulator_end_exactly_once_and_standing_still_scores_the_standing_kernel():
    """More trials than envs (waves), every trial one record; a robot standing still tracks like one."""
    from llp.evaluation.trials import StandStill, TrialRules, run_trials
    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    cfg = env_config(
        overrides={
            "terrain": {"tile_types": ["flat", "stairs_up"], "num_levels": 2, "tile_length": 6.0, "tile_width": 6.0},
            "curriculum": {"enabled": False},
            "randomization": {"push_interval_s": None, "added_mass": None, "motor_strength": None},
            "commands": {"resample_s": 10.0},
        }
    )
    env = ParkourEnv(cfg, 4, seed=0)
    settings = [Setting("flat", 0, "-", "tracking", 5), Setting("stairs_up", 1, "step 12 cm", "traverse", 3)]
    trials = plan_trials(settings, seed=1)
    rules = TrialRules(duration_s=1.0, traverse_distance=1.5, stuck_s=0.6)
    records = run_trials(env, StandStill(env.num_actions), settings, trials, rules)
    assert [r.index for r in records] == list(range(8))  # 8 trials over 4 envs: two waves, one record each
    flat = [r for r in records if r.setting == 0]
    stairs = [r for r in records if r.setting == 1]
    # standing still on flat ground for 1 s: still up, and its kernel is the standing kernel of its command
    assert all(r.outcome == "success" for r in flat)
    for r in flat:
        assert r.tracking_kernel == pytest.approx(r.standing_tracking_kernel, abs=0.1)  # it sways as it settles
    # standing still in front of stairs: no progress, so stuck (or a fall), never a success
    assert all(r.outcome in ("stuck", "fall") for r in stairs)
    assert all(r.progress_m < 0.25 for r in stairs)
    assert all(r.standing_tracking_kernel == pytest.approx(math.exp(-0.25 / 0.25)) for r in stairs)
    # the same seed gives the same trials
    again = run_trials(env, StandStill(env.num_actions), settings, trials, rules)
    assert [(r.outcome, round(r.tracking_kernel, 6)) for r in again] == [
        (r.outcome, round(r.tracking_kernel, 6)) for r in records
    ]
    assert np.isfinite([r.tracking_kernel for r in records]).all()
    assert all(r.to_goal_m is None for r in records)  # no goal on flat ground or stairs
    # each trial keeps the command it was given: the standing kernel is the one of that command
    for r in records:
        assert r.standing_tracking_kernel == pytest.approx(math.exp(-sum(v * v for v in r.command) / 0.25))
    assert all(r.command == [0.5, 0.0] for r in stairs)  # traverse trials walk straight ahead


def test_gait_strip_of_the_stand_still_baseline(tmp_path, llp):
    out = tmp_path / "gait.png"
    result = llp(
        "render", "gait", "--model", "stand-still", "--profile", "smoke", "--tile-type", "flat", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = llp(
        "render", "gait", "--model", "stand-still", "--profile", "smoke", "--tile-type", "climb", "--out", str(out)
    )
    assert bad.returncode == 2 and "not a tile of the task" in bad.stderr


def test_a_trial_ends_the_same_whichever_waves_its_env_ran_before():
    """Evaluator actors share one env seed and every wave reseeds the env (spawns, commands, camera model), so a
    trial's record does not depend on which actor ran it or in which order: the same trials give the same report."""
    from llp.evaluation.trials import StandStill, TrialRules, run_trials
    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    small = {"num_levels": 2, "tile_length": 6.0, "tile_width": 6.0, "border": 1.0}
    cfg = env_config(overrides={
        "terrain": {"tile_types": ["flat", "rough"], **small}, "curriculum": {"enabled": False},
        "randomization": {"push_interval_s": None}, "commands": {"resample_s": 10.0},
        "observations": {"depth": ["depth"]}, "depth_camera": {"width": 8, "height": 6},
        "camera_model": {"perfect": False},
    })  # fmt: skip
    settings = [Setting("flat", 0, "-", "tracking", 2), Setting("rough", 1, "amplitude 6 cm", "tracking", 2)]
    trials = plan_trials(settings, seed=4)
    rules = TrialRules(duration_s=0.6, stuck_s=0.5)
    first, second = ParkourEnv(cfg, 2, seed=9), ParkourEnv(cfg, 2, seed=9)
    forward = run_trials(first, StandStill(first.num_actions), settings, trials, rules)
    backward = run_trials(second, StandStill(second.num_actions), settings, trials[2:] + trials[:2], rules)

    def key(records):
        return sorted((r.index, r.outcome, round(r.tracking_kernel, 6), round(r.progress_m, 6)) for r in records)

    assert key(forward) == key(backward)
    env = ParkourEnv(cfg, 2, seed=9)
    frames = []
    for _ in range(2):  # the camera model's draws restart with the wave's seed
        env.reseed(11)
        env.assign_tiles(np.arange(2), np.array([1, 1]), np.array([1, 1]))
        frames.append(env.observe()["depth"]["depth"].clone())
    assert torch.equal(frames[0], frames[1])


def test_a_policy_is_evaluated_at_its_own_control_rate_or_not_at_all():
    from llp.learn.spec import FrozenPolicy
    from llp.skills.protocol import EvaluateConfig, evaluate_policy

    spec = {"obs": ["policy/proprio"], "obs_dim": 1, "num_frames": 1, "num_actions": 21, "policy_dt": 0.01}
    with pytest.raises(ValueError, match="acts every 0.01 s, the task's control step is 0.02 s"):
        evaluate_policy(FrozenPolicy("models:/fast/1", b"", spec), EvaluateConfig(), resources=None, seed=0)


def test_course_settings_are_labelled_and_placed_as_configured():
    from dataclasses import replace

    from llp.config.schema import ConfigError, build
    from llp.motion.library import SkillObstacle
    from llp.skills.library import course_at
    from llp.stages.evaluate_final import FinalEvaluationConfig

    cfg = build(FinalEvaluationConfig, {}, "stages.evaluate_final")
    climb = SkillObstacle("climb", (0.275, 0.30, 0.325), 0.6)
    protocol = replace(cfg.protocol, course_env=course_at(cfg.protocol.course_env, climb))
    course = protocol.course_config("course")
    assert course.terrain.climb_heights == [0.275, 0.30, 0.325] and course.randomization.goal_starts == [(0.0, 0.0)]
    settings = settings_for(course.terrain, 4, 7, [])
    assert [(s.tile_type, s.difficulty, s.trials) for s in settings] == [
        ("climb", "27.5 cm", 4), ("climb", "30 cm", 4), ("climb", "32.5 cm", 4)]  # fmt: skip
    assert protocol.course_config("climb").randomization.goal_starts == [(1.95, 2.15)]
    from llp.stages.registry import load_pipeline

    with pytest.raises(ConfigError, match=r"protocol.courses.climb: \[2.4, 2.6\]: must start before the box"):
        load_pipeline("smoke", ["stages.evaluate_final.protocol.courses.climb=[2.4, 2.6]"])


def test_a_policy_that_reads_the_tracking_layout_sees_its_own_proprioception_on_the_terrain():
    """A skill expert trained in the tracking task ([gravity, angular velocity, ...]) evaluated on the terrain's
    courses ([0.25 x angular velocity, gravity, ...]): the evaluator hands it its own layout."""
    import torch

    from actors.evaluator import InLayout

    class Echo:
        initial_memory = step = None

        def observe(self, obs):
            return obs["policy"]["proprio"]

    w, g, rest = torch.tensor([[4.0, 8.0, 12.0]]), torch.tensor([[0.0, 0.1, -0.99]]), torch.tensor([[0.5, -0.5]])
    terrain = {"policy": {"proprio": torch.cat([0.25 * w, g, rest], dim=1), "command": torch.zeros(1, 3)}}
    seen = InLayout(Echo(), "locomotion", "tracking").observe(terrain)
    assert torch.allclose(seen, torch.cat([g, w, rest], dim=1))
    assert torch.allclose(terrain["policy"]["proprio"][:, :3], 0.25 * w)  # the env's own tensors are untouched
