"""Reference augmentation's pieces: raising a reference with its box, and the physics tracking env."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from llp.config.files import named
from llp.config.schema import build
from llp.motion.growth import raise_reference, raised_targets
from llp.motion.scene import Contact, ObstacleBox
from llp.motion.seeds import seed_reference, seed_spec
from llp.motion.tracking import TrackingEnvConfig, tracking_task
from llp.motion.tracking_env import TrackingEnv
from llp.sim.robot import RobotConfig
from llp.sim.scene import TERRAIN_FRICTION


@pytest.fixture(scope="module")
def seed():
    return seed_reference(seed_spec("climb_step_25"))


def _standing(frames: int, lift: float = 0.0) -> np.ndarray:
    """The robot's crouch keyframe held for ``frames`` frames, its pelvis rising by ``lift`` metres."""
    from llp.sim.robot import load_robot_spec

    robot = build(RobotConfig, named("robot", "lightbot0_like"), "robot")
    model = load_robot_spec(robot).compile()
    q = np.repeat(model.key(robot.keyframe).qpos[None], frames, axis=0)
    q[:, 2] = robot.base_height + 0.005 + np.linspace(0, lift, frames)
    return q


def _env(qpos: np.ndarray, n: int, **overrides) -> TrackingEnv:
    box = ObstacleBox(kind="climb", height=0.25, depth=0.6, width=1.2, front_x=2.0)
    contacts = [Contact(frame="left_foot", surface="floor", start=0.0, end=0.2)]
    cfg = TrackingEnvConfig(task=tracking_task(overrides=overrides), qpos=qpos, fps=50.0, obstacle=box,
                            contacts=contacts, reference_id="test")  # fmt: skip
    return TrackingEnv(cfg, n, seed=3)


def test_raising_lifts_what_stands_on_the_box_by_the_step_and_the_body_by_its_share():
    box = ObstacleBox(kind="climb", height=0.25, depth=0.6, width=1.2, front_x=0.45)
    floor, top = 0.046, 0.296
    left = np.array([[0.0, 0.07, floor]] * 5 + [[0.5, 0.07, top]] * 5)
    right = np.array([[0.0, -0.07, floor]] * 10)
    pelvis = np.array([[0.0, 0.0, 0.44]] * 10)
    out = raised_targets({"left_foot": left, "right_foot": right, "pelvis": pelvis}, box, dz=0.05)
    np.testing.assert_allclose(out["left_foot"][:5], left[:5])
    np.testing.assert_allclose(out["left_foot"][5:, 2], top + 0.05)
    np.testing.assert_allclose(out["right_foot"], right)  # never left the floor
    np.testing.assert_allclose(out["pelvis"][:5, 2], 0.44)
    np.testing.assert_allclose(out["pelvis"][5:, 2], 0.44 + 0.025)  # one foot of two on the box


def test_a_hand_just_over_the_top_keeps_its_clearance_and_one_far_from_it_rises_by_the_bodys_share():
    box = ObstacleBox(kind="climb", height=0.45, depth=0.6, width=1.2, front_x=0.25)
    left = np.array([[0.0, 0.07, 0.046]] + [[0.42, 0.07, 0.5]] * 4)  # then on the top: the body's share is 1/2
    right = np.array([[0.0, -0.07, 0.046]] * 5)
    hand = np.array([[0.05, -0.18, 0.40],  # standing: nothing rises
                     [0.27, -0.18, 0.47],  # 2 cm over the top, 2 cm past the front edge
                     [0.22, -0.18, 0.47],  # 3 cm before the edge: 70% of the step
                     [0.30, -0.18, 0.80],  # 35 cm over the top
                     [0.00, -0.18, 0.47]])  # fmt: skip  # far in front of the box
    out = raised_targets({"left_foot": left, "right_foot": right, "right_hand": hand}, box, dz=0.05)
    np.testing.assert_allclose(out["right_hand"][:, 2] - hand[:, 2], [0.0, 0.05, 0.035, 0.025, 0.025])


def test_the_growth_ik_keeps_the_legs_off_the_box_where_the_targets_would_push_the_knees_into_it():
    """A squat in front of a box: the targets pull the knees 4 cm into it; kept clear of it (mink's collision
    avoidance, ``Retargeter.clear_of``), the legs stop at its face and the pelvis stays higher instead."""
    from llp.motion.retarget import Retargeter, retarget_config, yaw_rotation
    from llp.motion.scene import SceneModel

    robot = build(RobotConfig, named("robot", "lightbot0_like"), "robot")
    cfg = retarget_config("lightbot0_like")
    solver = Retargeter(cfg, robot)
    start = solver.frame_positions(solver.default_q[None])
    n = 40
    targets = {k: np.repeat(start[k], n, 0) for k in ("pelvis", "left_foot", "right_foot")}
    targets["pelvis"][:, 2] -= np.linspace(0.0, 0.15, n)  # squat 15 cm, the feet where they stand
    level = {k: yaw_rotation(np.zeros(n)) for k in targets}
    box = ObstacleBox(kind="climb", height=0.3, depth=0.4, width=1.0, front_x=0.12)
    scene = SceneModel(robot, box, cfg.contact_frames)

    def deepest(qpos):
        out = 0.0
        for q in qpos:
            scene.set_qpos(q)
            out = min(out, min(scene.distance(g, scene.box_id) for g in scene.robot_geoms))
        return -out

    free, clear = solver.solve(targets, level, 50.0), solver.clear_of(box).solve(targets, level, 50.0)
    assert deepest(free) > 0.04 and deepest(clear) < 0.005
    assert solver.frame_positions(clear[-1:])["pelvis"][0, 2] > solver.frame_positions(free[-1:])["pelvis"][0, 2]


