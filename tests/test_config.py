"""Bad configuration fails at load with a message naming the key and what is allowed."""

import time

import pytest

from llp.config.schema import ConfigError
from llp.sim.tasks import env_config


def error_of(overrides=None, **kw) -> str:
    with pytest.raises(ConfigError) as info:
        env_config(overrides=overrides, **kw)
    return str(info.value)


def test_default_configs_load():
    cfg = env_config()
    assert cfg.decimation == 4 and cfg.physics_dt == 0.005
    assert cfg.rewards["foot_acceleration"].weight < 0


def test_unknown_key_is_named_with_allowed_keys():
    msg = error_of({"terrain": {"tile_lenght": 8.0}})
    assert "terrain.tile_lenght" in msg and "tile_length" in msg


def test_wrong_type_is_named():
    msg = error_of({"decimation": "four"})
    assert msg.startswith("decimation:") and "integer" in msg


def test_penalty_with_positive_weight_is_rejected():
    msg = error_of({"rewards": {"foot_acceleration": {"weight": 0.01}}})
    assert "rewards.foot_acceleration.weight" in msg and "penalty" in msg


def test_reward_with_negative_weight_is_rejected():
    assert "must be >= 0" in error_of({"rewards": {"upright": {"weight": -1.0}}})


def test_unknown_reward_term_lists_allowed_terms():
    msg = error_of({"rewards": {"speed_bonus": {"weight": 1.0}}})
    assert "rewards.speed_bonus" in msg and "lin_vel_tracking" in msg


def test_unknown_term_parameter():
    assert "rewards.upright.params.scale" in error_of({"rewards": {"upright": {"weight": 1.0, "params": {"scale": 2}}}})


def test_unknown_tile_type_lists_allowed_values():
    msg = error_of({"terrain": {"tile_types": ["flat", "lava"]}})
    assert "terrain.tile_types[1]" in msg and "stepping_stones" in msg


def test_impossible_value():
    assert "terrain.num_levels" in error_of({"terrain": {"num_levels": 0}})
    assert "commands.lin_vel_x" in error_of({"commands": {"lin_vel_x": [1.0, -1.0]}})


def test_unknown_robot_lists_robots():
    msg = error_of(robot="atlas")
    assert "atlas" in msg and "lightbot0_like" in msg and "g1" in msg


def test_unknown_observation_term():
    assert "observations.policy[1]" in error_of({"observations": {"policy": ["proprio", "lidar"]}})


def test_validation_is_fast():
    t0 = time.perf_counter()
    error_of({"decimation": -1})
    assert time.perf_counter() - t0 < 1.0


def test_a_key_given_twice_in_a_yaml_file_is_refused_with_both_lines(tmp_path):
    from llp.config.files import read_yaml

    path = tmp_path / "profile.yaml"
    path.write_text("stages:\n  locomotion_teacher:\n    iterations: 10\n    checkpoint_every: 5\n    iterations: 20\n")
    with pytest.raises(ConfigError, match=r"the key 'iterations' is given twice \(line 3 and line 5\)") as err:
        read_yaml(path)
    assert str(path) in str(err.value)
    path.write_text("a: &x {b: 1}\nc:\n  <<: *x\n  d: 2\n")  # merge keys still work
    assert read_yaml(path) == {"a": {"b": 1}, "c": {"b": 1, "d": 2}}


def test_no_field_of_a_stage_config_is_declared_alike_in_two_stages():
    """A field two stages declare with the same default and words belongs in a shared config (stages/common.py):
    every training stage's config builds on TrainingStageConfig, and redeclares a shared field only to change it."""
    import dataclasses
    from collections import defaultdict

    from llp.config.stage import TrainingStageConfig
    from llp.stages.registry import STAGES

    def declared(cls) -> dict[str, tuple]:
        own = {f.name: f for f in dataclasses.fields(cls) if f.name in cls.__dict__.get("__annotations__", {})}
        return {n: (repr(f.default), getattr(f.default_factory, "__qualname__", None), f.metadata.get("doc"))
                for n, f in own.items()}  # fmt: skip

    configs = {kind: spec.config for kind, spec in STAGES.items()}
    trained = [k for k, c in configs.items() if "checkpoint_every" in {f.name for f in dataclasses.fields(c)}]
    assert len(trained) >= 6
    assert all(issubclass(configs[k], TrainingStageConfig) for k in trained), trained
    seen: dict[tuple, list[str]] = defaultdict(list)
    for kind, cls in configs.items():
        for name, how in declared(cls).items():
            seen[(name, *how)].append(kind)
    repeated = {key[0]: kinds for key, kinds in seen.items() if len(kinds) > 1}
    assert repeated == {}, repeated
    shared = declared(TrainingStageConfig)
    for kind in trained:  # a redeclared shared field changes its default or its words
        for name, how in declared(configs[kind]).items():
            assert shared.get(name) != how, f"{kind}.{name} repeats TrainingStageConfig's"
