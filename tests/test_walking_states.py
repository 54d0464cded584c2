"""Walking starts: the teacher's gait recorded on flat ground, placed at a skill's start mid-stride."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llp.config.schema import ConfigError
from llp.motion.seeds import seed_reference, seed_spec
from llp.motion.tracking import Lane, TrackingEnvConfig, tracking_task
from llp.motion.tracking_env import TrackingEnv
from llp.motion.walking_states import (
    WalkingStatesConfig,
    forward_speed,
    place,
    record_walking_states,
    state_width,
    to_states,
)
from llp.sim.math3d import yaw_and_gravity, yaw_quat


@pytest.fixture(scope="module")
def seed():
    return seed_reference(seed_spec("climb_step_25"))


def _env_cfg(seed, states=None, **overrides) -> TrackingEnvConfig:
    tall = seed.obstacle.raised(0.10)
    return TrackingEnvConfig(task=tracking_task(overrides=overrides), qpos=seed.qpos, fps=seed.fps,
                             obstacle=seed.obstacle, contacts=seed.contacts, reference_id="low",
                             lanes=[Lane(seed.qpos, tall, seed.contacts, "tall")], walking_states=states)  # fmt: skip


def _gait(seed, n: int = 40, speed: float = 0.5) -> np.ndarray:
    """States of the seed's first pose, tilted a little, joints bent and moving, walking at ``speed`` along a
    random heading."""
    rng = np.random.default_rng(0)
    q = np.repeat(seed.qpos[:1], n, axis=0)
    yaw = rng.uniform(-np.pi, np.pi, n)
    roll, pitch = rng.normal(0, 0.05, n) / 2, rng.normal(0, 0.05, n) / 2  # half angles; pitch after roll, no yaw
    tilt = np.stack([np.cos(pitch) * np.cos(roll), np.cos(pitch) * np.sin(roll), np.sin(pitch) * np.cos(roll),
                     -np.sin(pitch) * np.sin(roll)], axis=1)  # fmt: skip
    w, x, y, z = yaw_quat(yaw).T  # heading x tilt
    a, b, c, d = tilt.T
    q[:, 3:7] = np.stack([w * a - z * d, w * b - z * c, w * c + z * b, w * d + z * a], axis=1)
    q[:, 7:] += rng.normal(0, 0.1, q[:, 7:].shape)
    v = np.zeros((n, q.shape[1] - 1))
    v[:, 0], v[:, 1] = speed * np.cos(yaw), speed * np.sin(yaw)
    v[:, 6:] = rng.normal(0, 1.0, v[:, 6:].shape)
    return to_states(q, v, np.zeros(n))


def test_a_state_placed_at_another_spot_and_heading_keeps_its_gait(seed):
    states = _gait(seed)
    nq = seed.qpos.shape[1]
    assert states.shape[1] == state_width(nq, nq - 1)
    np.testing.assert_allclose(forward_speed(states), 0.5, atol=1e-9)  # along its own heading, whatever it was
    xy, yaw = np.tile([[3.0, -1.0]], (len(states), 1)), np.full(len(states), 0.7)
    qpos, qvel = place(states, xy, yaw, nq, floor=0.25)
    placed_yaw, gravity = yaw_and_gravity(qpos[:, 3:7])
    np.testing.assert_allclose(placed_yaw, 0.7, atol=1e-9)
    _, own_gravity = yaw_and_gravity(states[:, 1:5])  # the tilt, seen from the body, does not change
    np.testing.assert_allclose(gravity, own_gravity, atol=1e-9)
    np.testing.assert_allclose(qpos[:, 0:2], xy)
    np.testing.assert_allclose(qpos[:, 2], states[:, 0] + 0.25)
    np.testing.assert_allclose(qpos[:, 7:], states[:, 5 : 5 + nq - 7])
    np.testing.assert_allclose(qvel[:, 0], 0.5 * np.cos(0.7), atol=1e-9)
    np.testing.assert_allclose(qvel[:, 1], 0.5 * np.sin(0.7), atol=1e-9)
    np.testing.assert_allclose(to_states(qpos, qvel, np.full(len(qpos), 0.25)), states, atol=1e-9)


def test_walking_starts_put_that_share_of_episodes_mid_stride_at_the_start_frame(seed):
    states = _gait(seed)
    still = {"start_window_s": 0.2, "start_at_zero": 0.0, "start_posture": "default", "init_root_noise": 0.0}
    env = TrackingEnv(_env_cfg(seed, states, walking_starts=0.5, **still), 200, seed=4)
    walking = env.walking.copy()
    assert 70 < walking.sum() < 130  # about half
    nj = env.num_actions
    recorded = {tuple(np.round(s[5 : 5 + nj], 9)) for s in states}  # each walking env holds one recorded pose
    assert all(tuple(np.round(q, 9)) in recorded for q in env.qpos[walking][:, 7:])  # in qpos order
    ref = env.ref.qpos[env.lane, env.start_frame]
    np.testing.assert_allclose(env.qpos[:, 0:2], ref[:, 0:2], atol=1e-9)  # at the start frame's spot
    heading, _ = yaw_and_gravity(ref[:, 3:7])
    v = env.qvel[walking, 0] * np.cos(heading[walking]) + env.qvel[walking, 1] * np.sin(heading[walking])
    np.testing.assert_allclose(v, 0.5, atol=1e-9)  # walking along the reference's heading
    assert np.abs(env.qvel[walking][:, env.joint_qvel]).max() > 0.5  # the legs move
    standing = ~walking
    assert np.abs(env.qpos[standing][:, env.joint_qpos] - env.default_joint_pos).max() <= 0.05 + 1e-9
    assert np.abs(env.qvel[standing][:, 6:]).max() == 0.0
    env.step(torch.zeros(env.num_envs, nj))  # the physics takes the placed states
    assert np.isfinite(env.qpos).all()

    trials = TrackingEnv(_env_cfg(seed, states, walking_starts=1.0, **still), 4, seed=5)
    trials.start_trials()
    assert trials.walking.all() and (trials.start_frame == 0).all()
    while len(trials.finished) < 1:
        trials.step(torch.zeros(4, nj))
    assert trials.finished[0]["walking_start"] is True


def test_walking_episodes_can_keep_their_own_timing_while_standing_ones_stay_held_to_the_clock(seed):
    states = _gait(seed)
    unheld = {"terminations": {"walking_unheld_z": 1.0}, "start_window_s": 0.2, "start_posture": "default"}
    env = TrackingEnv(_env_cfg(seed, states, walking_starts=0.5, **unheld), 64, seed=4)
    assert 0 < env.walking.sum() < 64
    for error in (0.5, 1.5):  # a height error past the standing episodes' 0.25, then past the walking ones' 1.0
        verdict = env._fell({"anchor_z": np.full(64, error), "end_z": np.full(64, error)})
        expected = np.ones(64, bool) if error > 1.0 else ~env.walking
        assert (verdict["anchor_z"] == expected).all() and (verdict["end_body_z"] == expected).all()
    held = TrackingEnv(_env_cfg(seed, states, walking_starts=0.5, start_posture="default"), 64, seed=4)
    assert held._fell({"anchor_z": np.full(64, 0.5), "end_z": np.zeros(64)})["anchor_z"].all()
    with pytest.raises(ConfigError, match="walking_unheld_z"):
        tracking_task(overrides={"terminations": {"walking_unheld_z": 0.0}})


def test_walking_starts_can_begin_behind_the_start_frame_where_the_clock_waits_for_them(seed):
    states = _gait(seed)
    still = {"start_window_s": 0.2, "start_at_zero": 0.0, "start_posture": "default", "init_root_noise": 0.0}
    env = TrackingEnv(_env_cfg(seed, states, walking_starts=0.5, walking_lead_in_m=0.3, **still), 200, seed=4)
    walking = env.walking.copy()
    behind = env.ref.qpos[env.lane, env.start_frame, 0] - env.qpos[:, 0]
    np.testing.assert_allclose(behind, env.lead_in, atol=1e-9)
    assert (env.lead_in[~walking] == 0).all() and not env.waiting[~walking].any()  # standing ones on their frame
    assert 0.25 < env.lead_in[walking].max() <= 0.3 and (env.waiting[walking] == (env.lead_in[walking] > 0.05)).all()
    frames = env.frame.copy()
    env.step(torch.zeros(env.num_envs, env.num_actions))
    held = walking & env.waiting  # still behind: their reference holds its frame; the others' clocks run
    assert held.any() and (env.frame[held] == frames[held]).all()
    assert (env.frame[~walking] == frames[~walking] + 1).all()
    with pytest.raises(ConfigError, match="not both"):
        tracking_task(overrides={"walking_lead_in_m": 0.3, "lead_in_m": 0.2})


def test_walking_starts_without_fitting_states_are_refused(seed):
    with pytest.raises(ValueError, match="walking_starts 0.5 needs recorded walking states"):
        _env_cfg(seed, None, walking_starts=0.5)
    with pytest.raises(ValueError, match=r"walking states of shape \[3, 7\] do not fit robot"):
        TrackingEnv(_env_cfg(seed, np.zeros((3, 7)), walking_starts=0.5), 2)
    with pytest.raises(ConfigError, match="walking_starts"):
        tracking_task(overrides={"walking_starts": 1.5})


class _Stand:
    """Actions of 0 under the terrain env's default pose, with the memory the recorders reset."""

    class Memory:
        def reset(self, done):
            return self

    def initial_memory(self, n):
        return self.Memory()

    def observe(self, obs):
        return obs

    def step(self, obs, memory):
        n = next(iter(obs["policy"].values())).shape[0]
        return torch.zeros(n, self.actions), memory, None

    def __init__(self, actions: int):
        self.actions = actions


