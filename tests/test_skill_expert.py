"""The climb-and-step expert's pieces: the tracking expert's labels and observations re-expressed for a student
whose actions offset the default pose, the height scan over the box, and the stage's config checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llp.motion.seeds import seed_reference, seed_spec
from llp.motion.tracking import TrackingEnvConfig, tracking_task
from llp.motion.tracking_env import TrackingEnv

SKILL_ENV = {
    "action_offset": "default",
    "observations": {"policy": ["proprio", "reference", "obstacle", "height_scan", "command"]},
    "rewards": {"goal": {"weight": 1.0, "std": 0.5}},
}


@pytest.fixture(scope="module")
def seed():
    return seed_reference(seed_spec("climb_step_25"))


def _env(seed, n: int, overrides: dict) -> TrackingEnv:
    cfg = TrackingEnvConfig(task=tracking_task(overrides=overrides), qpos=seed.qpos, fps=seed.fps,
                            obstacle=seed.obstacle, contacts=seed.contacts, reference_id=seed.id)  # fmt: skip
    return TrackingEnv(cfg, n, seed=5)


def test_an_expert_label_converted_to_default_offsets_gives_the_same_joint_targets_and_the_same_motion(seed):
    """The same start, the expert's action in its terms in one env and converted in the other: same targets, same
    physics, and the expert reads the same proprioception (its own last action) in both."""
    expert_env = _env(seed, 4, {"observations": SKILL_ENV["observations"]})
    skill_env = _env(seed, 4, SKILL_ENV)
    ids = torch.arange(4)
    rng = np.random.default_rng(0)
    for _ in range(6):
        a = torch.from_numpy(rng.normal(0, 0.3, size=(4, expert_env.num_actions)).astype(np.float32))
        converted = skill_env.convert_actions(a, ids, "reference")
        assert not torch.allclose(converted, a)  # the offsets differ: (reference - default) / scale
        r1, r2 = expert_env.step(a), skill_env.step(converted)
        np.testing.assert_allclose(skill_env.ctrl, expert_env.ctrl, atol=1e-5)
        np.testing.assert_allclose(skill_env.qpos, expert_env.qpos, atol=1e-4)
        seen = skill_env.teacher_obs(r2.obs, ids, "reference")["policy"]["proprio"]
        torch.testing.assert_close(seen, r1.obs["policy"]["proprio"], atol=1e-4, rtol=0)
        # the student's own proprioception holds its own last action
        torch.testing.assert_close(r2.obs["policy"]["proprio"][:, -skill_env.num_actions :], converted)


def test_the_height_scan_reads_the_box_ahead_and_the_command_is_the_motions_speed(seed):
    env = _env(seed, 2, SKILL_ENV)
    obs = env.reset()["policy"]
    scan, points = obs["height_scan"].numpy(), env.scan_points
    box = seed.obstacle
    assert scan.shape == (2, len(points)) == (2, 187)
    x = env.qpos[:, 0:1] + points[None, :, 0]  # the robot starts facing +x, at the motion's start
    inside = (x >= box.front_x + 0.02) & (x <= box.front_x + box.depth - 0.02) & (np.abs(points[None, :, 1]) < 0.5)
    outside = (x < box.front_x - 0.02) | (x > box.front_x + box.depth + 0.02)
    level = env.qpos[:, 2:3] - env.task.robot.base_height  # the scan is relative to the standing pelvis height
    assert inside.any() and outside.any()
    np.testing.assert_allclose(scan[inside], np.broadcast_to(box.height - level, scan.shape)[inside], atol=1e-5)
    np.testing.assert_allclose(scan[outside], np.broadcast_to(-level, scan.shape)[outside], atol=1e-5)
    speed = (seed.qpos[-1, 0] - seed.qpos[0, 0]) / ((len(seed.qpos) - 1) / seed.fps)
    np.testing.assert_allclose(obs["command"].numpy(), [[speed, 0, 0]] * 2, atol=1e-6)
    assert 0.1 < speed < 0.3


def test_the_goal_reward_peaks_on_top_of_the_box(seed):
    env = _env(seed, 1, SKILL_ENV)
    k = env.reward_names.index("goal")
    env.qpos[:] = env.ref.qpos[0, -1]
    env.batch.forward(np.arange(1))
    on_top = env._rewards()[0][0, k]
    env.qpos[:] = env.ref.qpos[0, 0]
    env.batch.forward(np.arange(1))
    at_start = env._rewards()[0][0, k]
    assert on_top == pytest.approx(1.0, abs=1e-6) and at_start < 0.5 * on_top


@pytest.mark.parametrize(
    "override, where, message",
    [
        ({"actor": {"obs": ["policy/proprio", "policy/reference"]}}, "actor.obs[1]", "what the robot senses"),
        ({"env": {"action_offset": "reference"}}, "env.action_offset", "offsets the default pose"),
        ({"ppo": {"dagger_coef": 0.0}}, "ppo.dagger_coef", "learns from the tracking expert"),
        ({"actor": {"obs": ["policy/proprio", "policy/depth"]}}, "actor.obs[1]", "is not an observation"),
        (
            {"generalization": {"env": {"start_posture": "crouch"}}},
            "generalization.env.start_posture",
            "reference or default",
        ),
        ({"generalization": {"env": {"lead_in_m": -0.1}}}, "generalization.env.lead_in_m", "must be >= 0"),
        ({"walk_in_m": -0.1}, "walk_in_m", "must be >= 0"),
        ({"phase_a": "all"}, "phase_a", "one of hardest, every"),
        ({"generalization": {"ppo": {"dagger_coef": 1.0}}}, "generalization.ppo.dagger_coef", "no expert labels"),
        ({"generalization": {"ppo": {"num_steps": 12}}}, "generalization.ppo.num_steps", "rollout length 8"),
        (
            {"generalization": {"env": {"walking_starts": 0.5}}, "teacher": ""},
            "generalization.env.walking_starts",
            "need a teacher stage to walk",
        ),
        ({"env": {"walking_starts": 0.5}}, "env.walking_starts", "phase A starts on its reference"),
        ({"walking": {"speed": [0.6, 0.3]}}, "walking.speed", "0 <= lo <= hi"),
        ({"generalization": {"lane_shares": [1.0, 0.0]}}, "generalization.lane_shares", "every share must be > 0"),
        (
            {"generalization": {"env": {"terminations": {"max_tilt": 0.0}}}},
            "generalization.env.terminations.max_tilt",
            "radians in (0, pi)",
        ),
        ({"env": {"terminations": {"min_base_height": -0.1}}}, "env.terminations.min_base_height", "must be > 0"),
    ],
)
def test_a_bad_skill_config_names_its_field(override, where, message):
    from llp.config.pipeline import load_pipeline, resolved
    from llp.config.schema import ConfigError, build, merge
    from llp.stages.skill_expert import SkillExpertConfig

    base = resolved(load_pipeline("smoke"))["stages"]["skill_climb_step"]
    assert base.pop("kind") == "skill_expert"  # which stage it is; the rest is its config
    build(SkillExpertConfig, base, "stages.skill_climb_step")
    with pytest.raises(ConfigError) as err:
        build(SkillExpertConfig, merge(base, override), "stages.skill_climb_step")
    assert f"stages.skill_climb_step.{where}" in str(err.value) and message in str(err.value)


def test_the_skill_env_replays_the_motion_the_tracker_was_trained_on(seed, tmp_path):
    """A growth round keeps its physics rollout as the entry's motion and the proposal its tracker learned as
    ``tracked``; the skill stage takes the tallest accepted round and gives the tracker that proposal; phase B
    tracks every accepted round's rollout, one lane each."""
    from dataclasses import replace

    from llp.config.pipeline import load_pipeline
    from llp.motion.library import ReferenceLibrary
    from llp.skills.library import hardest_reference, skill_references
    from llp.stages.registry import stage_config
    from llp.stages.skill_expert import generalization_env, skill_env

    library = ReferenceLibrary(tmp_path / "lib")
    library.add(seed)
    rollout, proposal = seed.qpos + 0.01, seed.qpos + 0.02
    for r, height in ((1, 0.275), (2, 0.30)):
        library.add(replace(seed, id=f"climb_step_25.r{r}", round=r, parent=f"climb_step_25.r{r - 1}", qpos=rollout,
                            tracked=proposal, obstacle=replace(seed.obstacle, height=height)))  # fmt: skip
    ref = hardest_reference(tmp_path / "lib", "climb_step")  # read back from disk
    assert ref.id == "climb_step_25.r2" and np.array_equal(ref.qpos, rollout) and np.array_equal(ref.tracked, proposal)
    cfg = stage_config(load_pipeline("smoke"), "skill_climb_step")
    assert np.array_equal(skill_env(cfg, [ref]).qpos, proposal)
    refs = skill_references(tmp_path / "lib", "climb_step")  # phase B: every physics-tracked round, lowest first
    from llp.motion.walking_states import to_states

    walk = to_states(seed.qpos[:4], np.zeros((4, seed.qpos.shape[1] - 1)), np.zeros(4))  # phase B's walking starts
    gen = generalization_env(cfg, refs, walk)
    assert [lane.reference_id for lane in gen.references()] == ["climb_step_25.r1", "climb_step_25.r2"]
    assert [lane.obstacle.height for lane in gen.references()] == [0.275, 0.30]
    assert all(np.array_equal(lane.qpos, rollout) for lane in gen.references())  # the rollouts, not the proposals
    assert gen.task.start_posture == "default" and gen.task.start_window_s == 0.2 and gen.task.start_at_zero == 0
    with pytest.raises(ValueError, match=r"\[.climb_step_25.r2.\] do not record the motion their tracker"):
        skill_env(cfg, [replace(ref, tracked=None)])
    with pytest.raises(ValueError, match="no accepted physics-tracked 'speed_vault' entry"):
        hardest_reference(tmp_path / "lib", "speed_vault")
    from llp.motion.library import LibraryError, SkillObstacle, accepted_obstacle

    assert accepted_obstacle(tmp_path / "lib", "climb_step") == SkillObstacle("climb", (0.275, 0.30), 0.6)
    library.add(replace(seed, id="climb_step_25.r3", round=3, parent="climb_step_25.r2", qpos=rollout, tracked=proposal,
                        obstacle=replace(seed.obstacle, height=0.325, depth=0.8)))  # fmt: skip
    with pytest.raises(LibraryError, match=r"differ in obstacle \(kind, depth\): \[\('climb', 0.6\), \('climb', 0.8"):
        accepted_obstacle(tmp_path / "lib", "climb_step")


