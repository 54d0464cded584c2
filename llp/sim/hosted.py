"""Terrain envs where their backend runs: in this process, or, for the isaaclab backend, in a child process
under Isaac Lab's own Python (``llp.sim.remote_env``; docs/isaaclab.md)."""

from __future__ import annotations

from llp.sim.backend import in_isaaclab, isaaclab_python


def parkour_env(cfg, num_envs: int, seed: int = 0, threads: int = 1):
    """A ``ParkourEnv`` of ``cfg``: in this process, or behind an env server when its backend lives elsewhere."""
    if cfg.backend == "isaaclab" and not in_isaaclab():
        from llp.sim.remote_env import RemoteVecEnv

        return RemoteVecEnv("llp.sim.env:ParkourEnv", {"cfg": cfg, "num_envs": num_envs, "seed": seed,
                                                       "threads": threads}, python=str(isaaclab_python()))  # fmt: skip
    from llp.sim.env import ParkourEnv

    return ParkourEnv(cfg, num_envs, seed=seed, threads=threads)