def test_recording_keeps_every_kth_step_of_envs_past_the_warm_up():
    from llp.sim.env import ParkourEnv
    from llp.sim.tasks import env_config

    flat = {"terrain": {"tile_types": ["flat"], "num_levels": 1}}
    env = ParkourEnv(env_config("locomotion", "lightbot0_like", flat), 4, seed=0)
    cfg = WalkingStatesConfig(envs=4, steps=10, warmup_s=0.1, every=2)  # 5 steps of warm-up at 50 Hz
    states = record_walking_states(env, _Stand(env.num_actions), cfg)
    assert states.shape == (3 * 4, state_width(env.model.nq, env.model.nv))  # steps 4, 6 and 8 of 4 envs
    np.testing.assert_allclose(states[-4:, 0], env.qpos[:, 2] - env.terrain.height_at(env.qpos[:, 0:2]), atol=0.02)
    with pytest.raises(ValueError, match="never passed the 5.0 s warm-up"):
        record_walking_states(env, _Stand(env.num_actions), WalkingStatesConfig(envs=4, steps=3, warmup_s=5.0))


def test_trials_that_walk_in_from_behind_the_start_report_their_success_per_band_of_that_distance(seed):
    from llp.skills.trials import DefaultPose, lead_in_words, run_trials, success_by_lead_in

    made_up = [{"lead_in_m": 0.05, "success": True}, {"lead_in_m": 0.06, "success": False},
               {"lead_in_m": 0.3, "success": True}, {"lead_in_m": 0.25, "success": False}]  # fmt: skip
    by_band = success_by_lead_in(made_up, 0.3)
    assert by_band == {"0.00-0.10 m": 0.5, "0.20-0.30 m": 0.5}  # the far edge counts in the last band; none between
    assert lead_in_words(by_band) == "; by distance behind the start: 0.00-0.10 m 50%, 0.20-0.30 m 50%"
    assert lead_in_words({}) == "" and success_by_lead_in(made_up, 0.0) == {}  # no distance, no bands

    states = _gait(seed)
    cfg = _env_cfg(seed, states, walking_starts=1.0, walking_lead_in_m=0.3, start_posture="default")
    records = run_trials(cfg, DefaultPose(TrackingEnv(cfg, 1).num_actions), 12, seed=3)
    behind = np.array([t["lead_in_m"] for t in records])
    assert len(records) == 12 and all(t["walking_start"] for t in records) and 0 <= behind.min() < behind.max() <= 0.3
    by_band = success_by_lead_in(records, 0.3)
    counted = [((behind >= k / 10) & (behind < (k + 1) / 10)).sum() for k in range(3)]
    assert list(by_band) == [f"{k / 10:.2f}-{(k + 1) / 10:.2f} m" for k in range(3) if counted[k]]
    assert all(rate == 0.0 for rate in by_band.values())  # the default pose held does not climb


