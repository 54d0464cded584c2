"""The layers import downwards only: science and config know nothing of stages, actors, flows, Ray, Prefect or
MLflow (the import circle config -> stages -> actors -> config must not come back)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABOVE = ("llp.stages", "llp.actors", "llp.flows", "llp.infra", "llp.cli", "ray", "prefect", "mlflow")


def _imports(path: Path, with_names: bool = False) -> set[str]:
    """The modules ``path`` imports, lazily imported ones included; ``with_names``: also ``module.name`` for each
    name imported from a module (it may be a submodule)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if with_names:
                names |= {f"{node.module}.{a.name}" for a in node.names}
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


# Each package imports only packages of a lower layer (or itself), lazily imported names included.
# llp.skills is stage code that several stages share: the stages' layer (the next test keeps stages apart).
LAYERS = {"config": 0, "infra": 0, "sim": 1, "evaluation": 2, "motion": 3, "learn": 4, "actors": 5, "stages": 6,
          "skills": 6, "flows": 7, "bench": 8, "cli": 9}  # fmt: skip
FOLDERS = {"llp/config": "config", "infra": "infra", "llp/sim": "sim", "llp/evaluation": "evaluation",
           "llp/motion": "motion", "llp/learn": "learn", "actors": "actors", "stages": "stages", "flows": "flows",
           "llp/bench": "bench", "llp/skills": "skills"}  # fmt: skip
SHARED = ("llp.stages.common", "llp.stages.registry")  # stages/ modules that are not stages


def _package(module: str) -> str | None:
    """The layer of an llp module name: llp.<package>[.<module>] (llp.cli is its own)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "llp" and len(parts) > 1 and parts[1] in LAYERS else None


def _module_files() -> dict[str, Path]:
    """Every module of the llp namespace -> its file (flows/, actors/, stages/ and infra/ install under llp.)."""
    out = {}
    for folder, prefix in (("llp", "llp"), ("flows", "llp.flows"), ("actors", "llp.actors"), ("stages", "llp.stages"),
                           ("infra", "llp.infra")):  # fmt: skip
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            out[".".join([prefix, *parts])] = path
    return out


def test_no_import_runs_back_up_the_layers():
    wrong = []
    for folder, layer in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            for name in _imports(path):
                target = _package(name)
                if target and target != layer and LAYERS[target] > LAYERS[layer]:
                    wrong.append(f"{path.relative_to(ROOT)} ({layer}) imports {name} ({target})")
    assert wrong == []


def test_no_modules_import_each_other_in_a_cycle():
    import sys

    files = _module_files()
    graph = {}
    for module, path in files.items():
        graph[module] = {n for n in _imports(path, with_names=True) if n in files and n != module}
    index, low, stack, on, cycles = {}, {}, [], set(), []
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert cycles == []


def _stage_imports(path: Path) -> list[str]:
    """The stage modules that ``path`` imports (lazily imported ones included)."""
    names = _imports(path, with_names=True)
    stages = {f"llp.stages.{p.stem}" for p in (ROOT / "stages").glob("*.py") if p.stem != "__init__"}
    return sorted(n for n in names & (stages - set(SHARED)) if n != f"llp.stages.{path.stem}")


def test_no_stage_imports_another_stage():
    """What stages share lives in llp/skills/ or stages/common.py; a stage reads another's results from the
    registry, never its code. llp/skills/ imports no stage either."""
    from llp.stages.registry import STAGES

    files = [*(ROOT / "stages").glob("*.py"), *(ROOT / "llp" / "skills").glob("*.py")]
    found = {str(p.relative_to(ROOT)): _stage_imports(p) for p in files if p.stem != "registry"}
    assert {k: v for k, v in found.items() if v} == {}
    runs = {spec.run.__module__ for spec in STAGES.values()}  # the stage modules are what the check calls stages
    assert runs <= {f"llp.stages.{p.stem}" for p in (ROOT / "stages").glob("*.py")} - set(SHARED)


def test_stages_reach_mlflow_and_the_flow_only_through_their_context():
    for path in (ROOT / "stages").rglob("*.py"):
        bad = [n for n in _imports(path) if n.split(".")[0] in ("mlflow", "prefect") or n.startswith("llp.flows")]
        assert bad == [], path


def test_the_layer_checks_catch_what_they_are_for(tmp_path):
    """The checks above read what they claim to: a back-up arrow and a two-module cycle are seen."""
    up = tmp_path / "up.py"
    up.write_text("def f():\n    from llp.stages.registry import STAGES\n")
    assert "llp.stages.registry" in _imports(up) and LAYERS[_package("llp.stages.registry")] > LAYERS["config"]
    assert _package("llp.cli") == "cli" and _package("numpy") is None
    assert {"llp.flows.context", "llp.stages.registry", "llp.learn.phases"} <= set(_module_files())
    other = tmp_path / "merge.py"
    other.write_text("def f():\n    from llp.stages.skill_expert import lanes_env\n")
    assert _stage_imports(other) == ["llp.stages.skill_expert"]
    assert _stage_imports(up) == []  # the registry is not a stage


def test_the_stage_cache_key_hashes_every_layer_a_stage_runs_on():
    """A change in any code a stage runs (its layer and every one below it, but the servers in infra/) changes
    the code version in the stage's cache key, so a resumed run does not reuse a result of other code."""
    from llp.flows.pipeline import CODE_DIRS

    below = {folder for folder, layer in FOLDERS.items() if LAYERS[layer] <= LAYERS["stages"] and layer != "infra"}
    assert below - set(CODE_DIRS) == set()
