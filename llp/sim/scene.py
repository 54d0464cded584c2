"""Assemble the MuJoCo models: the robot plus the terrain around one tile, one model per tile.

Each env is one simulation of a ``mujoco.batch.Batch`` running on its own copy
of its tile's model. A model holds only the terrain within reach of its tile
(the tile plus a margin), because every static geom costs broad-phase time at
every physics step; all tile models are padded with inert geoms to the same
geom count so that they share one MjData layout. The same models serve the
depth camera's ray casts (terrain geom group only).
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from llp.sim.robot import TERRAIN_GROUP, RobotConfig, load_robot_spec
from llp.sim.terrain import Terrain

# Terrain friction is kept at the floor so that MuJoCo's max-combination makes the
# (per-env randomised) robot geom friction the effective contact friction.
TERRAIN_FRICTION = (0.05, 0.005, 0.0001)
# Terrain within this distance of a tile's edge is part of the tile's model: the depth camera (2 m clip)
# must see it, and a robot is truncated once it leaves its tile.
TILE_MARGIN = 3.0


@dataclass
class SceneModel:
    """Per-tile models and the indices the env reads from them (identical in every tile model)."""

    model: mujoco.MjModel  # tile 0's model: sizes and names for everything else
    tile_models: list[mujoco.MjModel]
    joint_ids: np.ndarray  # [num_actions] joint id of each actuator, in actuator order
    joint_qpos: np.ndarray  # [num_actions] qpos address of each actuated joint
    joint_qvel: np.ndarray  # [num_actions] qvel address of each actuated joint
    base_body: int
    foot_sites: np.ndarray  # [2]
    camera_site: int
    contact_bodies: list[str]  # bodies with a contact sensor, in sensor order
    contact_adr: np.ndarray  # [num_contact_bodies] sensordata address of each body's (found, fx, fy, fz)
    foot_vel_adr: np.ndarray  # [2] sensordata address of each foot site's world linear velocity
    robot_geoms: np.ndarray  # geom ids of robot collision geoms


def add_terrain(spec: mujoco.MjSpec, boxes, prisms, hfields, pad_to: int | None = None) -> int:
    """Add terrain geoms (group TERRAIN_GROUP, collide with the robot) to ``spec``; pad with inert geoms."""
    world = spec.worldbody
    count = 0

    def geom(**kwargs):
        nonlocal count
        g = world.add_geom(**kwargs)
        g.contype, g.conaffinity, g.condim = 0, 1, 3
        g.group = TERRAIN_GROUP
        g.friction = list(TERRAIN_FRICTION)
        g.rgba = [0.55, 0.6, 0.65, 1.0]
        count += 1
        return g

    for box in boxes:
        geom(type=mujoco.mjtGeom.mjGEOM_BOX, pos=list(box.center), size=list(box.half))
    for i, prism in enumerate(prisms):
        verts = [[x, y, z] for y in (-prism.half_width, prism.half_width) for x, z in prism.profile]
        spec.add_mesh(name=f"prism{i}", uservert=np.asarray(verts, dtype=np.float32).ravel().tolist())
        geom(type=mujoco.mjtGeom.mjGEOM_MESH, meshname=f"prism{i}", pos=list(prism.center))
    for i, hf in enumerate(hfields):
        top = float(hf.heights.max())
        scale = top if top > 0 else 1.0
        nrow, ncol = hf.heights.shape
        spec.add_hfield(
            name=f"hfield{i}",
            size=[hf.half[0], hf.half[1], scale, 0.1],
            nrow=nrow,
            ncol=ncol,
            userdata=(hf.heights / scale).astype(np.float32).ravel().tolist(),
        )
        geom(type=mujoco.mjtGeom.mjGEOM_HFIELD, hfieldname=f"hfield{i}", pos=list(hf.center))
    if pad_to is not None:
        for _ in range(pad_to - count):
            g = world.add_geom(type=mujoco.mjtGeom.mjGEOM_SPHERE, size=[0.001, 0, 0], pos=[0, 0, -100])
            # inert: collides with nothing (contype 2 matches no conaffinity) and is in no ray group;
            # contype must be non-zero or discardvisual would drop it and break the shared layout
            g.contype, g.conaffinity, g.group = 2, 0, 5
    return count


def tile_geometry(terrain: Terrain, tile_index: int, margin: float = TILE_MARGIN):
    cfg, tile = terrain.config, terrain.tiles[tile_index]
    ox, oy = tile.origin
    return terrain.geometry_near(
        ox - cfg.tile_length / 2 - margin,
        ox + cfg.tile_length / 2 + margin,
        oy - cfg.tile_width / 2 - margin,
        oy + cfg.tile_width / 2 + margin,
    )


def add_contact_sensor(spec: mujoco.MjSpec, body: str) -> None:
    """A sensor ``contact_<body>``: the net contact force on ``body`` (found, fx, fy, fz; world frame)."""
    spec.add_sensor(
        name=f"contact_{body}",
        type=mujoco.mjtSensor.mjSENS_CONTACT,
        objtype=mujoco.mjtObj.mjOBJ_BODY,
        objname=body,
        intprm=[3, 3, 1],  # data = found|force, reduce = netforce (world frame), one slot
    )


def contact_force_columns(model: mujoco.MjModel, bodies: list[str]) -> np.ndarray:
    """The sensordata columns of the forces (fx, fy, fz) of ``bodies``' contact sensors, body after body."""
    adr = np.array([model.sensor(f"contact_{b}").adr[0] for b in bodies], dtype=np.int64)
    return (adr[:, None] + np.arange(1, 4)[None, :]).ravel()


