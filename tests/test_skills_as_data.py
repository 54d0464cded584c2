"""A skill is data: a seed file, a stage of kind reference_augmentation and one of kind skill_expert, and its line
under the pipeline's `skills:`. The merge and the transition then take it, with no code changed."""

from __future__ import annotations

import shutil

import pytest

from llp.config.schema import ConfigError
from tests.conftest import ROOT

SECOND = """\
skills:
  step_up: {references: references_step_up, expert: skill_step_up}
stages:   # declared last; the pipeline runs them before the stages that read them
  references_step_up: {kind: reference_augmentation, seed: step_up_25}
  skill_step_up: {kind: skill_expert, skill: step_up, library: references_step_up}
"""


@pytest.fixture
def conf_with_a_second_skill(tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    seed = (conf / "seeds" / "climb_step_25.yaml").read_text()
    seed = seed.replace("id: climb_step_25\n", "id: step_up_25\n").replace("skill: climb_step\n", "skill: step_up\n")
    assert "id: step_up_25\n" in seed and "skill: step_up\n" in seed
    (conf / "seeds" / "step_up_25.yaml").write_text(seed)
    (conf / "profile" / "two_skills.yaml").write_text("# the smoke profile and a second skill\n" + SECOND)
    return conf


def test_a_skill_declared_in_config_only_gets_its_stages_and_joins_the_merge_and_the_transition(
    conf_with_a_second_skill, llp
):
    env = {"LLP_CONF_DIR": str(conf_with_a_second_skill)}
    shown = llp("stages", "--profile", "two_skills", env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    names = [line.split()[0] for line in shown.stdout.splitlines() if line and not line.startswith((" ", "skills"))]
    assert "references_step_up" in names and "skill_step_up" in names
    assert names.index("references_step_up") < names.index("skill_step_up") < names.index("merge")
    assert "references_step_up  (in pipeline, kind reference_augmentation)" in shown.stdout
    assert "library -> llp-references-step-up-library, tracker -> llp-references-step-up-tracker" in shown.stdout
    assert "policy -> llp-skill-step-up" in shown.stdout and "policy -> llp-skill-climb-step" in shown.stdout
    block = {line.split()[0]: i for i, line in enumerate(shown.stdout.splitlines()) if line and line[0] != " "}
    lines = shown.stdout.splitlines()
    for stage in ("merge", "transition"):
        inputs = lines[block[stage] + 2]
        for name in ("'skill_climb_step': 'skill_climb_step.policy'", "'skill_step_up': 'skill_step_up.policy'",
                     "'reference_augmentation': 'reference_augmentation.library'",
                     "'references_step_up': 'references_step_up.library'"):  # fmt: skip
            assert name in inputs, f"{stage}: {inputs}"
    skill_inputs = lines[block["skill_step_up"] + 2]
    assert "'library': 'references_step_up.library', 'tracker': 'references_step_up.tracker'" in skill_inputs


def test_the_merge_builds_a_group_per_declared_skill_from_its_own_library(conf_with_a_second_skill, monkeypatch):
    import llp.config.files as files

    monkeypatch.setattr(files, "CONF_DIR", conf_with_a_second_skill)
    from llp.stages.registry import load_pipeline, stage_config

    cfg = load_pipeline("two_skills")
    for stage in ("merge", "transition"):
        typed = stage_config(cfg, stage)
        assert typed.skills == {"climb_step": "skill_climb_step", "step_up": "skill_step_up"}
        assert [typed.library_of(s) for s in typed.skills] == ["reference_augmentation", "references_step_up"]
    order = list(cfg.stages)
    assert order.index("skill_step_up") < order.index("merge") and order[-1] == "evaluate_final"
    for stage in ("depth_student", "evaluate_final"):  # a course: the first skill's obstacle, from its library
        typed = stage_config(cfg, stage)
        assert (typed.skill, typed.library) == ("climb_step", "reference_augmentation")


def test_the_depth_students_course_group_and_course_trials_take_the_librarys_obstacle():
    from llp.motion.library import SkillObstacle
    from llp.stages.registry import load_pipeline, stage_config

    cfg = stage_config(load_pipeline("local"), "depth_student")
    assert cfg.inputs()["library"] == "reference_augmentation.library"
    grown = cfg.at_obstacle(SkillObstacle("climb", (0.45, 0.50, 0.55), 0.6))
    for overrides in (grown.group_overrides("course"), grown.evaluation.course_env):
        assert overrides["terrain"]["climb_heights"] == [0.45, 0.50, 0.55] and overrides["terrain"]["num_levels"] == 3
    assert grown.group_overrides("terrain") == cfg.group_overrides("terrain")  # the terrain group is not a course
    assert cfg.at_obstacle(None) == cfg


def test_a_vault_skills_course_is_the_vault_its_library_holds():
    """A course follows the library's obstacle kind and depth: a vault library makes a vault course, which every
    course-taking config accepts, with the goal past the box."""
    from dataclasses import replace

    from llp.motion.library import SkillObstacle
    from llp.sim.terrain import generate_terrain
    from llp.skills.library import course_at
    from llp.stages.common import checked_env_config
    from llp.stages.registry import load_pipeline, stage_config

    vault = SkillObstacle("vault", (0.40,), 0.30)
    depth = stage_config(load_pipeline("local"), "depth_student").at_obstacle(vault)
    depth.validate("stages.depth_student")
    env = checked_env_config(depth.task, depth.robot, depth.group_overrides("course"), "course")
    assert env.terrain.tile_types == ["vault"] and env.terrain.vault_heights == [0.40]
    assert env.terrain.vault_depth == 0.30 and env.terrain.num_levels == 2
    terrain = generate_terrain(env.terrain, seed=0)
    tile = terrain.tiles[0]
    box = tile.obstacles[0]
    assert box.kind == "box" and abs(box.height - 0.40) < 1e-9 and abs(box.depth - 0.30) < 1e-9
    assert tile.goal[0] > box.center[0] + box.depth / 2  # past the box, not on it
    final = stage_config(load_pipeline("local"), "evaluate_final")
    protocol = replace(final.protocol, course_env=course_at(final.protocol.course_env, vault))
    protocol.validate("stages.evaluate_final.protocol")
    assert protocol.course_config("course").terrain.tile_types == ["vault"]


@pytest.mark.parametrize(
    "extra, where, message",
    [
        (
            "skills: {vault: {references: nowhere, expert: skill_climb_step}}",
            "skills.vault.references",
            "refers to stage 'nowhere'",
        ),
        ("skills: {vault: {expert: skill_climb_step}}", "skills.vault", "expected {references: <stage>, expert"),
        ("stages: {skill_twin: {kind: skill_exprt}}", "stages.skill_twin", "unknown stage kind 'skill_exprt'"),
        ("stages: {skill_climb_step: {teacher: merge}}", "stages", "its stages read each other in a circle: "),
    ],
)
def test_a_wrong_skill_declaration_is_refused_by_name(tmp_path, monkeypatch, extra, where, message):
    import llp.config.files as files

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "profile" / "bad.yaml").write_text(extra + "\n")
    monkeypatch.setattr(files, "CONF_DIR", conf)
    from llp.stages.registry import load_pipeline

    with pytest.raises(ConfigError) as err:
        load_pipeline("bad")
    assert str(err.value).startswith(where) and message in str(err.value), str(err.value)


@pytest.mark.parametrize("stage", ["transition", "depth_student"])
def test_a_course_without_one_obstacle_is_refused_at_load(stage):
    from llp.config.schema import ConfigError
    from llp.stages.registry import load_pipeline

    with pytest.raises(ConfigError, match=r"course_env.terrain.tile_types: \['flat', 'climb'\]: a course takes its "):
        load_pipeline("smoke", [f"stages.{stage}.course_env.terrain.tile_types=[flat, climb]"])