def test_a_seeds_growth_costs_override_its_frame_costs_only_in_the_growth_ik():
    spec = seed_spec("climb_step_45")
    assert spec.growth_frame_costs == {"left_hand": 2.0, "right_hand": 2.0}
    from llp.motion.seeds import seed_retarget_config

    solve, grow = seed_retarget_config(spec), seed_retarget_config(spec, growth=True)
    assert solve.frames["right_hand"].position_cost == 0.5 and grow.frames["right_hand"].position_cost == 2.0
    assert solve.frames["left_foot"].position_cost == grow.frames["left_foot"].position_cost == 10.0


def test_a_foot_that_sank_into_the_box_in_physics_is_proposed_on_the_raised_top():
    box = ObstacleBox(kind="climb", height=0.25, depth=0.6, width=1.2, front_x=0.45)
    ankle = 0.047
    sunk = np.array([[0.0, 0.07, ankle - 0.008]] * 3 + [[0.6, 0.07, 0.25 + ankle - 0.01]] * 3)  # 1 cm into the top
    still = np.array([[0.0, -0.07, ankle]] * 6)
    out = raised_targets({"left_foot": sunk, "right_foot": still, "pelvis": np.zeros((6, 3))}, box, 0.03, ankle)
    np.testing.assert_allclose(out["left_foot"][:3, 2], ankle)  # on the floor, not 8 mm in it
    np.testing.assert_allclose(out["left_foot"][3:, 2], 0.28 + ankle)  # on the raised top, not 1 cm in it


def test_a_foot_on_its_toes_on_the_floor_climbs_nothing_when_its_sole_is_given():
    box = ObstacleBox(kind="climb", height=0.45, depth=0.6, width=1.2, front_x=0.25)
    toes = np.array([[0.03, -0.07, 0.046]] * 2 + [[0.03, -0.07, 0.10]] * 4)  # the heel rises, the ankle 5 cm up
    flat = np.array([[0.0, 0.07, 0.046]] * 6)
    feet = {"left_foot": flat, "right_foot": toes, "pelvis": np.array([[0.0, 0.0, 0.45]] * 6)}  # before the box
    by_ankle = raised_targets(feet, box, 0.05)
    assert by_ankle["right_foot"][-1, 2] > toes[-1, 2] + 0.005  # the ankle rule reads the heel as climbing
    soles = {"left_foot": np.zeros(6), "right_foot": np.zeros(6)}  # both soles on the floor all along
    by_sole = raised_targets(feet, box, 0.05, soles=soles)
    np.testing.assert_allclose(by_sole["right_foot"], toes)
    np.testing.assert_allclose(by_sole["pelvis"], feet["pelvis"])


def test_the_45_cm_step_up_seed_keeps_the_right_toes_down_until_the_left_heel_is_on_the_top_and_grows_5_cm():
    from llp.motion import acceptance as A
    from llp.motion.growth import sole_heights
    from llp.motion.retarget import Retargeter
    from llp.motion.scene import SceneModel
    from llp.motion.seeds import seed_retarget_config

    spec = seed_spec("climb_step_45")
    ref = seed_reference(spec, physics=False)  # the keyframes' motion, before the simulator drives it
    checks = {a.name: a for a in ref.acceptance}
    assert checks["kinematic"].passed and checks["scene"].passed, [a.reason for a in checks.values()]
    robot = build(RobotConfig, named("robot", spec.robot), "robot")
    solver = Retargeter(seed_retarget_config(spec), robot)
    lift = slice(int(0.3 * spec.fps), int(0.95 * spec.fps))  # the left foot in the air, then its heel landing
    soles = sole_heights(solver, ref.qpos)
    ankles = solver.frame_positions(ref.qpos, ["right_foot"])["right_foot"][:, 2]
    assert soles["right_foot"][lift].max() < 0.01  # no flight: the right toes hold the floor all along
    assert np.all(ankles[int(0.65 * spec.fps) : int(0.95 * spec.fps)] > 0.07)  # on its toes, the heel up
    assert soles["left_foot"][int(0.95 * spec.fps)] == pytest.approx(0.45, abs=0.015)
    qpos, box, _ = raise_reference(solver, ref.qpos, spec.obstacle, 0.05, spec.fps, spec.contacts)
    scene = SceneModel(robot, box, solver.cfg.contact_frames)
    grown = A.scene_relation(scene, qpos, spec.fps, spec.contacts, 0.01, 0.02)  # the stage's limits
    assert box.height == pytest.approx(0.50) and grown.passed, grown.reason
    assert sole_heights(solver, qpos)["right_foot"][lift].max() < 0.015  # growth keeps them down too


