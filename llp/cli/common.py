"""What the subcommands share: loading the pipeline's config, printing a result."""

from __future__ import annotations

import argparse
import json
import os


def print_result(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            print(f"{key:<{width}}  {value}")


def pipeline_config(args: argparse.Namespace):
    from llp.stages.registry import load_pipeline

    sets = list(args.set)
    if getattr(args, "ablation", None):
        from llp.config.ablation import load_ablation

        sets = load_ablation(args.ablation).sets + sets  # the user's --set still wins
    return load_pipeline(args.profile, sets)


def check_tracking_server() -> None:
    """An MLflow server named by MLFLOW_TRACKING_URI must answer now, not after minutes of retries."""

    from llp.infra.services import healthy

    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if uri.startswith(("http://", "https://")) and not any(healthy(uri.rstrip("/") + "/health") for _ in range(3)):
        raise ValueError(
            f"MLFLOW_TRACKING_URI={uri}: no MLflow server answers there (GET /health); start it or unset it"
        )
