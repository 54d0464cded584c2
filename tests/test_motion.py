"""Motion references: the SMPL-order importer, retargeting with mink, the scene checks, the library."""

import json
import subprocess
import sys

import numpy as np
import pytest

from llp.config.files import named
from llp.config.schema import build
from llp.motion import acceptance as A
from llp.motion.human import SMPL_JOINTS, HumanMotion, MotionFileError, load_human_motion, resample
from llp.motion.library import ReferenceLibrary
from llp.motion.retarget import Retargeter, retarget_config, retarget_human
from llp.motion.scene import Contact, ObstacleBox, SceneModel
from llp.motion.seeds import seed_reference, seed_spec
from llp.sim.robot import RobotConfig

ROBOT = build(RobotConfig, named("robot", "lightbot0_like"), "robot")


def test_smpl_importer_turns_y_up_joints_into_z_up_and_resamples_them(tmp_path):
    # a y-up body whose every joint moves 1 m/s along x, recorded at 30 fps for 1 s
    rest = np.random.default_rng(0).uniform(-0.5, 0.5, size=(24, 3))
    rest[SMPL_JOINTS.index("left_hip")] = [0, 0.9, 0.1]  # left leg of 0.4 + 0.4 m (y is up, z points left)
    rest[SMPL_JOINTS.index("left_knee")] = [0, 0.5, 0.1]
    rest[SMPL_JOINTS.index("left_ankle")] = [0, 0.1, 0.1]
    rest[SMPL_JOINTS.index("right_hip")] = [0, 0.9, -0.1]
    rest[SMPL_JOINTS.index("right_knee")] = [0, 0.5, -0.1]
    rest[SMPL_JOINTS.index("right_ankle")] = [0, 0.1, -0.1]
    t = np.arange(31) / 30
    joints = rest[None] + t[:, None, None] * np.array([1.0, 0, 0])
    np.savez(tmp_path / "walk.npz", joints=joints, fps=30.0, up_axis="y")

    motion = load_human_motion(tmp_path / "walk.npz")
    assert motion.joints.shape == (31, 24, 3) and motion.fps == 30.0 and motion.duration == pytest.approx(1.0)
    hip = motion.joint("left_hip")
    assert np.allclose(hip[0], [0, -0.1, 0.9])  # y up -> z up: the height is now z, left is +y
    assert np.allclose(motion.joint("right_hip")[0], [0, 0.1, 0.9])  # a rotation: right stays right of left
    assert motion.leg_length() == pytest.approx(0.8)
    fast = resample(motion, 50.0)
    assert fast.num_frames == 51 and np.allclose(
        fast.joint("pelvis")[:, 0] - fast.joint("pelvis")[0, 0], np.arange(51) / 50
    )


@pytest.mark.parametrize(
    "content, message",
    [
        ({"joints": np.zeros((10, 22, 3)), "fps": 30.0}, "SMPL order"),
        ({"joints": np.full((10, 24, 3), np.nan), "fps": 30.0}, "NaN"),
        ({"joints": np.zeros((10, 24, 3))}, "frame rate"),
        ({"poses": np.zeros((10, 72)), "fps": 30.0}, "needs an array 'joints'"),
        ({"joints": np.zeros((10, 24, 3)), "fps": 30.0, "up_axis": "x"}, "up_axis"),
    ],
)
def test_bad_motion_files_are_named_with_the_reason(tmp_path, content, message):
    np.savez(tmp_path / "m.npz", **content)
    with pytest.raises(MotionFileError, match=message):
        load_human_motion(tmp_path / "m.npz")


