"""Pictures of motion references: a strip of key frames of the robot over its obstacle."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def reference_strip(ref, robot_cfg, path: str | Path, frames: int = 6, size: tuple[int, int] = (320, 300)) -> Path:
    """A PNG of ``frames`` evenly spaced poses of ``ref`` (with its motion loaded) over its obstacle, side on."""
    from llp.evaluation.video import ROBOT_RGBA, _caption, gl_backend

    gl_backend()
    import mujoco
    from PIL import Image

    from llp.motion.scene import SceneModel

    scene = SceneModel(robot_cfg, ref.obstacle, {})
    model, data = scene.model, scene.data
    robot = np.isin(np.arange(model.ngeom), scene.robot_geoms)
    model.geom_rgba[robot] = ROBOT_RGBA
    model.vis.headlight.ambient[:] = 0.4
    width, height = size
    model.vis.global_.offwidth, model.vis.global_.offheight = max(width, 640), max(height, 480)
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    camera.distance, camera.elevation, camera.azimuth = 2.0, -12.0, 75.0  # side on, slightly from the front
    option = mujoco.MjvOption()
    option.geomgroup[:] = 1
    centre = ref.obstacle.front_x / 2 + ref.obstacle.depth / 4
    picks = np.linspace(0, len(ref.qpos) - 1, frames).round().astype(int)
    tiles = []
    with mujoco.Renderer(model, height, width) as renderer:
        for i in picks:
            scene.set_qpos(ref.qpos[i])
            camera.lookat[:] = (centre, 0.0, 0.45)
            renderer.update_scene(data, camera, option)
            tiles.append(_caption(renderer.render(), [f"{ref.id}  t {i / ref.fps:.2f} s"]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.concatenate(tiles, axis=1)).save(path)
    return path
