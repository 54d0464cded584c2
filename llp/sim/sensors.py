"""Exteroceptive sensors: height scan, foot rays, contact forces and a ray-cast depth camera.

The height scan and the foot rays are vertical rays on 2.5-D terrain, which is
exactly a lookup in the terrain's ground-truth height grid (vectorised over all
envs and points at once). The depth camera casts real rays against terrain
only, never the robot: by default with a small C grid traversal of the same
height grid (every ray of every env in one call), or with MuJoCo's
``mj_multiRay`` against the terrain geoms of the env's tile model (exact
geometry, about 10x slower on stairs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from llp.config.schema import check, field
from llp.sim.robot import TERRAIN_GROUP
from llp.sim.terrain import Terrain

if TYPE_CHECKING:
    import mujoco


@dataclass(kw_only=True)
class HeightScanConfig:
    """Grid of vertical rays around the base, aligned with the base's yaw."""

    size: tuple[float, float] = field(default=(1.6, 1.0), doc="Grid extent (x forward, y left), metres.")
    resolution: float = field(default=0.1, doc="Spacing between rays, metres (1.6 x 1.0 at 0.1 = 187 points).")
    offset: tuple[float, float] = field(default=(0.0, 0.0), doc="Grid centre relative to the base, metres.")

    def validate(self, path: str) -> None:
        check(self.resolution > 0, f"{path}.resolution", "must be positive")
        check(all(s >= 0 for s in self.size), f"{path}.size", "must be non-negative")

    def points(self) -> np.ndarray:
        """Ray offsets in the yaw frame, [num_points, 2] (x-major order)."""
        nx = int(round(self.size[0] / self.resolution)) + 1
        ny = int(round(self.size[1] / self.resolution)) + 1
        xs = np.linspace(-self.size[0] / 2, self.size[0] / 2, nx) + self.offset[0]
        ys = np.linspace(-self.size[1] / 2, self.size[1] / 2, ny) + self.offset[1]
        gx, gy = np.meshgrid(xs, ys, indexing="ij")
        return np.stack([gx.ravel(), gy.ravel()], axis=-1)


@dataclass(kw_only=True)
class FootRaysConfig:
    """K vertical rays under each foot, in the foot's yaw frame."""

    grid: tuple[int, int] = field(default=(3, 3), doc="Rays along the foot (x) and across it (y): K = product.")
    extent: tuple[float, float] = field(default=(0.16, 0.07), doc="Footprint covered by the rays, metres.")

    def validate(self, path: str) -> None:
        check(self.grid[0] >= 1 and self.grid[1] >= 1, f"{path}.grid", "needs at least one ray each way")

    def points(self) -> np.ndarray:
        xs = np.linspace(-self.extent[0] / 2, self.extent[0] / 2, self.grid[0]) if self.grid[0] > 1 else np.zeros(1)
        ys = np.linspace(-self.extent[1] / 2, self.extent[1] / 2, self.grid[1]) if self.grid[1] > 1 else np.zeros(1)
        gx, gy = np.meshgrid(xs, ys, indexing="ij")
        return np.stack([gx.ravel(), gy.ravel()], axis=-1)


@dataclass(kw_only=True)
class DepthCameraConfig:
    """Geometric depth image from the chest camera frame."""

    width: int = field(default=64, doc="Image width, pixels.")
    height: int = field(default=36, doc="Image height, pixels.")
    fovy: float = field(default=58.0, doc="Vertical field of view, degrees (square pixels).")
    near: float = field(default=0.0, doc="Near clip, metres: closer hits read as near.")
    far: float = field(default=2.0, doc="Far clip, metres: misses and farther hits read as far.")
    backend: str = field(
        default="heightmap",
        doc="'heightmap': C grid traversal of the terrain's height grid (exact for its 2.5-D cells, fast); "
        "'mujoco': mj_multiRay against the terrain geoms themselves (exact geometry, slower).",
    )

    def validate(self, path: str) -> None:
        check(self.width >= 1 and self.height >= 1, f"{path}.width", "image needs at least one pixel")
        check(self.backend in ("heightmap", "mujoco"), f"{path}.backend", "allowed values: 'heightmap', 'mujoco'")
        check(0 < self.fovy < 179, f"{path}.fovy", "must be in (0, 179) degrees")
        check(0 <= self.near < self.far, f"{path}.far", "must be greater than near >= 0")


def height_scan(
    terrain: Terrain, points: np.ndarray, base_pos: np.ndarray, yaw: np.ndarray, base_height: float
) -> np.ndarray:
    """Terrain height at each scan point relative to the ground level implied by the base.

    Args:
        points: [P, 2] scan offsets in the yaw frame.
        base_pos: [N, 3] base positions; yaw: [N] base yaw.
        base_height: the base's height above flat ground in the default pose.

    Returns:
        [N, P] heights: 0 for ground level with the robot standing, +0.6 for the top of a 0.6 m box.
    """
    ground = terrain.height_around(base_pos[:, :2], yaw, points)
    return ground - (base_pos[:, 2:3] - base_height).astype(np.float32)


