"""Simulator actor: one simulator instance with many envs, a copy of the student, and the frozen teachers that
label the states the student visits (each for its own env group).

Plain Python class; ``actors.pool`` wraps it with ``ray.remote`` and resources.
It imports neither Prefect nor MLflow, so Ray workers never start either.
"""

from __future__ import annotations

import os

import torch

from llp.learn.learner import build_collector, build_networks
from llp.learn.spec import TrainSpec
from llp.sim.env import ParkourEnv
from llp.sim.hosted import parkour_env


def build_env(spec: TrainSpec, index: int, threads: int, device_task: bool = False):
    """Simulator ``index`` of a stage: its own seed, the spec's env (parkour terrain, or tracking a reference);
    ``device_task``: the terrain task in torch beside MuJoCo Warp's worlds (``DeviceParkourEnv``)."""
    from llp.motion.tracking import TrackingEnvConfig

    seed = spec.seed + 1000 * index
    torch.manual_seed(seed)
    if isinstance(spec.env, TrackingEnvConfig):
        from llp.motion.tracking_env import TrackingEnv

        env = TrackingEnv(spec.env, spec.envs_per_actor, seed=seed, threads=threads)
    elif device_task:
        from llp.sim.device_env import DeviceParkourEnv

        env = DeviceParkourEnv(spec.env, spec.envs_per_actor, seed=seed, threads=threads)
    else:  # isaaclab: in Isaac Lab's own environment, behind an env server
        env = parkour_env(spec.env, spec.envs_per_actor, seed=seed, threads=threads)
    if spec.group is not None:  # one of several env groups: its label, for a critic that reads group/onehot
        from llp.sim.group_label import GroupLabel

        env = GroupLabel(env, *spec.group)
    return env


class HostsEnv:
    """What every actor that hosts a simulator answers about it."""

    env: ParkourEnv

    def spaces(self) -> dict:
        return {
            "obs_dims": self.env.obs_dims(),
            "num_actions": self.env.num_actions,
            "pid": os.getpid(),
            "num_envs": self.env.num_envs,
            "columns": self.env.course_state()["column"],
        }

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> tuple[int, str]:
        """This actor's process id and Ray node id (a replaced actor changes one or both)."""
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()


class SimulatorWorker(HostsEnv):
    """Hosts a ``ParkourEnv``, the student copy and the teachers; ``collect(weights)`` returns a rollout."""

    def __init__(self, spec: TrainSpec, index: int, threads: int = 1):
        torch.set_num_threads(1)
        self.env = build_env(spec, index, threads)
        self.actor, self.critic = build_networks(spec, self.env.obs_dims(), self.env.num_actions)
        self.collector = build_collector(self.env, spec, self.actor, self.critic)

    def set_teacher_drives(self, share: float) -> None:
        """DAgger's beta for the coming rollouts (a replaced actor starts again from the stage's first rule's)."""
        self.collector.set_teacher_drives(share)

    def collect(self, weights: dict) -> tuple:
        """Load the broadcast weights, roll out ``num_steps`` steps of every env; returns (rollout, metrics)."""
        self.actor.load_state_dict(weights["actor"])
        if self.critic is not None and weights.get("critic") is not None:
            self.critic.load_state_dict(weights["critic"])
        rollout = self.collector.collect()
        return rollout, self.collector.pop_metrics()