def test_a_skill_with_a_teacher_takes_its_policy_as_an_input():
    from llp.stages.registry import STAGES
    from llp.stages.skill_expert import SkillExpertConfig

    spec = STAGES["skill_expert"]
    assert "teacher" not in spec.inputs(SkillExpertConfig(teacher=""))
    assert spec.inputs(SkillExpertConfig(teacher="locomotion_teacher"))["teacher"] == "locomotion_teacher.policy"


def test_phase_a_over_every_height_routes_each_lane_to_its_own_round_s_tracker(seed, tmp_path):
    """With ``phase_a: every``, phase A tracks every accepted round's proposal, one lane each, and each lane's
    envs are labelled by that round's tracker, recorded in its library entry; a library without per-round trackers
    is refused by name, and a teacher routed to a lane the env does not have is refused."""
    from dataclasses import replace

    from llp.config.pipeline import load_pipeline
    from llp.learn.configs import PPOConfig
    from llp.learn.learner import teacher_groups
    from llp.learn.spec import FrozenPolicy, TeacherSpec, TrainSpec
    from llp.motion.library import ReferenceLibrary
    from llp.skills.library import skill_references
    from llp.stages.registry import stage_config
    from llp.stages.skill_expert import phase_a_teachers, skill_env

    library = ReferenceLibrary(tmp_path / "lib")
    library.add(seed)
    for r, height in ((1, 0.275), (2, 0.30)):
        library.add(replace(seed, id=f"climb_step_25.r{r}", round=r, parent=f"climb_step_25.r{r - 1}",
                            qpos=seed.qpos + 0.01 * r, tracked=seed.qpos + 0.02 * r,
                            obstacle=replace(seed.obstacle, height=height)))  # fmt: skip
    refs = skill_references(tmp_path / "lib", "climb_step")
    cfg = replace(stage_config(load_pipeline("smoke"), "skill_climb_step"), phase_a="every")

    class Ctx:  # the one context call phase_a_teachers makes
        def frozen_policy(self, uri):
            return FrozenPolicy(uri, b"", {})

    with pytest.raises(ValueError, match=r"records none for \['climb_step_25.r1', 'climb_step_25.r2'\]"):
        phase_a_teachers(Ctx(), cfg, refs, "models:/tracker/2")
    library.set_tracker("climb_step_25.r1", "models:/tracker/1")
    library.set_tracker("climb_step_25.r2", "models:/tracker/2")
    refs = skill_references(tmp_path / "lib", "climb_step")  # read back from the index
    assert [r.tracker for r in refs] == ["models:/tracker/1", "models:/tracker/2"]
    taught, trackers = phase_a_teachers(Ctx(), cfg, refs, "models:/tracker/2")
    assert [t.uri for t in trackers] == ["models:/tracker/1", "models:/tracker/2"]
    hardest = phase_a_teachers(Ctx(), replace(cfg, phase_a="hardest"), refs, "models:/tracker/2")
    assert [r.id for r in hardest[0]] == ["climb_step_25.r2"] and hardest[1][0].uri == "models:/tracker/2"

    env_cfg = skill_env(cfg, taught)
    assert [lane.reference_id for lane in env_cfg.references()] == ["climb_step_25.r1", "climb_step_25.r2"]
    assert all(np.array_equal(lane.qpos, r.tracked) for lane, r in zip(env_cfg.references(), refs, strict=True))
    teachers = [TeacherSpec(t, lanes=[r.id]) for r, t in zip(taught, trackers, strict=True)]
    common = dict(env=env_cfg, envs_per_actor=6, seed=0, actor=cfg.actor, critic=cfg.critic,
                  ppo=PPOConfig(dagger_coef=1.0))  # fmt: skip
    spec = TrainSpec(**common, teachers=teachers)
    env = TrackingEnv(env_cfg, 6, seed=1)
    groups = teacher_groups(spec, env.course_state()["column"])
    assert groups.tolist() == env.lane.tolist() == [0, 1, 0, 1, 0, 1]  # env i tracks lane i mod 2: its tracker
    with pytest.raises(ValueError, match=r"lanes \['climb_step_25.r3'\] are not in the tracking env's lanes"):
        TrainSpec(**common, teachers=[TeacherSpec(trackers[0], lanes=["climb_step_25.r3"])])


