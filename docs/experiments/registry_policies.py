"""What the experiment scripts that run registered policies share: their command line (a run root holding a
registry, then model URIs), the local profile's final evaluation protocol, and loading a policy by URI."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def parse_args(doc: str, option: str, default: int) -> tuple[argparse.Namespace, Path]:
    """RUN_ROOT MODEL... and one integer ``option``; points MLflow at RUN_ROOT's registry."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("run_root")
    parser.add_argument("models", nargs="+")
    parser.add_argument(option, type=int, default=default)
    args = parser.parse_args()
    root = Path(args.run_root).resolve()
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    return args, root


def final_protocol():
    """The local profile's final evaluation protocol (``evaluate_final``)."""
    from llp.stages.registry import load_pipeline, stage_config

    return stage_config(load_pipeline("local"), "evaluate_final").protocol


def load_policy(root: Path, model: str):
    """The registered policy ``model`` (a models:/ URI) of the registry under ``root``, frozen."""
    from llp.flows import tracking
    from llp.learn.spec import FrozenPolicy

    uri = tracking.registered_model(root, "llp", model)
    return FrozenPolicy(uri, *tracking.download_policy(uri))