def test_a_raised_seed_puts_both_feet_on_the_taller_box_and_passes_its_checks(seed):
    from llp.motion import acceptance as A
    from llp.motion.retarget import Retargeter, retarget_config
    from llp.motion.scene import SceneModel

    robot = build(RobotConfig, named("robot", "lightbot0_like"), "robot")
    cfg = retarget_config("lightbot0_like")
    solver = Retargeter(cfg, robot)
    qpos, box, _ = raise_reference(solver, seed.qpos, seed.obstacle, 0.02, seed.fps)
    assert box.height == pytest.approx(0.27) and qpos.shape == seed.qpos.shape
    before, after = solver.frame_positions(seed.qpos), solver.frame_positions(qpos)
    for foot in ("left_foot", "right_foot"):  # standing on top at the end, 2 cm higher (IK within 1 cm)
        assert after[foot][-1, 2] - before[foot][-1, 2] == pytest.approx(0.02, abs=0.01)
        assert after[foot][0, 2] == pytest.approx(before[foot][0, 2], abs=0.005)  # still on the floor at first
    scene = SceneModel(robot, box, cfg.contact_frames)
    assert A.kinematic(scene, qpos, seed.fps, cfg.joint_speed_limit).passed
    relation = A.scene_relation(scene, qpos, seed.fps, seed.contacts, cfg.penetration_limit, cfg.contact_tolerance)
    assert relation.passed, relation.reason


def test_the_pd_controllers_alone_carry_a_standing_reference_to_the_end_and_it_counts_as_success():
    env = _env(_standing(30), 6)
    env.start_trials()
    while len(env.finished) < 6:
        result = env.step(torch.zeros(6, env.num_actions))
    first = {rec["env"]: rec for rec in reversed(env.finished)}
    assert len(first) == 6 and all(r["success"] and not r["fell"] for r in first.values())
    hold = int(round(env.task.hold_s / env.dt))
    assert all(r["frames"] == 29 + hold for r in first.values())  # every frame of the motion, then the hold
    assert all(r["tracking_error_m"] < 0.08 for r in first.values())  # drifts a few cm, standing open loop
    assert result.info["ends"]["end_of_reference"] >= 1 and result.info["ends"]["anchor_z"] == 0
    assert all(len(r["qpos"]) == 30 + hold for r in first.values())  # the trajectory, start state included


def test_a_reference_that_flies_away_ends_the_episode_by_the_pelvis_height_error():
    env = _env(_standing(40, lift=0.6), 4, hold_s=0.0)
    env.start_trials()
    ends: dict[str, int] = {}
    while len(env.finished) < 4:
        result = env.step(torch.zeros(4, env.num_actions))
        for cause, count in result.info["ends"].items():
            ends[cause] = ends.get(cause, 0) + count
    assert not any(r["success"] for r in env.finished) and all(r["fell"] for r in env.finished)
    assert ends["anchor_z"] >= 4 and ends["end_of_reference"] == 0
    assert max(r["frames"] for r in env.finished) < 39  # 0.25 m behind the reference long before its end


def test_training_episodes_start_anywhere_in_the_reference_and_see_the_box_ahead(seed):
    box = seed.obstacle
    cfg = TrackingEnvConfig(task=tracking_task(), qpos=seed.qpos, fps=seed.fps, obstacle=box, contacts=seed.contacts,
                            reference_id=seed.id)  # fmt: skip
    env = TrackingEnv(cfg, 400, seed=1)
    starts = env.start_frame
    assert 0.05 < np.mean(starts == 0) < 0.2  # start_at_zero 0.1, plus the uniform draws of frame 0
    assert starts.max() > 0.8 * len(seed.qpos) and len(np.unique(starts)) > 100
    np.testing.assert_allclose(env.qpos[:, 2], seed.qpos[starts, 2], atol=1e-6)  # the reference's pose there
    obstacle = env.reset()["policy"]["obstacle"].numpy()
    np.testing.assert_allclose(obstacle[:, 0], box.front_x - env.qpos[:, 0], atol=1e-5)
    np.testing.assert_allclose(obstacle[:, 3], box.height, atol=1e-6)
    trials = env.start_trials()
    assert (env.start_frame == 0).all() and trials["policy"]["reference"].shape[1] == 2 * 21 + 7


def test_training_starts_hand_over_a_share_of_the_frame_velocities_and_trials_the_whole(seed):
    def env(share: float) -> TrackingEnv:
        task = tracking_task(overrides={"start_velocity_share": share})
        cfg = TrackingEnvConfig(task=task, qpos=seed.qpos, fps=seed.fps, obstacle=seed.obstacle,
                                contacts=seed.contacts, reference_id=seed.id)  # fmt: skip
        return TrackingEnv(cfg, 64, seed=4)

    whole, half = env(1.0), env(0.5)
    np.testing.assert_array_equal(whole.start_frame, half.start_frame)  # the same starts from the same seed
    lanes, starts = whole.lane, whole.start_frame
    moving = np.abs(whole.ref.qvel[lanes, starts]).sum(axis=1) > 0.1
    assert moving.sum() > 10
    np.testing.assert_allclose(whole.qvel, whole.ref.qvel[lanes, starts], atol=1e-9)
    np.testing.assert_allclose(half.qvel, 0.5 * whole.ref.qvel[lanes, starts], atol=1e-9)
    half.start_trials()  # a trial starts at the first frame with its velocities, whatever the share
    np.testing.assert_allclose(half.qvel, half.ref.qvel[half.lane, 0], atol=1e-9)