def test_phase_b_gives_the_taller_lanes_their_shares_of_the_envs(seed, tmp_path):
    """``generalization.lane_shares`` splits phase B's envs over the library's heights, lowest first; a list that
    does not match the library is refused with its references named."""
    from dataclasses import replace

    from llp.config.pipeline import load_pipeline
    from llp.motion.library import ReferenceLibrary
    from llp.skills.library import skill_references
    from llp.stages.registry import stage_config
    from llp.stages.skill_expert import generalization_env

    library = ReferenceLibrary(tmp_path / "lib")
    library.add(seed)
    for r, height in ((1, 0.275), (2, 0.30)):
        library.add(replace(seed, id=f"climb_step_25.r{r}", round=r, parent=f"climb_step_25.r{r - 1}",
                            tracked=seed.qpos, obstacle=replace(seed.obstacle, height=height)))  # fmt: skip
    refs = skill_references(tmp_path / "lib", "climb_step")
    cfg = stage_config(load_pipeline("smoke"), "skill_climb_step")
    cfg = replace(cfg, generalization=replace(cfg.generalization, lane_shares=[1.0, 2.0], env={
        **cfg.generalization.env, "walking_starts": 0.0}))  # fmt: skip
    env = TrackingEnv(generalization_env(cfg, refs), 6, seed=0)
    assert env.lane_ids == ["climb_step_25.r1", "climb_step_25.r2"] and env.lane.tolist() == [1, 0, 1, 1, 0, 1]
    wrong = replace(cfg, generalization=replace(cfg.generalization, lane_shares=[1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match=r"lane_shares \[1.0, 2.0, 3.0\] needs one share per accepted reference, "
                       r"lowest to highest: the library has 2 \(climb_step_25.r1, climb_step_25.r2\)"):  # fmt: skip
        generalization_env(wrong, refs)
