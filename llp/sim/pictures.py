"""Pictures of what the simulator builds and what the robot sees: terrain layouts and depth images."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from llp.sim.tasks import env_config  # noqa: E402
from llp.sim.terrain import TILE_TYPES, generate_terrain  # noqa: E402


def render_terrain(
    out: str | Path, task: str = "locomotion", tile_types: list[str] | None = None, seed: int = 0, num_levels: int = 5
) -> Path:
    """Top view of the tile grid (height as colour) with spawn points, goals and obstacle outlines."""
    types = list(tile_types) if tile_types else list(TILE_TYPES)
    cfg = env_config(task, overrides={"terrain": {"tile_types": types, "num_levels": num_levels}}).terrain
    terrain = generate_terrain(cfg, seed)
    h = terrain.heights
    ny, nx = h.shape
    extent = (
        terrain.origin[0],
        terrain.origin[0] + nx * terrain.resolution,
        terrain.origin[1],
        terrain.origin[1] + ny * terrain.resolution,
    )
    fig, ax = plt.subplots(figsize=(max(8, len(types) * 1.6), 8))
    im = ax.imshow(h, origin="lower", extent=extent, cmap="terrain", vmin=-cfg.pit_depth, vmax=0.8)
    fig.colorbar(im, ax=ax, label="ground height (m)", shrink=0.7)
    for tile in terrain.tiles:
        ax.plot(tile.spawn[0], tile.spawn[1], "o", color="white", ms=3)
        if tile.goal is not None:
            ax.plot(tile.goal[0], tile.goal[1], "*", color="red", ms=6)
        for trigger in tile.triggers:
            ax.plot([trigger, trigger], [tile.origin[1] - 1, tile.origin[1] + 1], color="yellow", lw=0.8)
    for col, name in enumerate(types):
        ax.text(
            (col + 0.5) * cfg.tile_length, -cfg.border * 0.5, name, ha="center", va="center", fontsize=8, rotation=20
        )
    for level in range(cfg.num_levels):
        ax.text(
            -cfg.border * 0.5,
            (level + 0.5) * cfg.tile_width,
            f"level {level}",
            ha="center",
            va="center",
            fontsize=8,
            rotation=90,
        )
    ax.set_xlabel("x (m): direction of travel")
    ax.set_ylabel("y (m)")
    ax.set_title("Terrain tiles (columns: type, rows: curriculum level); o spawn, * goal, | phase triggers")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def _standing_robot(task: str, tile_type: str, seed: int, level: int):
    """An env of one robot standing a little before the obstacle of a ``tile_type`` tile: (env, cfg, tile, x,
    ground)."""
    import torch  # noqa: F401  (the env returns torch tensors)

    from llp.sim.env import ParkourEnv

    overrides = {
        "terrain": {"tile_types": [tile_type], "num_levels": max(level + 1, 1)},
        "observations": {"policy": ["proprio", "depth"]},
        "curriculum": {"enabled": False, "initial_max_level": level},
        "randomization": {"spawn_jitter": 0.0, "init_joint_noise": 0.0, "push_interval_s": None},
    }
    cfg = env_config(task, overrides=overrides)
    env = ParkourEnv(cfg, num_envs=1, seed=seed)
    tile = env.terrain.tile(level, 0)
    env.level[:] = level
    env._reset_envs(np.array([0]))
    # stand a little before the obstacle (at the approach phase's end) so that it is within the 2 m clip
    x = tile.triggers[0] - 0.2 if tile.triggers else tile.spawn[0]
    ground = float(env.terrain.height_at(np.array([x, tile.spawn[1]])))
    env.set_base_pose(0, np.array([x, tile.spawn[1], ground + cfg.robot.base_height]), 0.0)
    return env, cfg, tile, x, ground


def render_depth(
    out: str | Path, task: str = "locomotion", tile_type: str = "climb", seed: int = 0, level: int = 4
) -> Path:
    """The chest camera's depth image for a robot standing at the spawn of a ``tile_type`` tile."""
    env, cfg, tile, x, ground = _standing_robot(task, tile_type, seed, level)
    image = env.depth_images()[0]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [1.6, 1]})
    im = axes[0].imshow(image, cmap="viridis_r", vmin=0.0, vmax=cfg.depth_camera.far)
    fig.colorbar(im, ax=axes[0], label="depth (m)")
    axes[0].set_title(f"chest depth camera, {image.shape[1]}x{image.shape[0]}, {tile_type} level {level}")
    axes[0].axis("off")
    xs = np.linspace(x - 0.5, x + 3.0, 500)
    profile = env.terrain.height_at(np.stack([xs, np.full_like(xs, tile.spawn[1])], axis=1))
    axes[1].fill_between(xs - x, -cfg.terrain.pit_depth, profile, color="0.6")
    axes[1].plot([0], [cfg.robot.base_height + ground], "o", color="tab:blue", label="robot base")
    axes[1].axvline(
        cfg.depth_camera.far * np.cos(np.pi / 4),
        color="tab:purple",
        lw=0.8,
        ls="--",
        label="far clip along the optical axis",
    )
    axes[1].set_xlabel("x from the robot (m)")
    axes[1].set_ylabel("height (m)")
    axes[1].set_title("terrain profile ahead")
    axes[1].legend(loc="upper left", fontsize=8)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out


def render_depth_noise(
    out: str | Path, task: str = "locomotion", tile_type: str = "climb", seed: int = 0, level: int = 4,
    frames: int = 60,
) -> Path:  # fmt: skip
    """The same depth frame clean and through the camera model (noise, per-episode scale, dropout blocks): the
    clean image, then ``frames`` consecutive captures of it, shown as the clean one, one capture and the capture
    that differs most (where a dropout block is)."""
    from llp.sim.camera_model import CameraModel, CameraModelConfig

    env, cfg, _, _, _ = _standing_robot(task, tile_type, seed, level)
    clean = env.depth_images()[0]
    model_cfg = CameraModelConfig(perfect=False) if cfg.camera_model.perfect else cfg.camera_model
    camera = CameraModel(model_cfg, 1, clean.shape, cfg.policy_dt, cfg.depth_camera.far, seed=seed)
    camera.reset(np.array([0]), lambda ids: clean[None], 500)
    shots = [camera._corrupt(np.array([0]), clean[None])[0] for _ in range(frames)]
    far_share = [float(np.mean(s >= cfg.depth_camera.far - 1e-9) - np.mean(clean >= cfg.depth_camera.far - 1e-9))
                 for s in shots]  # fmt: skip
    worst = int(np.argmax(far_share))
    panels = [
        (clean, "clean (ray cast)"),
        (shots[0], f"camera model, capture 1\nscale {camera.depth_scale[0]:.3f}, noise std 0.005 + 0.02 d"),
        (shots[worst], f"capture {worst + 1} of {frames}\nwith a dropout block (read as far)"),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.2))
    for ax, (image, title) in zip(axes, panels):
        im = ax.imshow(image, cmap="viridis_r", vmin=0.0, vmax=cfg.depth_camera.far)
        ax.set_title(title, fontsize=9)
        ax.axis("off")
    fig.colorbar(im, ax=axes, label="depth (m)", shrink=0.9)
    fig.suptitle(f"chest depth camera {clean.shape[1]}x{clean.shape[0]}, {tile_type} level {level}", fontsize=10)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out