def test_friction_is_drawn_per_env_at_every_reset_and_the_physics_feels_it(seed):
    def env(**overrides):
        task = tracking_task(overrides={"init_joint_noise": 0.0, "init_root_noise": 0.0, **overrides})
        cfg = TrackingEnvConfig(task=task, qpos=seed.qpos, fps=seed.fps, obstacle=seed.obstacle,
                                contacts=seed.contacts, reference_id=seed.id)  # fmt: skip
        return TrackingEnv(cfg, 6, seed=2)

    plain, slippery = env(), env(friction=[0.02, 0.02])
    assert plain.env_models is None and (plain.friction == plain.base_friction[0]).all()
    np.testing.assert_allclose(slippery.friction, 0.02)
    for model in slippery.env_models:  # the robot's geoms take it; the floor and the box sit at the terrain's
        np.testing.assert_allclose(model.geom_friction[slippery.robot_geoms, 0], 0.02)  # floor value, below it
        others = np.setdiff1d(np.arange(model.ngeom), slippery.robot_geoms)
        np.testing.assert_allclose(model.geom_friction[others], np.tile(TERRAIN_FRICTION, (len(others), 1)))
    others = np.setdiff1d(np.arange(plain.model.ngeom), plain.robot_geoms)
    assert (plain.model.geom_friction[others, 0] == 1.0).all()  # without it, the scene as before
    still = torch.zeros(6, plain.num_actions)
    for _ in range(25):  # the same start and actions: only the friction differs
        plain.step(still), slippery.step(still)
    drift = np.abs(plain.qpos[:, :3] - slippery.qpos[:, :3]).max(axis=1)
    assert (drift > 1e-3).all()
    ranged = env(friction=[0.5, 1.25])
    first = ranged.friction.copy()
    assert ((first >= 0.5) & (first <= 1.25)).all() and len(np.unique(first)) == 6
    ranged.reset()
    assert not np.allclose(first, ranged.friction)  # a new draw per episode
    with pytest.raises(ValueError, match=r"friction.*need 0 < low <= high"):
        env(friction=[1.0, 0.5])


def test_a_reference_at_another_frame_rate_is_refused_with_the_reason(seed):
    with pytest.raises(ValueError, match="runs at 30.0 fps; the tracking policy at 50 Hz"):
        TrackingEnvConfig(task=tracking_task(), qpos=seed.qpos, fps=30.0, obstacle=seed.obstacle,
                          contacts=seed.contacts, reference_id="slow")  # fmt: skip


def _two_heights(seed, **overrides) -> TrackingEnvConfig:
    """The seed's motion over its box (lane 0) and over a box 10 cm taller (lane 1)."""
    from llp.motion.tracking import Lane

    tall = seed.obstacle.raised(0.10)
    return TrackingEnvConfig(task=tracking_task(overrides=overrides), qpos=seed.qpos, fps=seed.fps,
                             obstacle=seed.obstacle, contacts=seed.contacts, reference_id="low",
                             lanes=[Lane(seed.qpos[:-10], tall, seed.contacts, "tall")])  # fmt: skip


def test_lanes_give_each_env_its_own_reference_box_scan_and_goal(seed):
    """Env i tracks lane i mod 2: its reference, its box (in the obstacle term and the scan) and its goal; each
    lane's reference pose earns the full kernels in its own lane."""
    from llp.motion.tracking_env import LANE_SPACING

    env = TrackingEnv(_two_heights(seed, observations={"policy": ["proprio", "reference", "obstacle",
                                                                  "height_scan"]}), 4, seed=2)  # fmt: skip
    obs = env.start_trials()["policy"]
    assert env.lane.tolist() == [0, 1, 0, 1] and env.last_frame.tolist()[:2] == [env.lane_last[0], env.lane_last[1]]
    assert env.lane_last[0] - env.lane_last[1] == 10  # the shorter motion, its own end
    np.testing.assert_allclose(env.qpos[1::2, 1] - env.qpos[0::2, 1], LANE_SPACING, atol=0.05)
    np.testing.assert_allclose(obs["obstacle"][:, 3].numpy(), [0.25, 0.35, 0.25, 0.35], atol=1e-6)
    np.testing.assert_allclose(obs["obstacle"][:, 2].numpy(), env.box[:, 2] - env.qpos[:, 1], atol=1e-5)
    scan = obs["height_scan"].numpy()
    level = env.qpos[:, 2:3] - env.task.robot.base_height
    tops = np.unique(np.round(scan + level, 3), axis=1)  # ground under the scan points: floor, this env's box
    np.testing.assert_allclose(np.unique(tops[0]), [0.0, 0.25], atol=1e-3)
    np.testing.assert_allclose(np.unique(tops[1]), [0.0, 0.35], atol=1e-3)
    np.testing.assert_allclose(env.goal[1, :2], env.ref.body_pos[1, -1, 0, :2], atol=1e-9)
    assert abs(env.goal[1, 1] - env.goal[0, 1] - LANE_SPACING) < 1e-6
    for f in (0, 40):  # both lanes at their reference pose: every kernel at 1
        env.qpos[:] = env.ref.qpos[env.lane, f]
        env.frame[:] = f
        env.batch.forward(np.arange(4))
        env.prev_body_pos[:] = env.xpos[:, env.bodies] - env.ref.body_vel[env.lane, f] * env.dt
        terms, errors = env._rewards()
        kernels = [env.reward_names.index(n) for n in ("anchor_pos", "body_pos", "contact_pos")]
        np.testing.assert_allclose(terms[:, kernels], 1.0, atol=1e-6)
        assert errors["anchor_pos"].max() < 1e-9


