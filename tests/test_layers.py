"""The layers import downwards only: science and config know nothing of stages, actors, flows, Ray, Prefect or
MLflow (the import circle config -> stages -> actors -> config must not come back)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABOVE = ("llp.stages", "llp.actors", "llp.flows", "llp.infra", "llp.cli", "ray", "prefect", "mlflow")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", ["llp/config", "llp/sim", "llp/learn", "llp/evaluation"])
def test_science_and_config_import_nothing_above_them(layer):
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            n for n in _imports(path) if n.split(".")[0] in ("ray", "prefect", "mlflow") or n.startswith(ABOVE)
        )
        for path in (ROOT / layer).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_actors_do_not_import_prefect_or_mlflow():
    for path in (ROOT / "actors").rglob("*.py"):
        bad = [n for n in _imports(path) if n.split(".")[0] in ("prefect", "mlflow") or n.startswith("llp.flows")]
        assert bad == [], path