def test_retargeting_keeps_feet_and_hands_within_2cm_of_the_scaled_human_targets():
    # a "human" twice the robot's size doing the robot's own climb: the scaled targets are reachable exactly
    cfg = retarget_config("lightbot0_like")
    seed = seed_reference(seed_spec("climb_step_25"))
    solver = Retargeter(cfg, ROBOT)
    body = solver.frame_positions(seed.qpos, ["pelvis", "left_foot", "right_foot", "left_hand", "right_hand"])
    import mujoco

    data = mujoco.MjData(solver.model)
    hips, knees = {s: [] for s in ("left", "right")}, {s: [] for s in ("left", "right")}
    for q in seed.qpos:
        data.qpos[:] = q
        mujoco.mj_kinematics(solver.model, data)
        for s in ("left", "right"):
            hips[s].append(data.body(f"{s}_thigh").xpos.copy())
            knees[s].append(data.body(f"{s}_shank").xpos.copy())
    joints = np.zeros((len(seed.qpos), 24, 3))
    put = {"pelvis": body["pelvis"], "left_ankle": body["left_foot"], "right_ankle": body["right_foot"],
           "left_hand": body["left_hand"], "right_hand": body["right_hand"]}  # fmt: skip
    for side in ("left", "right"):
        put[f"{side}_hip"], put[f"{side}_knee"] = np.array(hips[side]), np.array(knees[side])
    for name, track in put.items():
        joints[:, SMPL_JOINTS.index(name)] = 2.0 * track
    human = HumanMotion(joints, seed.fps, "the robot's climb, doubled")

    qpos, targets, solver = retarget_human(human, cfg, ROBOT)
    got = solver.frame_positions(qpos, list(targets))
    for key in ("left_foot", "right_foot"):
        assert np.linalg.norm(got[key] - targets[key], axis=1).max() < 0.02, key
    for key in ("left_hand", "right_hand"):
        assert np.linalg.norm(got[key] - targets[key], axis=1).mean() < 0.02, key
    # scaled back to the robot's size about the pelvis's first ground point (which sits at the origin)
    assert np.allclose(targets["left_foot"], body["left_foot"], atol=1e-4)


@pytest.mark.parametrize("offset, verdict", [(0.0, None), (-0.02, "inside"), (0.03, "stays")])
def test_the_scene_check_catches_a_hand_pushed_into_the_box_or_hovering_above_it(offset, verdict):
    # the left hand is put on the top of a box beside the left leg; then the box is raised or lowered so that
    # the hand's geometry ends up ``offset`` above the top (negative: inside the box)
    cfg = retarget_config("lightbot0_like")
    cfg.frames["left_hand"].position_cost = 5.0  # this test is about the check: place the hand precisely
    solver = Retargeter(cfg, ROBOT)
    still = solver.frame_positions(np.repeat(solver.default_q[None], 30, axis=0))
    positions = {k: still[k] for k in ("pelvis", "left_foot", "right_foot", "right_hand")}
    positions["left_hand"] = np.repeat([[0.15, 0.21, 0.45]], 30, axis=0)
    qpos = solver.solve(positions, {}, fps=50.0)
    box = ObstacleBox(kind="vault", height=0.45, depth=0.2, width=0.2, front_x=0.08, y=0.25)
    probe = SceneModel(ROBOT, box, cfg.contact_frames)
    probe.set_qpos(qpos[-1])
    gap = min(probe.distance(g, probe.box_id) for g in probe.frame_geoms["left_hand"])  # hand above the top
    box = ObstacleBox(kind="vault", height=0.45 + gap - offset, depth=0.2, width=0.2, front_x=0.08, y=0.25)
    scene = SceneModel(ROBOT, box, cfg.contact_frames)
    scene.set_qpos(qpos[-1])
    assert min(scene.distance(g, scene.box_id) for g in scene.frame_geoms["left_hand"]) == pytest.approx(
        offset, abs=1e-3
    )
    check = A.scene_relation(scene, qpos, 50.0, [Contact(frame="left_hand", surface="top", start=0.3, end=0.58)],
                             cfg.penetration_limit, cfg.contact_tolerance)  # fmt: skip
    if verdict is None:
        assert check.passed, check.reason
    else:
        assert not check.passed and verdict in check.reason, check.reason
    if offset < 0:
        assert check.numbers["max_penetration_m"] == pytest.approx(0.02, abs=2e-3)
    else:
        assert check.numbers["worst_contact_distance_m"] == pytest.approx(offset, abs=2e-3)


def test_the_shipped_climb_seed_passes_its_kinematic_and_scene_checks():
    ref = seed_reference(seed_spec("climb_step_25"))
    verdicts = {a.name: a.passed for a in ref.acceptance}
    assert verdicts == {"kinematic": True, "scene": True, "dynamic": None}
    kin = ref.acceptance[0].numbers
    assert kin["max_joint_speed"] <= 10.0 + 1e-6 and kin["mean_ik_error_m"] < 0.02
    assert ref.qpos.shape == (151, 28) and ref.qpos[-1, 2] > 0.25 + 0.4  # standing on the 25 cm box at the end


