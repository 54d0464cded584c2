"""Ray actor pools for one training stage: simulator actors + a learner actor, or co-located actors.

Decoupled iteration: the learner's latest weights (one object in Ray's store,
broadcast by reference) go to every simulator actor with its ``collect`` call;
the rollouts go by reference straight to the learner, whose update returns the
next weights. A simulator actor that dies is replaced by Ray (``max_restarts``)
and its ``collect`` call re-run on the replacement with the same weights
(``max_task_retries``), so the iteration is redone rather than lost.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import ray

from llp.actors.colocated import ColocatedWorker
from llp.actors.learner import LearnerWorker
from llp.actors.simulator import SimulatorWorker
from llp.config.resources import ResourcesConfig
from llp.learn.learner import iteration_metrics
from llp.learn.spec import TrainSpec


class TrainingPool:
    """Creates the actors of one stage from its ``TrainSpec`` and runs its iterations."""

    def __init__(self, resources: ResourcesConfig, spec: TrainSpec):
        self.resources, self.spec = resources, spec
        self.mode = resources.mode
        if spec.groups:
            _check_groups(resources, spec)
        if self.mode == "colocated":
            remote = ray.remote(ColocatedWorker).options(
                num_cpus=resources.sim_actor_cpus,
                num_gpus=resources.learner_gpus,
                resources=resources.learner_resources,
                max_restarts=resources.max_restarts,
                max_task_retries=0,
            )
            self.colocated = remote.remote(spec, resources.sim_threads, resources.learner_threads)
            _wait_placed([self.colocated], "the co-located actor", resources.sim_actor_cpus, resources.learner_gpus,
                         resources.learner_resources, resources.placement_timeout_s)  # fmt: skip
            self.spaces = ray.get(self.colocated.spaces.remote())
            self.sims, self.learner, self.learners = [], None, []
            return
        sim_cls = ray.remote(SimulatorWorker).options(
            num_cpus=resources.sim_actor_cpus,
            resources=resources.sim_resources,
            scheduling_strategy="SPREAD",  # on a cluster, one lost node takes as few simulators as it can
            max_restarts=resources.max_restarts,
            max_task_retries=resources.task_retries,
        )
        n_sims = resources.sim_actors
        self.sims = [sim_cls.remote(spec.for_actor(k, n_sims), k, resources.sim_threads) for k in range(n_sims)]
        _wait_placed(self.sims, f"{n_sims} simulator actors", resources.sim_actor_cpus, 0.0, resources.sim_resources,
                     resources.placement_timeout_s)  # fmt: skip
        self.spaces = ray.get(self.sims[0].spaces.remote())
        env_groups, learner_spaces = None, self.spaces
        if spec.groups:  # every group's student sees the same widths; the learner weighs groups by env
            per_group = ray.get([self.sims[g].spaces.remote() for g in range(len(spec.groups))])
            _check_same_student_obs(spec, per_group)
            import torch

            env_groups = torch.cat([torch.full((self.spaces["num_envs"],), spec.group_of(k)) for k in range(n_sims)])
            dims: dict = {}  # every term some group gives (the AMP features come from the AMP groups)
            for s in per_group:
                for g, terms in s["obs_dims"].items():
                    dims.setdefault(g, {}).update(terms)
            learner_spaces = {**self.spaces, "obs_dims": dims}
        rl_envs = spec.rl_envs(self.spaces["num_envs"], n_sims)
        amp_envs = spec.amp_envs(self.spaces["num_envs"], n_sims)
        self._where = ray.get([s.where.remote() for s in self.sims])
        self.replacements = 0
        learner_cls = ray.remote(LearnerWorker).options(
            num_cpus=resources.learner_cpus, num_gpus=resources.learner_gpus, resources=resources.learner_resources
        )
        n = resources.learners
        if n > 1 and spec.amp is not None:
            raise ValueError(
                "resources.learners > 1 with an AMP prior: the discriminators' per-phase batches differ between "
                "learners, so their updates cannot be averaged step by step yet; use one learner"
            )
        # data-parallel learners: each takes the rollouts of len(sims) / n simulator actors
        self.learners = [
            learner_cls.remote(
                spec, learner_spaces, len(self.sims) // n, resources.learner_threads, env_groups, rl_envs, amp_envs
            )
            for _ in range(n)
        ]
        _wait_placed(self.learners, f"{n} learner actor(s)", resources.learner_cpus, resources.learner_gpus,
                     resources.learner_resources, resources.placement_timeout_s)  # fmt: skip
        self.learner = self.learners[0]  # rank 0: its weights go to the simulators, its state to checkpoints
        if n > 1:
            address = ray.get(self.learner.rendezvous.remote())
            ray.get([learner.join.remote(rank, n, address) for rank, learner in enumerate(self.learners)])
        self._weights = self.learner.weights.remote()

    @property
    def num_envs(self) -> int:
        return self.spaces["num_envs"] * max(1, len(self.sims))

    def iteration(self) -> dict:
        """One training iteration across the pool; returns its metrics."""
        if self.mode == "colocated":
            metrics = ray.get(self.colocated.iteration.remote())
            metrics["perf/sim_actors"] = 1.0
            return metrics
        t0 = time.perf_counter()
        results = [sim.collect.options(num_returns=2).remote(self._weights) for sim in self.sims]
        sim_metrics = ray.get([r[1] for r in results])
        t1 = time.perf_counter()
        rollouts, share = [r[0] for r in results], len(self.sims) // len(self.learners)
        updates = [
            learner.update.options(num_returns=2).remote(*rollouts[k * share : (k + 1) * share])
            for k, learner in enumerate(self.learners)
        ]
        learn = ray.get(updates[0][0])
        ray.get([u[0] for u in updates[1:]])  # every learner took the same step (or raised the same error)
        self._weights = updates[0][1]
        t2 = time.perf_counter()
        steps = self.spec.ppo.num_steps * self.num_envs
        metrics = iteration_metrics(learn, _merge(sim_metrics), steps, t1 - t0, t2 - t1)
        for g, group in enumerate(self.spec.groups):  # each group's episodes, reward terms and ends on their own
            mine = [m for k, m in enumerate(sim_metrics) if self.spec.group_of(k) == g]
            metrics.update({f"group/{group.name}/{k}": v for k, v in _merge(mine).items()})
        metrics["perf/sim_actors"] = float(len(self.sims))
        metrics["faults/sim_replacements"] = float(self._count_replacements())
        return metrics

    def _count_replacements(self) -> int:
        """Simulator actors Ray has replaced so far (a killed process, a lost node); each is printed once."""
        now = ray.get([s.where.remote() for s in self.sims])
        for k, (old, new) in enumerate(zip(self._where, now)):
            if old != new:
                self.replacements += 1
                moved = "the same node" if old[1] == new[1] else f"node {new[1][:8]} (was {old[1][:8]})"
                print(f"[llp] simulator actor {k} was replaced: pid {old[0]} -> {new[0]} on {moved}", flush=True)
        self._where = now
        return self.replacements

    def kill_simulator(self, index: int = 0) -> None:
        """Kill one simulator actor's process as a crash would (Ray then replaces it): for fault drills."""
        if self.mode == "colocated":
            raise ValueError("a co-located pool has no separate simulator actor to kill")
        ray.kill(self.sims[index], no_restart=False)

    def collect_only(self, actors: int | None = None) -> int:
        """Roll out once on the first ``actors`` simulator actors (all by default), in parallel, without
        learning; returns the env steps gathered."""
        chosen = self.sims[: actors or len(self.sims)]
        results = [sim.collect.options(num_returns=2).remote(self._weights) for sim in chosen]
        ray.get([r[1] for r in results])
        return self.spec.ppo.num_steps * self.spaces["num_envs"] * len(chosen)

    def save(self, path: str, iteration: int, history: list) -> str:
        """The training state as a checkpoint file at ``path`` on this (the driver's) machine, written whole."""
        data = ray.get(self._holder().checkpoint_bytes.remote(iteration, history))
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
        return str(target)

    def load(self, path: str) -> dict:
        """Restore every learner from the checkpoint file at ``path`` on this machine."""
        data = Path(path).read_bytes()
        holders = [self.colocated] if self.mode == "colocated" else self.learners
        states = ray.get([h.load_bytes.remote(data) for h in holders])
        if self.mode != "colocated":
            self._weights = self.learner.weights.remote()
        return states[0]

    def actor_state(self) -> dict:
        return ray.get(self._holder().actor_state.remote())

    def load_actor(self, state: dict) -> list[str]:
        """Every learner's actor starts from ``state`` (a registered policy's network); returns what it lacked."""
        holders = [self.colocated] if self.mode == "colocated" else self.learners
        missing = ray.get([h.load_actor.remote(state) for h in holders])[0]
        if self.mode != "colocated":
            self._weights = self.learner.weights.remote()
        return missing

    def set_rule(self, ppo, fresh_learning_rate: bool = True) -> None:
        """Every learner goes on under the learning rule ``ppo`` (same rollout length: the simulators keep
        theirs), from the networks and optimiser it has."""
        if ppo.num_steps != self.spec.ppo.num_steps:
            raise ValueError(f"a new learning rule must keep num_steps {self.spec.ppo.num_steps}, got {ppo.num_steps}")
        holders = [self.colocated] if self.mode == "colocated" else self.learners
        ray.get([h.set_rule.remote(ppo, fresh_learning_rate) for h in holders])
        collectors = [self.colocated] if self.mode == "colocated" else self.sims  # who drives: DAgger's beta
        ray.get([c.set_teacher_drives.remote(ppo.teacher_drives) for c in collectors])

    def inject_nonfinite(self, count: int) -> None:
        ray.get(self._holder().inject_nonfinite.remote(count))

    def sim_pids(self) -> list[int]:
        if self.mode == "colocated":
            return [ray.get(self.colocated.pid.remote())]
        return ray.get([s.pid.remote() for s in self.sims])

    def _holder(self):
        return self.colocated if self.mode == "colocated" else self.learner

    def close(self) -> None:
        for actor in [*self.sims, *([self.colocated] if self.mode == "colocated" else self.learners)]:
            ray.kill(actor)