def foot_ray_heights(terrain: Terrain, points: np.ndarray, foot_pos: np.ndarray, foot_yaw: np.ndarray) -> np.ndarray:
    """Ground height under each foot ray: foot_pos [N, F, 3], foot_yaw [N, F] -> [N, F, K]."""
    n, f = foot_yaw.shape
    heights = terrain.height_around(foot_pos[:, :, :2].reshape(n * f, 2), foot_yaw.reshape(-1), points)
    return heights.reshape(n, f, -1)


def camera_rays(cfg: DepthCameraConfig) -> tuple[np.ndarray, np.ndarray]:
    """The camera's pixel rays: unit directions in the camera frame [P, 3] (MuJoCo's cameras look along -z;
    row-major pixels, top row first) and the z-depth per unit of ray length [P]."""
    tan_y = np.tan(np.radians(cfg.fovy) / 2)
    tan_x = tan_y * cfg.width / cfg.height
    u = (2 * (np.arange(cfg.width) + 0.5) / cfg.width - 1) * tan_x
    v = (1 - 2 * (np.arange(cfg.height) + 0.5) / cfg.height) * tan_y
    uu, vv = np.meshgrid(u, v)
    dirs = np.stack([uu, vv, -np.ones_like(uu)], axis=-1).reshape(-1, 3)
    norm = np.linalg.norm(dirs, axis=1, keepdims=True)
    return dirs / norm, (1.0 / norm[:, 0]).astype(np.float64)


class DepthCamera:
    """Ray-cast depth images of the terrain: all images in one C call (heightmap backend) or one
    ``mj_multiRay`` call per image (mujoco backend)."""

    def __init__(self, cfg: DepthCameraConfig, tile_models: list[mujoco.MjModel], terrain: Terrain):
        """``tile_models``: one model per tile holding the terrain within reach of the tile (robot geoms are
        skipped by the geom-group filter, so the physics models serve as they are)."""
        import mujoco

        self.cfg = cfg
        self.dirs_cam, self.axial = camera_rays(cfg)  # [P, 3] unit rays (camera frame), [P] z-depth per length
        self._models = tile_models
        self._datas = []
        for m in self._models:
            d = mujoco.MjData(m)
            mujoco.mj_kinematics(m, d)  # terrain is static: its geom poses never change
            self._datas.append(d)
        n = len(self.dirs_cam)
        self._dist = np.zeros(n)
        self._geom = np.zeros(n, dtype=np.int32)
        self._group = np.zeros(mujoco.mjNGROUP, dtype=np.uint8)
        self._group[TERRAIN_GROUP] = 1
        self._terrain = terrain

    def render(self, tile_ids: np.ndarray, cam_pos: np.ndarray, cam_mat: np.ndarray, out: np.ndarray) -> None:
        """Depth images for envs on tiles ``tile_ids`` [n] with camera poses ``cam_pos`` [n, 3], ``cam_mat`` [n, 3, 3].

        Writes z-depth in metres, clipped to [near, far], into ``out`` [n, height, width].
        """
        import mujoco

        far, near = self.cfg.far, self.cfg.near
        n = len(tile_ids)
        flat = out.reshape(n, -1)
        world_dirs = np.einsum("nij,pj->npi", cam_mat, self.dirs_cam)  # [n, P, 3]
        if self.cfg.backend == "heightmap":
            from llp.sim import _raycast

            t = self._terrain
            grid = t.heights if t.heights.dtype == np.float32 else t.heights.astype(np.float32)
            dist = np.empty((n, len(self.dirs_cam)))
            _raycast.cast(
                np.ascontiguousarray(grid),
                grid.shape[1],
                grid.shape[0],
                t.origin[0],
                t.origin[1],
                t.resolution,
                np.ascontiguousarray(cam_pos, dtype=np.float64),
                np.ascontiguousarray(world_dirs),
                len(self.dirs_cam),
                far,
                dist,
            )
            np.clip(dist * self.axial[None, :], near, far, out=flat)
            return
        for i, tile in enumerate(tile_ids):
            vec = np.ascontiguousarray(world_dirs[i]).reshape(-1)
            mujoco.mj_multiRay(
                self._models[tile],
                self._datas[tile],
                cam_pos[i],
                vec,
                self._group,
                1,
                -1,
                self._geom,
                self._dist,
                None,
                len(self._dist),
                far,
            )
            depth = np.where(self._dist < 0, far, self._dist * self.axial)
            flat[i] = np.clip(depth, near, far)