def test_lane_shares_give_each_lane_its_share_of_the_envs_interleaved(seed):
    """Equal shares keep env i on lane i mod lanes; others split the envs in proportion, each lane spread over
    the batch; a share per reference, each > 0, or the config is refused by name."""
    from dataclasses import replace

    from llp.motion.tracking_env import lane_assignment

    for lanes in (1, 3, 4):
        np.testing.assert_array_equal(lane_assignment(64, [1.0] * lanes), np.arange(64) % lanes)
    shared = lane_assignment(64, [1, 1, 2, 3])
    assert np.bincount(shared).tolist() == [9, 9, 18, 28]
    assert all(np.bincount(shared[:32], minlength=4) > 3)  # the first half already holds every lane
    env = TrackingEnv(replace(_two_heights(seed), lane_shares=[1.0, 3.0]), 8, seed=2)
    assert env.lane.tolist() == [1, 0, 1, 1, 1, 0, 1, 1]
    np.testing.assert_allclose(env.box[:, 4], np.where(env.lane == 1, 0.35, 0.25), atol=1e-9)  # each env, its box
    for shares in ([1.0], [1.0, 0.0]):
        with pytest.raises(ValueError, match=r"one share > 0 per reference \(\['low', 'tall'\]\)"):
            replace(_two_heights(seed), lane_shares=shares)


def test_starts_near_the_motion_start_in_the_default_posture(seed):
    env = TrackingEnv(_two_heights(seed, start_window_s=0.2, start_posture="default", start_at_zero=0.0), 200, seed=4)
    assert env.start_frame.max() < 10 and len(np.unique(env.start_frame)) == 10  # 0.2 s at 50 Hz
    joints = env.qpos[:, env.joint_qpos]
    assert np.abs(joints - env.default_joint_pos).max() <= env.task.init_joint_noise + 1e-9
    np.testing.assert_allclose(env.qpos[:, 2], env.ref.qpos[env.lane, env.start_frame, 2], atol=1e-9)
    assert np.abs(env.qvel[:, 6:]).max() == 0.0
    trials = TrackingEnv(_two_heights(seed, start_posture="default"), 2, seed=4)
    trials.start_trials()
    assert (trials.start_frame == 0).all()
    assert np.abs(trials.qpos[:, trials.joint_qpos] - trials.default_joint_pos).max() <= 0.05 + 1e-9


def test_a_lead_in_starts_behind_the_start_frame_and_the_reference_waits_for_the_pelvis(seed):
    """Episodes start up to lead_in_m behind their start frame (trials too); the reference's clock holds until the
    pelvis reaches the start frame's x, or the timeout passes."""
    still = {"action_offset": "default", "start_posture": "default", "start_window_s": 0.2, "start_at_zero": 0.0}
    cfg = _two_heights(seed, lead_in_m=0.3, lead_in_timeout_s=0.1, **still)
    env = TrackingEnv(cfg, 64, seed=4)
    start_x = env.ref.qpos[env.lane, env.start_frame, 0]
    behind = start_x - env.qpos[:, 0]
    np.testing.assert_allclose(behind, env.lead_in, atol=env.task.init_root_noise + 1e-9)
    assert env.lead_in.min() >= 0 and env.lead_in.max() <= 0.3 and env.lead_in.max() > 0.25
    np.testing.assert_array_equal(env.waiting, env.lead_in > env.task.lead_in_tolerance_m)
    walked = np.flatnonzero(env.waiting)[:8]  # these envs' pelvis put at their start frame's x
    env.qpos[walked, 0] = start_x[walked]
    env.batch.forward(walked)
    zero, was = torch.zeros(64, env.num_actions), env.waiting.copy()
    env.step(zero)
    np.testing.assert_array_equal(env.frame, env.start_frame + ~was)  # the waiting ones held their frame
    rest = was.copy()
    rest[walked] = False
    assert env.waiting[rest & (env.lead_in > 0.1)].all()  # the rest wait (within a step's drift of the tolerance)
    assert not env.waiting[walked].any()
    env.step(zero)
    assert (env.frame[walked] == env.start_frame[walked] + 1).all()
    for _ in range(4):  # the timeout: 0.1 s, 5 steps, and every clock runs
        env.step(zero)
    assert not env.waiting.any()
    trials = TrackingEnv(cfg, 16, seed=4)
    trials.start_trials()
    assert (trials.start_frame == 0).all() and trials.lead_in.max() > 0.1
    np.testing.assert_allclose(trials.qpos[:, 0], trials.ref.qpos[trials.lane, 0, 0] - trials.lead_in, atol=0.02 + 1e-9)