class PlacementError(RuntimeError):
    """A stage's actors could not be placed on the cluster in time: it asked for resources no node has free."""


def _wait_placed(actors: list, what: str, cpus: float, gpus: float, custom: dict, timeout: float) -> None:
    """Return once every actor of ``actors`` runs, or raise ``PlacementError`` after ``timeout`` seconds naming
    what each asked for and what the cluster has free (Ray itself waits for resources forever, silently)."""
    ready, waiting = ray.wait([a.pid.remote() for a in actors], num_returns=len(actors), timeout=timeout)
    if not waiting:
        return
    free = {k: round(v, 3) for k, v in sorted(ray.available_resources().items()) if not k.startswith("node:")}
    asked = {"CPU": cpus, **({"GPU": gpus} if gpus else {}), **custom}
    for actor in actors:
        ray.kill(actor)
    raise PlacementError(
        f"{len(waiting)} of {what} were not placed within {timeout:.0f} s: each asks for {asked}, and the cluster "
        f"has free {free}. Add nodes that declare them, or lower the stage's resources (resources.* in the "
        "profile); resources.placement_timeout_s sets the wait"
    )


def _check_groups(resources: ResourcesConfig, spec: TrainSpec) -> None:
    """Env groups need one simulator actor per group at least, the decoupled layout and one learner."""
    names = [g.name for g in spec.groups]
    if resources.mode == "colocated":
        raise ValueError(f"env groups {names} need simulator actors of their own: resources.mode decoupled")
    if resources.sim_actors < len(spec.groups):
        raise ValueError(
            f"resources.sim_actors is {resources.sim_actors}, but the stage has {len(names)} env groups {names}: "
            "each simulator actor hosts one group, so give it at least one actor per group"
        )
    if resources.sim_actors % len(spec.groups):
        raise ValueError(
            f"resources.sim_actors {resources.sim_actors} is not a multiple of the {len(names)} env groups "
            f"{names}: each group gets the same number of simulator actors"
        )
    if resources.learners > 1:
        raise ValueError(f"env groups {names} with resources.learners > 1 are not supported yet: use one learner")


