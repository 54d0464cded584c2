"""Learner actor: owns the networks, the optimiser and the discriminators; turns rollouts into new weights."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import numpy as np
import torch

from llp.learn.learner import Learner, build_learner, teacher_groups
from llp.learn.spec import TrainSpec
from llp.learn.storage import Rollout


class HoldsLearner:
    """What every actor that owns a ``Learner`` answers: weights, checkpoints, the policy."""

    learner: Learner

    def pid(self) -> int:
        return os.getpid()

    def weights(self) -> dict:
        return self.learner.weights()

    def checkpoint_bytes(self, iteration: int, history: list) -> bytes:
        """The full training state as one checkpoint file's bytes: the driver writes it where it keeps
        checkpoints, which need not be this actor's machine."""
        with tempfile.TemporaryDirectory() as tmp:
            return Path(self.learner.save(str(Path(tmp) / "ckpt.pt"), iteration, history)).read_bytes()

    def load_bytes(self, data: bytes) -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "ckpt.pt"
            path.write_bytes(data)
            return self.learner.load(str(path))

    def actor_state(self) -> dict:
        return {k: v.detach().cpu() for k, v in self.learner.actor.state_dict().items()}

    def load_actor(self, state: dict) -> list[str]:
        """Start from another policy's actor weights (its network and normaliser; the action noise stays this
        learner's); returns the parameters it did not give."""
        missing, unexpected = self.learner.actor.load_state_dict(state, strict=False)
        if unexpected:
            raise ValueError(f"the policy has parameters this actor does not: {unexpected}")
        return list(missing)

    def set_rule(self, ppo, fresh_learning_rate: bool) -> None:
        """Go on under another learning rule (a stage's next phase) with the same networks and optimiser."""
        self.learner.ppo.set_rule(ppo, fresh_learning_rate)

    def inject_nonfinite(self, count: int) -> None:
        """Chaos drill: the next ``count`` updates see a NaN reward (``LLP_INJECT_FAULT=<stage>@<it>:nan<count>``)."""
        self.learner.poison_next = count


class LearnerWorker(HoldsLearner):
    """The stage's ``Learner`` on rollouts gathered by its simulator actors (joined along the env axis)."""

    def __init__(
        self,
        spec: TrainSpec,
        spaces: dict,
        num_sims: int,
        threads: int = 1,
        env_groups=None,
        rl_envs=None,
        amp_envs=None,
    ):
        torch.set_num_threads(threads)
        torch.manual_seed(spec.seed)  # data-parallel learners start from the same networks
        # the expert group of every env it will see: by tile type, or (env groups) by the simulator's group
        groups = env_groups if env_groups is not None else teacher_groups(spec, np.tile(spaces["columns"], num_sims))
        self.device = learner_device()
        self.learner = build_learner(
            spec, spaces["obs_dims"], spaces["num_actions"], groups, rl_envs, amp_envs, device=self.device
        )

    def device_name(self) -> str:
        """Where this learner's networks and updates are: ``cpu`` or ``cuda:<n>``."""
        return str(self.learner.device)

    def rendezvous(self) -> str:
        """Rank 0's ``tcp://HOST:PORT`` for the learners' process group (a free port on this node)."""
        import ray

        host = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return f"tcp://{host}:{port}"

    def join(self, rank: int, world_size: int, address: str) -> int:
        """Enter the process group of the stage's data-parallel learners (all call this at once)."""
        from llp.learn import distributed

        on_gpu = next(self.learner.actor.parameters()).is_cuda
        distributed.init(rank, world_size, address, "nccl" if on_gpu else "gloo")
        return rank

    def update(self, *rollouts: Rollout) -> tuple[dict, dict]:
        """One learning step; returns (metrics, weights)."""
        rollout = rollouts[0] if len(rollouts) == 1 else Rollout.concat_envs(list(rollouts))
        return self.learner.update(rollout), self.weights()


def learner_device() -> str:
    """``cuda`` when Ray gave this actor a GPU (the pool's ``learner_gpus``) and torch sees one, else ``cpu``."""
    import ray

    if torch.cuda.is_available() and ray.is_initialized() and ray.get_gpu_ids():
        return "cuda"
    return "cpu"