def test_a_walking_lead_in_moves_the_reference_in_at_its_speed_and_its_clock_starts_on_arrival(seed):
    """With lead_in_speed the start frame walks in from where the episode began: rewards read the moved frame (a
    pelvis kept on it scores an anchor kernel of 1), it moves forward lead_in_speed x dt a step, and the clock
    starts when it arrives, wherever the pelvis is."""
    still = {"action_offset": "default", "start_posture": "default", "start_window_s": 0.2, "start_at_zero": 0.0}
    env = TrackingEnv(_two_heights(seed, lead_in_m=0.3, lead_in_speed=0.5, **still), 32, seed=4)
    np.testing.assert_array_equal(env.shift, env.lead_in)
    np.testing.assert_array_equal(env.waiting, env.lead_in > 0)
    anchor = env.reward_names.index("anchor_pos")
    zero, frame0 = torch.zeros(32, env.num_actions), env.start_frame.copy()
    for _ in range(3):
        before = env.shift.copy()
        env.step(zero)
        going = env.waiting
        np.testing.assert_allclose(env.shift[going], before[going] - 0.5 * env.dt, atol=1e-12)
        assert (env.frame[going] == frame0[going]).all()
        env.qpos[:] = env.ref.qpos[env.lane, env.frame]  # the robot put on the moved frame
        env.qpos[:, 0] -= env.shift
        env.batch.forward(env.env_ids)
        terms, errors = env._rewards()
        np.testing.assert_allclose(terms[going, anchor], 1.0, atol=1e-9)
        assert errors["anchor_pos"][going].max() < 1e-9
    far = env.lead_in > 0.2
    assert env.waiting[far].all()
    for _ in range(int(np.ceil(0.3 / (0.5 * env.dt)))):  # 0.3 m at 0.5 m/s: every frame arrives, pelvis or not
        env.step(zero)
    assert not env.waiting.any() and (env.shift == 0).all()


def test_a_lateral_offset_moves_the_robot_and_its_reference_sideways_together(seed):
    """lateral_m: each episode (trials too) starts up to lateral_m to the side; the reference moves with it, so a
    robot on the moved reference scores full kernels and the goal, and the obstacle term sees the box from the side.
    Wider than the box, it is refused before any physics."""
    still = {
        "action_offset": "default",
        "start_posture": "default",
        "start_window_s": 0.2,
        "start_at_zero": 0.0,
        "init_root_noise": 0.0,
        "observations": {"policy": ["proprio", "reference", "obstacle"]},
        "rewards": {"goal": {"weight": 1.0, "std": 0.5}},
    }
    env = TrackingEnv(_two_heights(seed, lateral_m=0.15, **still), 64, seed=4)
    side = env.lateral
    assert np.abs(side).max() <= 0.15 and side.min() < -0.1 and side.max() > 0.1
    np.testing.assert_allclose(env.qpos[:, 1] - env.ref.qpos[env.lane, env.start_frame, 1], side, atol=1e-9)
    np.testing.assert_allclose(env._obs["obstacle"][:, 2], env.box[:, 2] - env.qpos[:, 1], atol=1e-9)
    for f in (0, 40, env.last_frame):  # the robot on its moved reference: every kernel at 1, at the end the goal's too
        env.qpos[:] = env.ref.qpos[env.lane, f]
        env.qpos[:, 1] += side
        env.frame[:] = f
        env.batch.forward(env.env_ids)
        env.prev_body_pos[:] = env.xpos[:, env.bodies] - env.ref.body_vel[env.lane, f] * env.dt
        terms, errors = env._rewards()
        kernels = [env.reward_names.index(n) for n in ("anchor_pos", "body_pos", "contact_pos")]
        np.testing.assert_allclose(terms[:, kernels], 1.0, atol=1e-6)
        assert errors["anchor_pos"].max() < 1e-9
    np.testing.assert_allclose(terms[:, env.reward_names.index("goal")], 1.0, atol=1e-6)
    env._compute_obs()
    assert np.abs(env._obs["reference"][:, -7:-4]).max() < 0.03  # the anchor offset: a frame's step, not the side
    trials = TrackingEnv(_two_heights(seed, lateral_m=0.15, **still), 16, seed=5)
    trials.start_trials()
    assert np.abs(trials.lateral).max() > 0.05
    np.testing.assert_allclose(trials.qpos[:, 1] - trials.ref.qpos[trials.lane, 0, 1], trials.lateral, atol=1e-9)
    with pytest.raises(ValueError, match=r"lateral_m 0.7 m would start the motion beside its box.*1.2 m wide"):
        TrackingEnv(_two_heights(seed, lateral_m=0.7, **still), 2, seed=4)


