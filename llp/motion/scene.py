"""A reference's obstacle and intended contacts, and the robot-with-obstacle model its checks run on.

Every reference is paired with one box obstacle, placed relative to the motion's start: the motion runs
along +x from x = 0, and the box's front face is ``front_x`` ahead. Intended contacts say which robot
frame touches which surface (the box's top, or the floor) during which time window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llp.config.schema import check, field

SURFACES = ("top", "floor")


@dataclass(kw_only=True)
class ObstacleBox:
    """A box on flat ground, the obstacle of a climb or a vault."""

    kind: str = field(doc="What the box is for: climb or vault.")
    height: float = field(doc="Top of the box above the floor, metres.")
    depth: float = field(doc="Extent along the motion (x), metres.")
    width: float = field(doc="Extent across the motion (y), metres.")
    front_x: float = field(doc="Distance from the motion's start to the box's front face along x, metres.")
    y: float = field(default=0.0, doc="Lateral offset of the box's centre from the motion's start, metres.")

    def validate(self, path: str) -> None:
        check(self.kind in ("climb", "vault"), f"{path}.kind", f"must be climb or vault, got {self.kind!r}")
        for name in ("height", "depth", "width"):
            check(getattr(self, name) > 0, f"{path}.{name}", "must be positive")

    @property
    def center(self) -> np.ndarray:
        return np.array([self.front_x + self.depth / 2, self.y, self.height / 2])

    @property
    def half_size(self) -> np.ndarray:
        return np.array([self.depth / 2, self.width / 2, self.height / 2])

    def raised(self, dz: float) -> ObstacleBox:
        """The same box, ``dz`` metres taller."""
        return ObstacleBox(kind=self.kind, height=self.height + dz, depth=self.depth, width=self.width,
                           front_x=self.front_x, y=self.y)  # fmt: skip


@dataclass(kw_only=True)
class Contact:
    """One intended contact: ``frame`` touches ``surface`` from ``start`` to ``end`` seconds."""

    frame: str = field(doc="Robot contact frame: left_hand, right_hand, left_foot or right_foot.")
    surface: str = field(doc="top (of the obstacle) or floor.")
    start: float = field(doc="Window start, seconds from the motion's start.")
    end: float = field(doc="Window end, seconds.")

    def validate(self, path: str) -> None:
        check(self.surface in SURFACES, f"{path}.surface", f"must be one of {', '.join(SURFACES)}")
        check(0 <= self.start < self.end, f"{path}.end", f"needs 0 <= start < end, got [{self.start}, {self.end}]")


def add_obstacle(spec, obstacle: ObstacleBox, name: str = "obstacle", floor: bool = True) -> None:
    """Add the obstacle box (named ``name``) and, with ``floor``, a floor plane (``floor``) to a robot's MjSpec."""
    import mujoco

    world = spec.worldbody
    geoms = []
    if floor:
        plane = world.add_geom()
        plane.name, plane.type, plane.size = "floor", mujoco.mjtGeom.mjGEOM_PLANE, [0, 0, 0.05]
        plane.rgba = [0.55, 0.6, 0.65, 1]
        geoms.append(plane)
    box = world.add_geom()
    box.name, box.type = name, mujoco.mjtGeom.mjGEOM_BOX
    box.size, box.pos = obstacle.half_size.tolist(), obstacle.center.tolist()
    box.rgba = [0.35, 0.55, 0.8, 1]
    for g in (*geoms, box):
        g.contype, g.conaffinity, g.group = 0, 1, 0


class SceneModel:
    """The robot and its paired obstacle in one MuJoCo model, for the kinematic and scene checks."""

    def __init__(self, robot_cfg, obstacle: ObstacleBox, contact_frames: dict[str, str]):
        import mujoco

        from llp.sim.robot import ROBOT_COLLISION_GROUP, load_robot_spec

        spec = load_robot_spec(robot_cfg)
        add_obstacle(spec, obstacle)
        self.model = model = spec.compile()
        self.data = mujoco.MjData(model)
        self.obstacle = obstacle
        self.floor_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor")
        self.box_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "obstacle")
        self.robot_geoms = [g for g in range(model.ngeom) if model.geom_group[g] == ROBOT_COLLISION_GROUP]
        # contact frame -> the robot geoms of its body (for distances to the surfaces)
        self.frame_geoms: dict[str, list[int]] = {}
        for frame, body in contact_frames.items():
            b = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body)
            check(b >= 0, "retarget.contact_frames", f"body {body!r} of {frame} is not in the robot")
            self.frame_geoms[frame] = [g for g in self.robot_geoms if model.geom_bodyid[g] == b]

    def set_qpos(self, qpos: np.ndarray) -> None:
        import mujoco

        self.data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, self.data)

    def distance(self, geom: int, other: int, distmax: float = 0.5) -> float:
        """Signed distance between two geoms (negative: penetration depth), capped at ``distmax``."""
        import mujoco

        return float(mujoco.mj_geomDistance(self.model, self.data, geom, other, distmax, None))