def test_library_entries_keep_their_lineage_and_are_only_added(tmp_path):
    lib = ReferenceLibrary(tmp_path / "refs")
    seed = seed_reference(seed_spec("climb_step_25"))
    lib.add(seed)
    import copy

    child = copy.copy(seed)
    child.id, child.round, child.parent, child.obstacle = "climb_step_25.r1", 1, seed.id, seed.obstacle.raised(0.05)
    lib.add(child)
    again = ReferenceLibrary(tmp_path / "refs")  # read back from disk
    assert [e.id for e in again.lineage("climb_step_25.r1")] == ["climb_step_25.r1", "climb_step_25.r0"]
    assert again.get("climb_step_25.r1").obstacle.height == pytest.approx(0.30)
    assert np.allclose(again.get("climb_step_25.r1", with_motion=True).qpos, seed.qpos)
    orphan = copy.copy(seed)
    orphan.id, orphan.parent = "orphan", "missing.r0"
    with pytest.raises(KeyError, match="missing.r0"):
        lib.add(orphan)
    with pytest.raises(ValueError, match="already holds"):
        lib.add(child)
    index = json.loads((tmp_path / "refs" / "index.json").read_text())
    assert [e["id"] for e in index["entries"]] == ["climb_step_25.r0", "climb_step_25.r1"]
    assert sorted(p.name for p in (tmp_path / "refs").iterdir()) == [
        "climb_step_25.r0.npz",
        "climb_step_25.r1.npz",
        "index.json",
    ]