def robot_scene_spec(robot: RobotConfig, physics_dt: float, solver_iterations: int = 6):
    """The robot as a spec with the solver options and the sensors the tasks read; (spec, contact bodies)."""
    spec = load_robot_spec(robot)
    spec.option.timestep = physics_dt
    spec.option.iterations = solver_iterations
    spec.option.ls_iterations = 8
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    for sensor in list(spec.sensors):
        spec.delete(sensor)  # the source model's sensors cost time every step; the env reads what it needs
    # contact sensors: net contact force on every robot body that has collision geometry
    contact_bodies = []
    for body in spec.bodies:
        if body == spec.worldbody:
            continue
        if any(g.contype for g in body.geoms):
            contact_bodies.append(body.name)
            add_contact_sensor(spec, body.name)
    for site in robot.foot_sites:
        spec.add_sensor(
            name=f"vel_{site}", type=mujoco.mjtSensor.mjSENS_FRAMELINVEL, objtype=mujoco.mjtObj.mjOBJ_SITE, objname=site
        )
    return spec, contact_bodies


def robot_collision_geoms(model: mujoco.MjModel) -> np.ndarray:
    """Geom ids of the robot's collision geoms in ``model`` (they shift with the terrain geoms before them)."""
    return np.array([g for g in range(model.ngeom) if model.geom_contype[g] and model.geom_bodyid[g] != 0])


def world_model(robot: RobotConfig, terrain: Terrain, physics_dt: float, solver_iterations: int = 6) -> mujoco.MjModel:
    """One model with the robot and the whole terrain, for backends that run every env on one model (MuJoCo
    Warp: one world per env, each robot on its own tile of the shared terrain)."""
    spec, _ = robot_scene_spec(robot, physics_dt, solver_iterations)
    add_terrain(spec, *terrain.geometry_near(-np.inf, np.inf, -np.inf, np.inf))
    return spec.compile()


def build_scene(robot: RobotConfig, terrain: Terrain, physics_dt: float, solver_iterations: int = 6) -> SceneModel:
    """Compile one model per tile: robot + nearby terrain + the sensors the tasks use."""
    spec, contact_bodies = robot_scene_spec(robot, physics_dt, solver_iterations)

    geometry = [tile_geometry(terrain, k) for k in range(len(terrain.tiles))]
    slots = max(len(b) + len(p) + len(h) for b, p, h in geometry)
    tile_models = []
    for boxes, prisms, hfields in geometry:
        tile_spec = spec.copy()
        add_terrain(tile_spec, boxes, prisms, hfields, pad_to=slots)
        tile_models.append(tile_spec.compile())
    model = tile_models[0]

    joint_ids = np.array([model.actuator_trnid[a, 0] for a in range(model.nu)], dtype=np.int64)
    contact_adr = np.array([model.sensor(f"contact_{b}").adr[0] for b in contact_bodies], dtype=np.int64)
    foot_vel_adr = np.array([model.sensor(f"vel_{s}").adr[0] for s in robot.foot_sites], dtype=np.int64)
    robot_geoms = robot_collision_geoms(model)
    return SceneModel(
        model=model,
        tile_models=tile_models,
        joint_ids=joint_ids,
        joint_qpos=model.jnt_qposadr[joint_ids].astype(np.int64),
        joint_qvel=model.jnt_dofadr[joint_ids].astype(np.int64),
        base_body=model.body(robot.base_body).id,
        foot_sites=np.array([model.site(s).id for s in robot.foot_sites], dtype=np.int64),
        camera_site=model.site(robot.camera_site).id,
        contact_bodies=contact_bodies,
        contact_adr=contact_adr,
        foot_vel_adr=foot_vel_adr,
        robot_geoms=robot_geoms,
    )
