"""The proprioception term's layouts, and converting one into another.

Both envs give one robot's proprioception: base angular velocity (pelvis frame), gravity in the pelvis frame,
joint positions from the default pose, joint velocities x 0.05 and the last action. They order and scale the
first two blocks differently:

  locomotion (``ParkourEnv``; every terrain policy and the deployable one): [0.25 x angular velocity, gravity, ...]
  tracking (``TrackingEnv`` by default; the motion trackers of stage 2): [gravity, angular velocity, ...]

A teacher trained in one layout that labels states of an env in the other reads its own (``teacher_obs``).
"""

from __future__ import annotations

import torch

PROPRIO_LAYOUTS = ("locomotion", "tracking")
ANG_VEL_SCALE = 0.25  # the locomotion layout's scale of the angular velocity (legged_gym's obs_scales.ang_vel)


def proprio_head(ang_vel, gravity, layout: str):
    """The first six columns of the proprioception in ``layout`` (numpy arrays [N, 3] in, a list of blocks out)."""
    if layout == "locomotion":
        return [ang_vel * ANG_VEL_SCALE, gravity]
    if layout == "tracking":
        return [gravity, ang_vel]
    raise ValueError(f"unknown proprioception layout {layout!r}: one of {', '.join(PROPRIO_LAYOUTS)}")


def convert_proprio(proprio: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    """A proprioception tensor [N, D] in layout ``src`` as layout ``dst`` reads it (the first six columns)."""
    for layout in (src, dst):
        if layout not in PROPRIO_LAYOUTS:
            raise ValueError(f"unknown proprioception layout {layout!r}: one of {', '.join(PROPRIO_LAYOUTS)}")
    if src == dst:
        return proprio
    out = proprio.clone()
    if src == "tracking":  # [gravity, w] -> [0.25 w, gravity]
        out[:, 0:3], out[:, 3:6] = proprio[:, 3:6] * ANG_VEL_SCALE, proprio[:, 0:3]
    else:  # [0.25 w, gravity] -> [gravity, w]
        out[:, 0:3], out[:, 3:6] = proprio[:, 3:6], proprio[:, 0:3] / ANG_VEL_SCALE
    return out
