"""A task's env config: conf/task/<task>.yaml on conf/robot/<robot>.yaml, with a stage's overrides on top."""

from __future__ import annotations

from typing import Any

from llp.config.files import named
from llp.config.schema import build, merge


def env_config(task: str = "locomotion", robot: str = "lightbot0_like", overrides: dict[str, Any] | None = None):
    """The EnvConfig of ``task`` on ``robot`` with ``overrides`` deep-merged on top."""
    from llp.sim.backend import sim_defaults
    from llp.sim.config import EnvConfig

    data = merge(named("task", task), {"robot": named("robot", robot), **sim_defaults()})
    if overrides:
        data = merge(data, overrides)
    return build(EnvConfig, data)