def test_llp_seeds_and_llp_refs(tmp_path):
    llp = [sys.executable, "-m", "llp.cli"]
    out = subprocess.run([*llp, "seeds", "--out", str(tmp_path / "lib"), "--pictures", str(tmp_path / "pics"),
                          "--kinematic"], capture_output=True, text=True, timeout=300)  # fmt: skip
    # (--kinematic: the keyframes' motions; driving a seed through the simulator: tests/test_physics_refinement.py)
    assert out.returncode == 0, out.stderr
    assert (
        "climb_step_25.r0: 151 frames" in out.stdout
        and "kinematic: passed; scene: passed; dynamic: not run" in out.stdout
    )
    from PIL import Image

    strip = Image.open(tmp_path / "pics" / "climb_step_25.r0.png")
    assert strip.size == (6 * 320, 300) and np.asarray(strip).std() > 10  # six rendered frames, not blank
    refs = subprocess.run([*llp, "refs", str(tmp_path / "lib")], capture_output=True, text=True, timeout=120)
    assert refs.returncode == 0 and "| climb_step_25.r0 | climb_step | 0 | - | climb 25 cm |" in refs.stdout
    bad = subprocess.run([*llp, "refs", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "is neither a reference library (no index.json) nor a pipeline run" in bad.stderr


def _turned(qpos: np.ndarray, yaw_deg: np.ndarray) -> np.ndarray:
    """``qpos`` with each frame's root turned by ``yaw_deg`` about z (the rest of the pose kept)."""
    from llp.sim.math3d import yaw_quat

    out = qpos.copy()
    out[:, 3:7] = yaw_quat(np.radians(np.asarray(yaw_deg, dtype=np.float64)))
    return out


def test_the_heading_check_measures_a_rollouts_turn_off_the_seeds_heading_frame_by_frame():
    seed = _turned(np.zeros((101, 28)), np.full(101, 170.0))  # heading 170 deg throughout
    turn = np.linspace(0.0, 30.0, 51)  # a rollout of half as many frames turning steadily left, to +30 deg
    rollout = _turned(np.zeros((51, 28)), 170.0 + turn)  # ... across the +-180 wrap
    drift = A.heading_drift_deg(rollout, seed)
    assert drift.shape == (51,) and np.allclose(drift, turn, atol=1e-6)
    assert np.allclose(A.heading_drift_deg(_turned(np.zeros((51, 28)), 170.0 - turn), seed), -turn, atol=1e-6)
    within = A.heading(rollout, seed, limit_deg=45.0)
    assert within.passed is True and within.numbers["max_heading_drift_deg"] == pytest.approx(30.0)
    over = A.heading(rollout, seed, limit_deg=20.0)
    assert over.passed is False and "turns 30.0 deg off the seed's heading (> 20.0)" in over.reason
    assert over.numbers["final_heading_drift_deg"] == pytest.approx(30.0)


def test_the_library_keeps_and_shows_each_entrys_heading_drift(tmp_path):
    import copy

    lib = ReferenceLibrary(tmp_path / "refs")
    seed = seed_reference(seed_spec("climb_step_25"))
    lib.add(seed)
    child = copy.copy(seed)
    child.id, child.round, child.parent, child.heading_drift_deg = "climb_step_25.r1", 1, seed.id, 21.84
    lib.add(child)
    again = ReferenceLibrary(tmp_path / "refs")
    assert again.get("climb_step_25.r1").heading_drift_deg == pytest.approx(21.84)
    assert again.get("climb_step_25.r0").heading_drift_deg is None  # the seed is the heading itself
    rows = again.table().splitlines()
    assert "| heading drift |" in rows[0]
    assert "| 21.8 deg |" in rows[3] and "| - | contact keyframes" in rows[2]
    again.set_tracker("climb_step_25.r1", "models:/llp-reference-tracker/3")  # the round's registered tracker
    rows = ReferenceLibrary(tmp_path / "refs").table().splitlines()
    assert rows[0].endswith("| tracker |") and rows[2].endswith("| - |")  # the seed has none
    assert rows[3].endswith("| models:/llp-reference-tracker/3 |")


def test_a_heading_limit_outside_0_to_180_degrees_is_named():
    from llp.config.schema import ConfigError
    from stages.reference_augmentation import ReferenceAugmentationConfig

    with pytest.raises(ConfigError, match=r"ra\.max_heading_drift_deg.*\(0, 180\)"):
        ReferenceAugmentationConfig(max_heading_drift_deg=0.0).validate("ra")
    ReferenceAugmentationConfig(max_heading_drift_deg=25.0).validate("ra")


def test_the_whole_body_climb_seed_plants_its_hands_on_a_45_cm_top_and_passes_its_checks():
    from dataclasses import replace

    from llp.motion.seeds import seed_reference, seed_spec

    spec = seed_spec("climb_whole_45")
    assert spec.obstacle.height == 0.45 and spec.obstacle.height > 0.445  # above the standing pelvis
    on_top = {c.frame for c in spec.contacts if c.surface == "top"}
    assert on_top == {"left_hand", "right_hand", "left_foot", "right_foot"}
    checks = {a.name: a for a in seed_reference(spec).acceptance}
    assert checks["kinematic"].passed and checks["scene"].passed, [a.reason for a in checks.values()]
    assert checks["scene"].numbers["worst_contact_distance_m"] < 0.02  # the hands and feet are on their surfaces
    # the seed's own hand costs put the hands there: with the robot's, the posture task straightens the arms
    plain = {a.name: a for a in seed_reference(replace(spec, frame_costs={})).acceptance}
    assert not plain["scene"].passed and "hand" in plain["scene"].reason, plain["scene"].reason


def test_the_speed_vault_seed_turns_and_leans_onto_its_planted_hand_and_clears_the_box():
    from llp.motion.seeds import seed_retarget_config, seed_targets
    from llp.sim.math3d import yaw_and_gravity

    spec = seed_spec("speed_vault_40")
    assert spec.skill == "speed_vault" and spec.obstacle.kind == "vault" and spec.obstacle.height == 0.40
    _, rotations = seed_targets(spec)
    over = int(0.84 * spec.fps)  # the keyframe with the legs over the box: turned 0.6 rad right, leaning left
    R = rotations["pelvis"][over]
    assert np.isclose(np.arctan2(R[1, 0], R[0, 0]), -0.6, atol=0.05)  # yaw of the body's forward axis
    assert R[2, 1] < -0.3  # the body's left axis points down: the left side lowered towards the planted hand
    ref = seed_reference(spec, physics=False)  # the keyframes' motion, also once it has a physics: block
    checks = {a.name: a for a in ref.acceptance}
    assert checks["kinematic"].passed and checks["scene"].passed, [a.reason for a in checks.values()]
    # the solved root follows the authored turn, and both ankles pass above the top while over the box
    yaw, _ = yaw_and_gravity(ref.qpos[:, 3:7].astype(np.float64))
    assert abs(yaw[over] + 0.6) < 0.1 and abs(yaw[-1]) < 0.05
    solver = Retargeter(seed_retarget_config(spec), ROBOT)
    ankles = solver.frame_positions(ref.qpos, ["left_foot", "right_foot"])
    box = spec.obstacle
    for side in ankles.values():
        above = (side[:, 0] > box.front_x) & (side[:, 0] < box.front_x + box.depth)
        assert above.any() and side[above, 2].min() > box.height