def test_a_lead_in_curriculum_draws_up_to_each_envs_level_and_moves_it_by_the_outcome(seed):
    still = {"action_offset": "default", "start_posture": "default", "start_window_s": 0.2, "start_at_zero": 0.0}
    env = TrackingEnv(_two_heights(seed, lead_in_m=0.3, lead_in_levels=3, **still), 60, seed=4)
    assert (env.lead_level == 0).all() and (env.lead_in == 0).all()  # every env starts at level 0: no lead-in
    env.lead_level[:] = np.repeat([1, 2, 3], 20)
    env._reset_envs(env.env_ids)
    for level in (1, 2, 3):
        drawn = env.lead_in[env.lead_level == level]
        assert drawn.max() <= 0.1 * level + 1e-12 and drawn.max() > 0.1 * level - 0.05
    ended = np.zeros(0, dtype=int)
    zero = torch.zeros(60, env.num_actions)
    while not len(ended):  # the default pose falls off the motion: its envs move one level down
        levels = env.lead_level.copy()
        result = env.step(zero)
        if "episode" in result.info:
            ended = np.flatnonzero(result.terminated.numpy() | result.truncated.numpy())
            np.testing.assert_array_equal(result.info["episode"]["start_step"], levels[ended])
            success = result.info["episode"]["success"]
            moved = np.clip(levels[ended] + np.where(success, 1, -1), 0, 3)
            np.testing.assert_array_equal(env.lead_level[ended], moved)


def test_the_course_s_tilt_and_height_rules_end_episodes_where_the_course_would(seed):
    """terminations.max_tilt compares the base with upright (not with the reference), min_base_height the pelvis
    with the ground under it: the floor, or the box's top where the pelvis is over it; off by default."""
    off = TrackingEnv(_two_heights(seed), 4, seed=2)
    env = TrackingEnv(_two_heights(seed, terminations={"max_tilt": 1.0, "min_base_height": 0.18}), 4, seed=2)
    env.start_trials()
    errors = {"anchor_z": np.zeros(4), "end_z": np.zeros(4)}
    env.qpos[:, 2] = [0.5, 0.5, 0.5, 0.5]  # over the floor, 0.5 m up
    front = env.box[:, 0] + 0.05
    env.qpos[2:, 0], env.qpos[2:, 1] = front[2:], env.box[2:, 2]  # envs 2, 3: over their boxes (25, 35 cm)
    pitch = np.array([0.0, 1.1, 0.0, 0.0])  # env 1 leans 1.1 rad forward (about y)
    env.qpos[:, 3:7] = np.stack([np.cos(pitch / 2), 0 * pitch, np.sin(pitch / 2), 0 * pitch], axis=1)
    np.testing.assert_allclose(env.ground_under(env.qpos[:, 0], env.qpos[:, 1]), [0.0, 0.0, 0.25, 0.35], atol=1e-9)
    causes = env._fell(errors)
    assert causes["course_tilt"].tolist() == [False, True, False, False]
    assert causes["base_height"].tolist() == [False, False, False, True]  # 0.5 - 0.35 < 0.18
    assert "course_tilt" not in off._fell(errors) and "base_height" not in off._fell(errors)


def test_lanes_with_other_contact_frames_are_refused(seed):
    from llp.motion.tracking import Lane

    other = [Contact(frame="left_hand", surface="top", start=0.0, end=0.5)]
    with pytest.raises(ValueError, match="lanes of one skill share their contact frames"):
        TrackingEnvConfig(
            task=tracking_task(),
            qpos=seed.qpos,
            fps=seed.fps,
            obstacle=seed.obstacle,
            contacts=seed.contacts,
            reference_id="a",
            lanes=[Lane(seed.qpos, seed.obstacle, other, "b")],
        )


def test_the_tracking_env_gives_the_terrain_envs_proprioception_layout_and_shows_a_teacher_its_own(seed):
    """The same states in both layouts: the locomotion layout is [0.25 w, gravity, ...] as the terrain env's,
    and a teacher that reads the tracking layout sees exactly the tracking env's proprioception."""
    from llp.learn.rollout import Teacher
    from llp.sim.proprio import convert_proprio

    def env(layout):
        cfg = TrackingEnvConfig(task=tracking_task(overrides={"proprio_layout": layout}), qpos=seed.qpos,
                                fps=seed.fps, obstacle=seed.obstacle, contacts=seed.contacts)  # fmt: skip
        return TrackingEnv(cfg, 3, seed=6)

    tracking, loco = env("tracking"), env("locomotion")
    ids, rng = torch.arange(3), np.random.default_rng(1)
    for _ in range(5):
        a = torch.from_numpy(rng.normal(0, 0.3, size=(3, tracking.num_actions)).astype(np.float32))
        obs_t, obs_l = tracking.step(a).obs, loco.step(a).obs
    p_t, p_l = obs_t["policy"]["proprio"], obs_l["policy"]["proprio"]
    w, g = torch.from_numpy(loco.qvel[:, 3:6]).float(), p_t[:, 0:3]
    torch.testing.assert_close(p_l[:, 0:6], torch.cat([0.25 * w, g], dim=1), atol=1e-6, rtol=0)
    torch.testing.assert_close(p_l[:, 6:], p_t[:, 6:])
    torch.testing.assert_close(convert_proprio(p_l, "locomotion", "tracking"), p_t, atol=1e-5, rtol=0)
    seen = loco.teacher_obs(obs_l, ids, "reference", None, None, "tracking")["policy"]["proprio"]
    torch.testing.assert_close(seen, tracking.teacher_obs(obs_t, ids, "reference")["policy"]["proprio"], atol=1e-5,
                               rtol=0)  # fmt: skip
    expert = Teacher(actor=None, env_ids=ids, action_offset="reference", proprio_layout="tracking")
    assert expert.foreign(loco) and not expert.foreign(tracking)