def _check_same_student_obs(spec: TrainSpec, per_group: list[dict]) -> None:
    """The student (and critic) read terms of the same width in every group, and act on the same joints."""
    from llp.learn.models import parse_refs

    first = spec.groups[0].name
    refs = parse_refs(spec.actor.obs) + (parse_refs(spec.critic.obs) if spec.critic is not None else [])
    for group, spaces in zip(spec.groups[1:], per_group[1:]):
        if spaces["num_actions"] != per_group[0]["num_actions"]:
            raise ValueError(
                f"env group {group.name!r} has {spaces['num_actions']} actions, {first!r} "
                f"{per_group[0]['num_actions']}: the student drives the same joints in every group"
            )
        for g, t in refs:
            widths = [s["obs_dims"].get(g, {}).get(t) for s in (per_group[0], spaces)]
            if None in widths or widths[0] != widths[1]:
                raise ValueError(f"the networks read {g}/{t}, {widths[0]} wide in env group {first!r} and "
                                 f"{widths[1]} in {group.name!r}: every group must give it the same width")  # fmt: skip


def _merge(per_actor: list[dict]) -> dict:
    """Combine simulator actors' metrics: episode counts add up, episode statistics are weighted by episode
    count, everything else is averaged."""
    out: dict[str, float] = {}
    counts = [m.get("episode/count", 0.0) for m in per_actor]
    keys = {k for m in per_actor for k in m}
    for k in keys:
        if k == "episode/count":
            out[k] = sum(counts)
        elif k.startswith("episode/") and sum(counts) > 0:
            pairs = [(m[k], c) for m, c in zip(per_actor, counts) if k in m and c > 0]
            out[k] = sum(v * c for v, c in pairs) / sum(c for _, c in pairs)
        else:
            vals = [m[k] for m in per_actor if k in m]
            out[k] = sum(vals) / len(vals)
    return out
