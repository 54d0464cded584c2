"""Driving a keyframed seed through the simulator (llp/motion/physics_refinement.py): the motion kept is what the
robot did, it is the same for the same planner seed, and a bad physics block is named before anything runs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from llp.config.schema import ConfigError, build
from llp.motion.physics_refinement import PhysicsRefinement, refine
from llp.motion.seeds import SeedSpec, author, seed_retarget_config, seed_spec
from llp.motion.tracking import tracking_task

PLANNER = PhysicsRefinement(samples=64, horizon_s=0.5, hold_s=0.2, tries=1)
OPEN_LOOP = replace(PLANNER, samples=2, noise=1e-9)  # the keyframes' joint targets as they are, no search


@pytest.fixture(scope="module")
def walk_to_box():
    """The 25 cm step-up's first 1.2 s: two steps up to the box."""
    from llp.config.files import named
    from llp.motion.retarget import Retargeter
    from llp.sim.robot import RobotConfig

    spec = seed_spec("climb_step_25")
    cfg = seed_retarget_config(spec)
    qpos, _ = author(spec, Retargeter(cfg, build(RobotConfig, named("robot", spec.robot), "robot")))
    return spec, cfg, qpos[: int(1.2 * spec.fps) + 1]


def _refine(walk_to_box, physics: PhysicsRefinement, accept=None, frames=None):
    spec, cfg, qpos = walk_to_box
    lines = []
    task = tracking_task("tracking", spec.robot)
    out = refine(qpos if frames is None else frames, spec.fps, spec.obstacle, cfg, task, physics, accept=accept,
                 log=lines.append)  # fmt: skip
    return out, lines


def test_the_planner_walks_where_the_open_loop_keyframes_fall_and_keeps_what_the_simulated_robot_did(walk_to_box):
    spec, _, qpos = walk_to_box
    planned, lines = _refine(walk_to_box, PLANNER)
    open_loop, _ = _refine(walk_to_box, OPEN_LOOP)
    assert planned.succeeded and "try 1 of 1 (planner seed 0): stands where the seed ends" in lines[0], lines
    assert not open_loop.succeeded  # the keyframes' targets alone: the robot falls on its way to the box
    assert planned.tries[0]["final_error_m"] < 0.5 * open_loop.tries[0]["final_error_m"]
    assert planned.qpos.shape == qpos.shape and np.array_equal(planned.qpos[0], qpos[0])  # from the first frame
    speed = np.linalg.norm(np.diff(planned.qpos[:, :3], axis=0), axis=1) * spec.fps
    assert speed.max() < 2.0 and not np.allclose(planned.qpos, qpos, atol=1e-3)  # a body moved, not the keyframes
    again, _ = _refine(walk_to_box, PLANNER)
    assert np.array_equal(again.qpos, planned.qpos)  # deterministic: the planner seed and MuJoCo's rollouts


def test_a_try_the_checks_reject_does_not_count_and_the_next_planner_seed_is_tried(walk_to_box):
    _, _, qpos = walk_to_box
    seen = []

    def reject_first(motion):
        seen.append(motion.copy())
        return len(seen) > 1, "rejected by the test"

    standing = np.repeat(qpos[:1], 25, axis=0)  # half a second standing: every try stands
    small = replace(PLANNER, samples=4, horizon_s=0.1, knot_s=0.1, hold_s=0.0, tries=2)
    out, lines = _refine(walk_to_box, small, accept=reject_first, frames=standing)
    assert len(seen) == 2 and out.succeeded and len(out.tries) == 2
    assert out.tries[0]["rejected"] == "rejected by the test" and out.tries[1]["seed"] == 1
    assert "but rejected by the test" in lines[0] and np.array_equal(out.qpos, seen[1])


@pytest.mark.parametrize(
    "physics, where",
    [
        ({"samples": 1}, "seed.physics.samples"),
        ({"knot_s": 0.6, "horizon_s": 0.5}, "seed.physics.knot_s"),
        ({"frame_weights": {"pelvis": -1.0}}, "seed.physics.frame_weights.pelvis"),
        ({"temprature": 0.1}, "seed.physics.temprature"),
    ],
)
def test_a_bad_physics_block_in_a_seed_is_named_by_its_path(physics, where):
    from llp.config.files import named

    data = dict(named("seeds", "climb_step_45"), physics=physics)
    with pytest.raises(ConfigError) as err:
        build(SeedSpec, data, "seed")
    assert where in str(err.value)


def test_a_seed_whose_frame_rate_is_not_the_control_rate_or_that_weighs_an_unknown_frame_is_refused(walk_to_box):
    spec, cfg, qpos = walk_to_box
    task = tracking_task("tracking", spec.robot)
    with pytest.raises(ValueError, match="not the tracking task's control rate"):
        refine(qpos, 30.0, spec.obstacle, cfg, task, PLANNER)
    with pytest.raises(ValueError, match=r"names \['left_knee'\]"):
        refine(qpos, spec.fps, spec.obstacle, cfg, task, replace(PLANNER, frame_weights={"left_knee": 1.0}))


def test_a_seed_no_planner_try_can_drive_keeps_its_keyframes_and_fails_its_physics_check():
    from llp.motion.seeds import seed_reference

    open_loop = PhysicsRefinement(samples=2, noise=1e-9, horizon_s=0.1, knot_s=0.1, hold_s=0.0, tries=1)
    spec = replace(seed_spec("climb_step_25"), physics=open_loop)  # the keyframes' targets alone: it falls
    lines = []
    ref = seed_reference(spec, log=lines.append)
    checks = {a.name: a for a in ref.acceptance}
    assert list(checks) == ["kinematic", "scene", "physics", "dynamic"] and not ref.accepted
    assert checks["physics"].passed is False and "none of 1 planner tries ended where the motion ends" in (
        checks["physics"].reason
    )
    keyframes = seed_reference(spec, physics=False)
    assert np.array_equal(ref.qpos, keyframes.qpos) and ref.tracked is None and "MPPI" not in ref.made_by