def test_a_raised_whole_body_seed_lifts_its_planted_hands_with_the_top_and_passes_its_checks():
    """One 5 cm round (the paper grows 5-10 cm a round): the hands rise with the top while the motion plants them
    there (the feet are still on the floor then, so the feet's share would leave them inside the taller box); a
    hand that close over the top rises with it even where no contact names it (a motion grown from a rollout
    whose hands only brush it)."""
    from llp.motion import acceptance as A
    from llp.motion.retarget import Retargeter
    from llp.motion.scene import SceneModel
    from llp.motion.seeds import seed_reference, seed_retarget_config, seed_spec

    dz = 0.05
    spec = seed_spec("climb_whole_45")
    seed = seed_reference(spec)
    robot = build(RobotConfig, named("robot", "lightbot0_like"), "robot")
    cfg = seed_retarget_config(spec)
    solver = Retargeter(cfg, robot)
    scene = None
    for contacts in (None, seed.contacts):  # the hands' clearance alone, then their contacts too
        qpos, box, _ = raise_reference(solver, seed.qpos, seed.obstacle, dz, seed.fps, contacts)
        scene = SceneModel(robot, box, cfg.contact_frames)
        relation = A.scene_relation(scene, qpos, seed.fps, seed.contacts, cfg.penetration_limit,
                                    cfg.contact_tolerance)  # fmt: skip
        assert relation.passed, (contacts is not None, relation.reason)
    assert relation.passed and A.kinematic(scene, qpos, seed.fps, cfg.joint_speed_limit).passed, relation.reason
    before, after = solver.frame_positions(seed.qpos), solver.frame_positions(qpos)
    planted = int(1.0 * seed.fps)  # both hands on the top, both feet on the floor
    for hand in ("left_hand", "right_hand"):
        assert after[hand][planted, 2] - before[hand][planted, 2] == pytest.approx(dz, abs=0.01)


def test_falls_are_told_apart_by_the_end_body_that_left_its_reference_and_the_quarter_they_happen_in():
    from llp.sim.robot import load_robot_spec

    robot = build(RobotConfig, named("robot", "lightbot0_like"), "robot")
    model = load_robot_spec(robot).compile()
    qpos = _standing(40)
    qpos[:, model.jnt_qposadr[model.joint("left_shoulder_pitch").id]] = -3.0  # the left arm raised overhead
    env = _env(qpos, 4, hold_s=0.0, action_offset="default")  # zero actions: the default pose, the arm down
    env.start_trials()
    ends: dict[str, int] = {}
    details: dict[str, int] = {}
    while len(env.finished) < 4:
        result = env.step(torch.zeros(4, env.num_actions))  # the PD targets keep the arm down
        for cause, count in result.info["ends"].items():
            ends[cause] = ends.get(cause, 0) + count
        for detail, count in result.info["end_details"].items():
            details[detail] = details.get(detail, 0) + count
    assert ends.get("end_body_z") == 4, (ends, details)
    assert details == {"end_body_z/left_forearm": 4, "fell_in_quarter/1": 4}


def test_a_pelvis_touching_the_box_ends_the_episode_when_the_task_counts_body_contact_as_a_fall():
    """The terrain env counts a contact of the robot's termination bodies (pelvis, torso) as a fall on the course;
    with ``terminations.body_contact`` the tracking env does too (the cause ``body_contact``), and without it the
    same contact ends nothing."""
    qpos = _standing(30)
    box = ObstacleBox(kind="climb", height=0.6, depth=0.6, width=1.2, front_x=-0.1)  # the robot stands inside it

    def ends(**terminations) -> dict[str, int]:
        task = tracking_task(overrides={"terminations": terminations, "hold_s": 0.0})
        cfg = TrackingEnvConfig(task=task, qpos=qpos, fps=50.0, obstacle=box, contacts=[], reference_id="inside")
        env = TrackingEnv(cfg, 3, seed=3)
        env.start_trials()
        total: dict[str, int] = {}
        for _ in range(2):
            for cause, count in env.step(torch.zeros(3, env.num_actions)).info["ends"].items():
                total[cause] = total.get(cause, 0) + count
        return total

    touched = ends(body_contact=True)  # the robot's termination_bodies: its pelvis and torso
    assert touched["body_contact"] >= 3  # every env, on its first steps
    assert "body_contact" not in ends()
