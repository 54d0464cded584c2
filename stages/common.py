"""Pieces shared by stage configs: which task and robot, with overrides validated at load time."""

from __future__ import annotations

from typing import Any

from llp.config.schema import ConfigError, check


def checked_env_config(task: str, robot: str, overrides: dict[str, Any], path: str):
    """The EnvConfig a stage will run, or a ConfigError whose path starts at the stage's config."""
    from llp.config.files import env_config

    try:
        return env_config(task, robot, overrides)
    except ConfigError as err:
        where = err.path if err.path in ("task", "robot") else f"env.{err.path}"
        raise ConfigError(f"{path}.{where}", str(err).split(": ", 1)[-1]) from None


def check_network_obs(cfg, task: str, produced: dict[str, list[str]], path: str) -> None:
    """Every observation term the stage's actor and critic read is one that task ``task`` produces."""
    for name, refs in (("actor", cfg.actor.obs), ("critic", cfg.critic.obs)):
        for i, ref in enumerate(refs):
            group, _, term = ref.partition("/")
            check(
                term in produced.get(group, []),
                f"{path}.{name}.obs[{i}]",
                f"{ref!r} is not an observation of task {task!r} (it gives {produced})",
            )
