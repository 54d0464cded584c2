"""Pieces shared by stage configs: the envs and tasks they build, validated at load time, and what a deployed
policy needs beside its network."""

from __future__ import annotations

from typing import Any

from llp.config.schema import ConfigError, check


def checked_tracking_task(task: str, robot: str, overrides: dict[str, Any], path: str, env_field: str = "env"):
    """The tracking task a stage will run, or a ConfigError whose path starts at the stage's ``env_field``."""
    from llp.motion.tracking import tracking_task

    try:
        return tracking_task(task, robot, overrides)
    except ConfigError as err:
        where = err.path if err.path in ("task", "robot") else f"{env_field}.{err.path}"
        raise ConfigError(f"{path}.{where}", str(err).split(": ", 1)[-1]) from None


def checked_env_config(task: str, robot: str, overrides: dict[str, Any], path: str):
    """The EnvConfig a stage will run, or a ConfigError whose path starts at the stage's config."""
    from llp.sim.tasks import env_config

    try:
        return env_config(task, robot, overrides)
    except ConfigError as err:
        where = err.path if err.path in ("task", "robot") else f"env.{err.path}"
        raise ConfigError(f"{path}.{where}", str(err).split(": ", 1)[-1]) from None


def check_course_tiles(env_cfg, path: str) -> None:
    """A course's env has one tile type, one that puts an obstacle after the approach (a climb or a vault)."""
    from llp.sim.terrain import COURSE_OBSTACLES

    tiles = env_cfg.terrain.tile_types
    check(len(tiles) == 1 and tiles[0] in COURSE_OBSTACLES, f"{path}.terrain.tile_types",
          f"{tiles}: a course takes its approach into one obstacle, one of {sorted(COURSE_OBSTACLES)}")  # fmt: skip


def transition_course() -> dict[str, Any]:
    """Overrides of the locomotion task that make the transition course (LLP stage 5): an approach, the skill's
    box (the library's: 0.6 m deep, 1.2 m wide) at the library's heights, the goal 0.4 m onto it, and a start
    curriculum from exactly the skill's start (0.45 m before the box's front, 2.5 m from the spawn) back to the
    spawn, in small steps near the box. The transition trains on it; the depth student and the final
    evaluation use it too."""
    return {
        "terrain": {
            "tile_types": ["climb"],
            "climb_heights": [0.275, 0.30],
            "num_levels": 2,
            "platform_depth": 0.6,
            "platform_goal": 0.4,
            "obstacle_width": 1.2,
        },
        "observations": {
            "policy": ["proprio", "command", "height_scan"],
            "critic": ["proprio", "command", "height_scan"],
            "amp": ["amp_features", "progress"],
        },
        "rewards": {"feet_phase": {"weight": 0.0}, "goal_reached": {"weight": 10.0}, "goal_approach": {"weight": 1.0}},
        "randomization": {
            "goal_start_curriculum": True,
            "goal_starts": [[2.04, 2.06], [1.98, 2.06], [1.9, 2.06], [1.8, 2.0], [1.65, 1.85], [1.45, 1.7]]
            + [[1.2, 1.5], [0.8, 1.2], [0.4, 0.8], [0.0, 0.4], [0.0, 0.0]],
        },
    }


def check_network_obs(cfg, task: str, produced: dict[str, list[str]], path: str) -> None:
    """Every observation term the stage's actor and critic read is one that task ``task`` produces."""
    for name, refs in (("actor", cfg.actor.obs), ("critic", cfg.critic.obs)):
        for i, ref in enumerate(refs):
            group, _, term = ref.partition("/")
            check(
                term in produced.get(group, []),
                f"{path}.{name}.obs[{i}]",
                f"{ref!r} is not an observation of task {task!r} (it gives {produced})",
            )


def deployment_fields(env_cfg) -> dict[str, Any]:
    """What a robot needs beside the network, for ``export_actor``: joint target = default pose + action_scale x
    action on the driven joints, under PD with the gains of the MJCF's position actuators."""
    from llp.sim.robot import policy_joint_indices

    fields = _robot_fields(env_cfg.robot, env_cfg.robot.action_scale, env_cfg.policy_dt,
                           lambda names: [names[i] for i in policy_joint_indices(env_cfg.robot, names)])  # fmt: skip
    return {**fields, "proprio_layout": "locomotion"}


def tracking_deployment_fields(task) -> dict[str, Any]:
    """The same for a policy of the tracking task: every actuator; actions offset ``task.action_offset``."""
    fields = _robot_fields(task.robot, task.action_scale, task.policy_dt, lambda names: names)
    return {**fields, "action_offset": task.action_offset, "proprio_layout": task.proprio_layout}


def _robot_fields(robot, action_scale: float, policy_dt: float, driven) -> dict[str, Any]:
    from llp.sim.robot import default_joint_positions, load_robot_spec

    model = load_robot_spec(robot).compile()
    joints = [int(model.actuator_trnid[a, 0]) for a in range(model.nu)]
    names = [model.joint(j).name for j in joints]
    return {
        "robot": robot.name,
        "action_scale": action_scale,
        "policy_dt": policy_dt,
        "default_joint_pos": default_joint_positions(robot, model, joints),
        "action_joints": driven(names),
        "pd_gains": {
            "joints": names,
            "kp": [float(model.actuator_gainprm[a, 0]) for a in range(model.nu)],
            "kd": [float(-model.actuator_biasprm[a, 2]) for a in range(model.nu)],
        },
    }


def teacher_walking_states(teacher, cfg, task: str, robot: str, seed: int, path: str):
    """[M, D] walking states (``llp.motion.walking_states``) of ``teacher`` (a frozen locomotion policy, in its own
    action space) walking straight ahead on flat ground at ``cfg.speed`` (a ``WalkingStatesConfig``), unpushed."""
    import re

    from llp.motion.walking_states import record_walking_states
    from llp.sim.env import ParkourEnv

    overrides: dict[str, Any] = {
        "terrain": {"tile_types": ["flat"], "num_levels": 1},
        "commands": {"lin_vel_x": list(cfg.speed), "lin_vel_y": [0.0, 0.0], "ang_vel_yaw": [0.0, 0.0],
                     "heading_command": False, "standing_fraction": 0.0, "resample_s": 100.0},
        "randomization": {"push_interval_s": None},
    }  # fmt: skip
    joints = teacher.spec.get("action_joints")
    if joints:  # the teacher drives these; the rest hold the default pose
        overrides["robot"] = {"policy_joints": [re.escape(j) for j in joints]}
    env = ParkourEnv(checked_env_config(task, robot, overrides, path), cfg.envs, seed=seed)
    return record_walking_states(env, teacher.load(), cfg)
