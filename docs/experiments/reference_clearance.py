"""How close each library entry's motion brings the robot's termination bodies (pelvis, torso: a contact of one
ends a course trial as a fall) to its box: the least signed distance over the motion, for the kept rollout and the
proposal its tracker followed. Usage (from the repository root), on the run directory of a run that grew the
library:

    python docs/experiments/reference_clearance.py /tmp/RUN/runs/RUN_ID [--stage reference_augmentation]
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--stage", default="reference_augmentation")
    parser.add_argument("--robot", default="lightbot0_like")
    args = parser.parse_args()

    import numpy as np

    from llp.config.files import named
    from llp.config.schema import build
    from llp.motion.library import open_library
    from llp.motion.scene import SceneModel
    from llp.sim.robot import RobotConfig

    library = open_library(args.run_dir / "references" / args.stage)
    robot = build(RobotConfig, named("robot", args.robot), "robot")
    print(f"{'entry':20s} {'motion':8s} " + " ".join(f"{b + ' (cm, s)':>16s}" for b in robot.termination_bodies))
    for entry in library.entries:
        ref = library.get(entry.id, with_motion=True)
        scene = SceneModel(robot, ref.obstacle, {})
        m = scene.model
        geoms = [[g for g in scene.robot_geoms if m.geom_bodyid[g] == m.body(b).id] for b in robot.termination_bodies]
        for name, motion in (("rollout", ref.qpos), ("tracked", ref.tracked)):
            if motion is None:
                continue
            cells = []
            for ids in geoms:
                gaps = []
                for q in motion:
                    scene.set_qpos(q)
                    gaps.append(min(scene.distance(g, scene.box_id) for g in ids))
                k = int(np.argmin(gaps))
                cells.append(f"{100 * gaps[k]:9.1f} {k / ref.fps:5.2f}s")
            height = f"{entry.id} {100 * ref.obstacle.height:.0f}cm"
            print(f"{height:20s} {name:8s} " + " ".join(f"{c:>16s}" for c in cells))


if __name__ == "__main__":
    main()
