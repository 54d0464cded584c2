"""Convert a robot's MJCF to the USD Isaac Lab loads, and check that the USD is the same robot.

    make robot-usd ROBOT=lightbot0_like     # the converter's own environment (its MuJoCo is not Newton's)

Writes ``llp/sim/assets/usd/<robot>.usdc`` with NVIDIA's ``mujoco-usd-converter`` (Isaac Lab's own MJCF importer
needs Isaac Sim). The root body is moved to the USD's origin first: Isaac Lab places that body, not the prim,
at an env's initial root position on every reset. The check compares the USD with the MJCF: total mass, the
actuated joints' names and ranges.
Gains, limits and the default pose are not taken from the USD: ``llp.sim.isaaclab.articulation`` reads them
from the MJCF."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import mujoco

from llp.sim.isaaclab.articulation import ASSETS, joint_drives

MASS_TOLERANCE = 1e-4  # kg, the USD's float32 masses summed
RANGE_TOLERANCE = 1e-5  # rad, after the USD's degrees


def usd_robot(usd: Path) -> tuple[float, dict[str, tuple[float, float]]]:
    """Total mass and revolute joints (name -> range in radians) of a robot USD."""
    from pxr import Usd, UsdPhysics

    stage = Usd.Stage.Open(str(usd))
    mass, joints = 0.0, {}
    for prim in stage.Traverse():
        if prim.HasAPI(UsdPhysics.MassAPI):
            mass += UsdPhysics.MassAPI(prim).GetMassAttr().Get() or 0.0
        if prim.IsA(UsdPhysics.RevoluteJoint):
            j = UsdPhysics.RevoluteJoint(prim)
            lo, hi = j.GetLowerLimitAttr().Get(), j.GetUpperLimitAttr().Get()
            joints[prim.GetName()] = (math.radians(lo), math.radians(hi))
    return mass, joints


def compare(mjcf: Path, usd: Path) -> dict:
    """What the check found: masses, and every joint whose name or range differs (empty when all agree)."""
    model = mujoco.MjModel.from_xml_path(str(mjcf))
    drives = joint_drives(mjcf)
    mass, joints = usd_robot(usd)
    mj_mass = float(model.body_mass.sum())
    wrong = {
        n: {"mjcf": [d.lower, d.upper], "usd": list(joints.get(n, ()))}
        for n, d in drives.items()
        if n not in joints or max(abs(joints[n][0] - d.lower), abs(joints[n][1] - d.upper)) > RANGE_TOLERANCE
    }
    extra = sorted(set(joints) - set(drives))
    return {"mass_mjcf": mj_mass, "mass_usd": mass, "joints": len(joints), "wrong_joints": wrong,
            "extra_joints": extra, "ok": abs(mass - mj_mass) < MASS_TOLERANCE and not wrong and not extra}  # fmt: skip


def convert(name: str) -> Path:
    """``llp/sim/assets/<name>.xml`` -> ``llp/sim/assets/usd/<name>.usdc`` (replaced whole, or left as it was)."""
    from mujoco_usd_converter import Converter

    mjcf = ASSETS / f"{name}.xml"
    if not mjcf.exists():
        raise FileNotFoundError(f"no robot {name!r}: {mjcf} does not exist")
    out = ASSETS / "usd" / f"{name}.usdc"
    spec = mujoco.MjSpec.from_file(str(mjcf))
    spec.worldbody.first_body().pos = [0.0, 0.0, 0.0]
    with tempfile.TemporaryDirectory() as tmp:
        rooted = Path(tmp) / "model" / f"{name}.xml"
        rooted.parent.mkdir()
        rooted.write_text(spec.to_xml())
        result = Converter(layer_structure=False, scene=False).convert(str(rooted), tmp)
        made = Path(result.path)
        report = compare(mjcf, made)
        if not report["ok"]:
            raise ValueError(f"the USD of {name} is not the MJCF's robot: {json.dumps(report)}")
        out.parent.mkdir(exist_ok=True)
        shutil.move(made, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("robot", help="a robot of llp/sim/assets, e.g. lightbot0_like")
    parser.add_argument("--check-only", action="store_true", help="compare the shipped USD, convert nothing")
    args = parser.parse_args(argv)
    out = ASSETS / "usd" / f"{args.robot}.usdc" if args.check_only else convert(args.robot)
    report = compare(ASSETS / f"{args.robot}.xml", out)
    print(json.dumps({"usd": str(out), **report}))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
