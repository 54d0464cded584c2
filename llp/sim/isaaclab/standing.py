"""The robot standing in Isaac Lab on Newton: its default pose held by the PD servos (zero actions) on flat
ground, the base height every policy step. ``llp.sim.isaaclab`` checks it against the MuJoCo backend's.

    python -m llp.sim.isaaclab.standing lightbot0_like --seconds 2     # in the Isaac Lab environment
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

PHYSICS_DT = 0.005  # llp.sim.config.EnvConfig.physics_dt
DECIMATION = 4  # llp.sim.config.EnvConfig.decimation: base heights at the 50 Hz policy rate


def stand(robot: str, seconds: float, num_envs: int = 1, device: str = "cpu") -> dict:
    """Base heights and pitches [steps] of env 0 while the default pose is held; how long building and stepping
    took."""
    t0 = time.perf_counter()
    import isaaclab.sim as sim_utils
    from isaaclab.assets import AssetBaseCfg
    from isaaclab.scene import InteractiveScene, InteractiveSceneCfg
    from isaaclab.utils import configclass
    from isaaclab_newton.physics import MJWarpSolverCfg, NewtonCfg

    from llp.sim.isaaclab.articulation import ASSETS, robot_cfg

    ground_usd = ASSETS / "usd" / "ground_plane.usda"

    articulation = robot_cfg(robot)

    @configclass
    class StandingSceneCfg(InteractiveSceneCfg):
        # our plane: Isaac Lab's own ground is a remote USD, and its flat generated tile a mesh of no volume,
        # which MuJoCo Warp refuses
        ground = AssetBaseCfg(prim_path="/World/ground", spawn=sim_utils.GroundPlaneCfg(usd_path=str(ground_usd)))
        robot = articulation

    physics = NewtonCfg(solver_cfg=MJWarpSolverCfg())
    sim = sim_utils.SimulationContext(sim_utils.SimulationCfg(dt=PHYSICS_DT, device=device, physics=physics))
    scene = InteractiveScene(StandingSceneCfg(num_envs=num_envs, env_spacing=2.0))
    sim.reset()
    art = scene["robot"]
    built = time.perf_counter() - t0
    targets = art.data.default_joint_pos.torch.clone()
    heights, pitches = [], []
    t1 = time.perf_counter()
    for step in range(round(seconds / PHYSICS_DT)):
        art.actuators.target_command.set_position_index(value=targets)
        scene.write_data_to_sim()
        sim.step()
        scene.update(PHYSICS_DT)
        if (step + 1) % DECIMATION == 0:
            heights.append(float(art.data.root_pos_w.torch[0, 2]))
            x, y, z, w = (float(v) for v in art.data.root_quat_w.torch[0])  # xyzw
            pitches.append(math.asin(max(-1.0, min(1.0, 2.0 * (w * y - z * x)))))
    stepped = time.perf_counter() - t1
    return {"robot": robot, "base_height": heights, "base_pitch": pitches, "build_s": round(built, 1),
            "step_s": round(stepped, 1), "joint_names": list(art.joint_names)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("robot")
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    print(json.dumps(stand(args.robot, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
