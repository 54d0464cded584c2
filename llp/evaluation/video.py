"""Videos of a policy: one robot on one tile, rendered offscreen by MuJoCo (EGL or OSMesa on the CPU), with the
commanded velocity drawn as an arrow and written on each frame. Writes MP4 (H.264) and GIF."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROBOT_RGBA = (0.95, 0.55, 0.15, 1.0)  # the robot in orange against the grey terrain
COMMAND_RGBA = (0.1, 0.75, 0.2, 0.9)  # the commanded velocity: a green arrow at the base
VELOCITY_RGBA = (0.15, 0.35, 0.95, 0.9)  # the measured velocity: a blue arrow


def gl_backend() -> str:
    """Select MuJoCo's offscreen GL backend: MUJOCO_GL if set, else EGL (Mesa renders it on the CPU). MuJoCo
    picks its backend when it is first imported, which in this process may have been before any video was
    wanted, so the choice is applied to its renderer here."""
    backend = os.environ.setdefault("MUJOCO_GL", "egl").lower()
    os.environ.setdefault("PYOPENGL_PLATFORM", backend)
    from mujoco.rendering.classic import gl_context

    try:
        if backend == "egl":
            from mujoco.egl import GLContext
        elif backend == "osmesa":
            from mujoco.osmesa import GLContext
        else:
            return backend
    except (ImportError, OSError, AttributeError) as err:
        raise RuntimeError(
            f"offscreen rendering with MUJOCO_GL={backend} is not available here ({err}); install Debian's "
            "libegl-mesa0 (MUJOCO_GL=egl) or libosmesa6 (MUJOCO_GL=osmesa)"
        ) from err
    gl_context.GLContext = GLContext
    return backend


@dataclass
class Clip:
    """A rendered rollout: frames [T, H, W, 3] uint8 and how it went."""

    frames: np.ndarray
    fps: float
    tile_type: str
    level: int
    distance_m: float
    fell: bool


def play(
    env,
    policy,
    tile_type: str,
    level: int,
    seconds: float = 6.0,
    speed: float = 0.5,
    fps: float = 25.0,
    size: tuple[int, int] = (480, 360),
    label: str = "",
) -> Clip:
    """Drive env 0 of ``env`` with ``policy`` on a ``tile_type`` tile at ``level``, commanded ``speed`` m/s
    straight ahead, and render it at ``fps``. Stops early when the robot falls (the last frames show the fall)."""
    gl_backend()
    import mujoco
    import torch

    types = list(env.cfg.terrain.tile_types)
    if tile_type not in types:
        raise ValueError(f"tile type {tile_type!r} is not a tile of this task ({', '.join(types)})")
    if not 0 <= level < env.cfg.terrain.num_levels:
        raise ValueError(f"level {level} is outside 0..{env.cfg.terrain.num_levels - 1}")
    width, height = size
    env.reseed(0)
    env.assign_tiles(np.array([0]), np.array([types.index(tile_type)]), np.array([level]))
    start = env.course_state()
    yaw0 = float(start["yaw"][0])
    env.command_envs(np.array([0]), np.array([[speed, 0.0]]), np.array([yaw0]))
    obs = env.observe()
    model = copy.deepcopy(env.env_models[0])
    world = model.geom_bodyid == 0
    model.geom_rgba[~world] = ROBOT_RGBA
    model.vis.headlight.ambient[:] = 0.35
    model.vis.headlight.diffuse[:] = 0.65
    model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
    model.vis.global_.offheight = max(model.vis.global_.offheight, height)
    data = mujoco.MjData(model)
    camera = mujoco.MjvCamera()
    camera.type = mujoco.mjtCamera.mjCAMERA_FREE
    camera.distance, camera.elevation = 2.4, -18.0
    camera.azimuth = np.degrees(yaw0) + 120.0  # three-quarter view from behind and to the side
    every = max(1, int(round(1.0 / (fps * env.dt))))
    steps = int(round(seconds / env.dt))
    frames, fell = [], False
    spawn = start["xy"][0]
    memory = policy.initial_memory(1)
    with mujoco.Renderer(model, height, width) as renderer, torch.no_grad():
        for step in range(steps + 1):
            if step % every == 0 or fell:
                frames.append(_frame(renderer, model, data, camera, env, tile_type, level, step * env.dt, label))
            if fell:
                break
            action, memory, _ = policy.step(policy.observe(obs), memory)
            result = env.step(action)
            if bool(result.truncated[0]):
                break
            fell = bool(result.terminated[0])
            obs = result.obs
    distance = float(np.linalg.norm(env.qpos[0, 0:2] - spawn)) if not fell else float("nan")
    return Clip(np.stack(frames), 1.0 / (every * env.dt), tile_type, level, distance, fell)


def _frame(renderer, model, data, camera, env, tile_type: str, level: int, t: float, label: str) -> np.ndarray:
    import mujoco

    data.qpos[:] = env.qpos[0]
    mujoco.mj_kinematics(model, data)
    base = data.qpos[0:3].copy()
    camera.lookat[:] = (base[0], base[1], base[2] - 0.1)
    option = mujoco.MjvOption()
    option.geomgroup[:] = 1  # the robot's geoms sit in collision groups that the default option hides
    renderer.update_scene(data, camera, option)
    state = env.course_state()
    yaw = float(state["yaw"][0])
    command = env.command[0]
    rot = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
    velocity = env.qvel[0, 0:2]
    _arrow(renderer.scene, base + (0, 0, 0.55), rot @ command[0:2], COMMAND_RGBA)
    _arrow(renderer.scene, base + (0, 0, 0.50), velocity, VELOCITY_RGBA)
    image = renderer.render()
    from llp.sim.terrain import difficulty

    where = f"{tile_type} level {level} ({difficulty(env.cfg.terrain, tile_type, level)})"
    lines = [
        f"{label + '  ' if label else ''}{where}  t {t:4.1f} s",
        f"command vx {command[0]:+.2f} vy {command[1]:+.2f} m/s  yaw {command[2]:+.2f} rad/s (green)",
        f"measured {float(np.linalg.norm(velocity)):.2f} m/s (blue)",
    ]
    return _caption(image, lines)


def _arrow(scene, origin: np.ndarray, vector_xy: np.ndarray, rgba) -> None:
    """An arrow from ``origin`` along the horizontal ``vector_xy`` (1 m per m/s), added to the scene."""
    import mujoco

    if scene.ngeom >= scene.maxgeom or float(np.linalg.norm(vector_xy)) < 1e-3:
        return
    geom = scene.geoms[scene.ngeom]
    mujoco.mjv_initGeom(geom, mujoco.mjtGeom.mjGEOM_ARROW, np.zeros(3), np.zeros(3), np.zeros(9), np.array(rgba))
    tip = origin + np.array([vector_xy[0], vector_xy[1], 0.0])
    mujoco.mjv_connector(geom, mujoco.mjtGeom.mjGEOM_ARROW, 0.015, origin, tip)
    scene.ngeom += 1


def _caption(image: np.ndarray, lines: list[str]) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    picture = Image.fromarray(image)
    draw = ImageDraw.Draw(picture)
    font = ImageFont.load_default(size=max(10, image.shape[0] // 30))
    y = 4
    for line in lines:
        box = draw.textbbox((6, y), line, font=font)
        draw.rectangle((box[0] - 2, box[1] - 1, box[2] + 2, box[3] + 1), fill=(255, 255, 255))
        draw.text((6, y), line, fill=(0, 0, 0), font=font)
        y = box[3] + 3
    return np.asarray(picture)


def write_mp4(frames: np.ndarray, fps: float, path: str | Path) -> Path:
    """H.264 in an MP4 container (yuv420p, so the width and height are cut to even numbers)."""
    import av

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = frames.shape[1] // 2 * 2, frames.shape[2] // 2 * 2
    tmp = path.with_name(path.name + ".part")
    with av.open(str(tmp), mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=int(round(fps)))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for frame in frames:
            image = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame[:h, :w]), format="rgb24")
            for packet in stream.encode(image):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    os.replace(tmp, path)
    return path


def write_gif(frames: np.ndarray, fps: float, path: str | Path, scale: float = 0.5, every: int = 2) -> Path:
    """An animated GIF for READMEs: every ``every``-th frame, scaled by ``scale``."""
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    picked = frames[::every]
    size = (int(picked.shape[2] * scale), int(picked.shape[1] * scale))
    images = [Image.fromarray(f).resize(size, Image.BILINEAR) for f in picked]
    tmp = path.with_name(path.name + ".part")
    images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:], duration=int(1000 * every / fps), loop=0)
    os.replace(tmp, path)
    return path


def policy_clip(frozen, eval_cfg, tile_type: str, level: int, seconds: float, size=(480, 360), seed: int = 0) -> Clip:
    """A clip of a registered policy (a ``FrozenPolicy``; None: the stand-still baseline) on the evaluation env
    of ``eval_cfg``, commanded straight ahead at its traverse speed."""
    from llp.evaluation.trials import StandStill
    from llp.sim.env import ParkourEnv

    joints = None if frozen is None else frozen.spec.get("action_joints")
    env = ParkourEnv(eval_cfg.env_config(action_joints=joints, policy_spec=frozen and frozen.spec), 1, seed=seed)
    policy = StandStill(env.num_actions) if frozen is None else frozen.load()
    label = "stand-still" if frozen is None else frozen.uri
    return play(env, policy, tile_type, level, seconds, speed=eval_cfg.traverse_speed, size=size, label=label)