def test_phase_b_evaluates_each_start_alone_whatever_phase_b_trained_with(seed):
    """Phase B walks in over a band (walking_lead_in_m); its evaluation starts do not inherit it: the standing
    walk-in stands behind the start with the clock waiting, the walking start walks in at the start, and the
    walking lead-in walks in from the band."""
    from llp.config.pipeline import load_pipeline
    from llp.stages.registry import stage_config
    from llp.stages.skill_expert import phase_b_starts

    cfg = stage_config(load_pipeline("local"), "skill_climb_step")
    states = _gait(seed)
    band = cfg.generalization.env["walking_lead_in_m"]
    gen = _env_cfg(seed, states, walking_starts=0.5, walking_lead_in_m=band, start_posture="default")
    starts = phase_b_starts(cfg, gen, states)
    assert list(starts) == ["standing start", "walk-in start", "walking start", "walking lead-in"]
    placed = {}
    for name, env_cfg in starts.items():
        env = TrackingEnv(env_cfg, 48, seed=6)
        env.start_trials()
        placed[name] = env
    assert not placed["standing start"].walking.any() and (placed["standing start"].lead_in == 0).all()
    walk_in = placed["walk-in start"]
    assert not walk_in.walking.any() and 0.25 < walk_in.lead_in.max() <= cfg.walk_in_m
    assert (walk_in.waiting == (walk_in.lead_in > walk_in.cfg.task.lead_in_tolerance_m)).all()  # the clock waits
    assert placed["walking start"].walking.all() and (placed["walking start"].lead_in == 0).all()
    lead = placed["walking lead-in"]
    assert lead.walking.all() and 0.25 < lead.lead_in.max() <= band and lead.waiting.any()
    assert not phase_b_starts(cfg, gen, None).keys() & {"walking start", "walking lead-in"}  # no teacher's walk
