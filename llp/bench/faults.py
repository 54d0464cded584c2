"""`llp bench faults`: every injected fault on a real smoke run, and what it cost.

Each scenario runs the smoke profile's locomotion teacher (`llp run`, a fresh
process) against services this bench starts: a local S3 endpoint, an `mlflow
server` storing artifacts in it, and a Prefect server. A fault is injected
mid-stage and the run must finish on its own (or, for a killed driver, after
`llp resume`), with every iteration's metrics in MLflow exactly once.

Per scenario:

* ``recovered``: the run finished, every iteration is logged once, and the
  fault left its expected trace (a replaced actor, an undone update, a retry);
* ``iterations_lost``: training iterations computed again or thrown away
  (a crash redoes those after the last checkpoint; an undone update is lost);
* ``recovery_s``: wall time the fault added, that is the stage's training span
  (first to last iteration, from MLflow's timestamps) minus the undisturbed
  baseline's, less any deliberate pause; for the tracking outage, the time
  from the server's return until the driver reported it had caught up.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "llp-bench-faults"
STAGE = "locomotion_teacher"
SCENARIOS = (
    "simulator_killed",
    "stage_crash",
    "corrupted_checkpoint",
    "nonfinite",
    "driver_killed",
    "node_lost",
    "tracking_outage",
)


class Launched:
    """An `llp` process whose output lines are read as they come, each with the time it arrived."""

    def __init__(self, args: list[str], env: dict, log: Path):
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "llp"), *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[tuple[float, str]] = []
        self.log = log.open("w")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.time(), line))
            self.log.write(line)
            self.log.flush()

    def wait_for(self, text: str, timeout: float = 300.0) -> float:
        """The time the first line containing ``text`` arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if text in line:
                    return t
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        raise RuntimeError(f"the run never printed {text!r} (see {self.log.name})")

    def finish(self, timeout: float = 900.0) -> int:
        code = self.proc.wait(timeout=timeout)
        self._reader.join(10)
        self.log.close()
        return code

    def text(self) -> str:
        return "".join(line for _, line in self.lines)


class Bench:
    def __init__(self, root: Path, iterations: int, checkpoint_every: int):
        import boto3

        from llp.infra.services import start_mlflow, start_prefect, start_s3

        self.root, self.iterations, self.every = root, iterations, checkpoint_every
        self.creds = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}
        self.s3 = start_s3(root / "s3.log")
        boto3.client(
            "s3",
            endpoint_url=self.s3.url,
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
        ).create_bucket(Bucket=BUCKET)
        self.s3_env = {**self.creds, "MLFLOW_S3_ENDPOINT_URL": self.s3.url}
        self.store = root / "mlflow" / "mlflow.db"
        self.mlflow = start_mlflow(self.store, f"s3://{BUCKET}/artifacts", env_extra=self.s3_env)
        self.prefect = start_prefect(root / "prefect")
        self.env = {
            **os.environ,
            **self.s3_env,
            "MLFLOW_TRACKING_URI": self.mlflow.url,
            "PREFECT_API_URL": self.prefect.url,
            "PYTHONUNBUFFERED": "1",
        }
        self.baseline_span: float | None = None
        self._seed = 100

    def next_seed(self) -> int:
        self._seed += 1
        return self._seed

    def close(self) -> None:
        for service in (self.prefect, self.mlflow, self.s3):
            service.stop()

    # ---------------------------------------------------------------- runs
    def launch(
        self,
        run_id: str,
        fault: str | None = None,
        sets: list[str] = (),
        extra: list[str] = (),
        iterations: int | None = None,
        every: int | None = None,
    ) -> Launched:
        env = {**self.env}
        env.pop("LLP_INJECT_FAULT", None)
        if fault:
            env["LLP_INJECT_FAULT"] = fault
        teacher = f"stages.{STAGE}"
        all_sets = [
            f"run_root={self.root / 'runs'}",
            f"{teacher}.iterations={iterations or self.iterations}",
            f"{teacher}.checkpoint_every={every or self.every}",
            f"seed={self.next_seed()}",  # every scenario trains: none finds another's result in the stage cache
            f"{teacher}.retries=1",
            *sets,
        ]
        args = ["run", "--profile", "smoke", "--run-id", run_id, "--until-stage", STAGE, *extra]
        args += [a for s in all_sets for a in ("--set", s)]
        return Launched(args, env, self.root / f"{run_id}.log")

    def resume(self, run_id: str) -> Launched:
        env = {k: v for k, v in self.env.items() if k != "LLP_INJECT_FAULT"}
        return Launched(
            ["resume", run_id, "--run-root", str(self.root / "runs"), "--until-stage", STAGE],
            env,
            self.root / f"{run_id}-resume.log",
        )

    def corrupt_checkpoint(self, run_id: str) -> bool:
        """Overwrite the stage's stored checkpoint (checkpoints/latest.pt in S3) with random bytes of its size;
        whether there was one to damage."""
        import boto3

        s3 = boto3.client("s3", endpoint_url=self.s3.url, region_name="us-east-1", aws_access_key_id="bench",
                          aws_secret_access_key="bench")  # fmt: skip
        mark = f"/{self.stage(run_id)['mlflow_run']}/artifacts/checkpoints/latest.pt"
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        keys = [o for p in pages for o in p.get("Contents", []) if o["Key"].endswith(mark)]
        for obj in keys:
            s3.put_object(Bucket=BUCKET, Key=obj["Key"], Body=os.urandom(max(64, obj["Size"])))
        return bool(keys)

    def stage(self, run_id: str) -> dict:
        book = json.loads((self.root / "runs" / run_id / "ledger.json").read_text())
        return book["stages"][STAGE]

    def history(self, run_id: str, key: str = "perf/env_steps") -> list:
        from mlflow import MlflowClient

        return MlflowClient(self.mlflow.url).get_metric_history(self.stage(run_id)["mlflow_run"], key)

    def check(self, run_id: str, iterations: int | None = None) -> tuple[bool, str, float]:
        """(every iteration logged exactly once, why not, the training span in seconds)."""
        steps = self.history(run_id)
        n = iterations or self.iterations
        ok = sorted(m.step for m in steps) == list(range(n))
        times = sorted(m.timestamp for m in steps)
        span = (times[-1] - times[0]) / 1000 if times else float("nan")
        return ok, "" if ok else f"logged steps {sorted(m.step for m in steps)}", span

    def extra_time(self, span: float, pause: float = 0.0) -> float:
        return round(max(0.0, span - pause - (self.baseline_span or 0.0)), 2)


def _resumed_from(text: str) -> int | None:
    marker = f"[llp] {STAGE}: continues after the checkpoint of iteration "
    found = [line.split(marker, 1)[1].split()[0] for line in text.splitlines() if marker in line]
    return int(found[-1]) if found else None


def scenario_baseline(b: Bench) -> dict:
    run = b.launch("baseline")
    code = run.finish()
    ok, why, span = b.check("baseline")
    b.baseline_span = span
    return {
        "scenario": "baseline",
        "recovered": code == 0 and ok,
        "recovery_s": 0.0,
        "iterations_lost": 0,
        "span_s": round(span, 2),
        "detail": why,
    }


def scenario_simulator_killed(b: Bench, at: int) -> dict:
    run = b.launch("sim-killed", fault=f"{STAGE}@{at}:killsim")
    code = run.finish()
    ok, why, span = b.check("sim-killed")
    replaced = max((m.value for m in b.history("sim-killed", "faults/sim_replacements")), default=0)
    stage = b.stage("sim-killed")
    good = code == 0 and ok and replaced == 1 and stage["executions"] == 1
    return {
        "scenario": "simulator_killed",
        "recovered": good,
        "recovery_s": b.extra_time(span),
        "iterations_lost": 0,
        "detail": why or f"{replaced:.0f} simulator actor replaced, no retry",
    }


def scenario_stage_crash(b: Bench, at: int) -> dict:
    run = b.launch("crash", fault=f"{STAGE}@{at}")
    code = run.finish()
    ok, why, span = b.check("crash")
    start = _resumed_from(run.text())
    stage = b.stage("crash")
    good = code == 0 and ok and stage["executions"] == 2 and start is not None
    lost = at - start if start is not None else None
    return {
        "scenario": "stage_crash",
        "recovered": good,
        "recovery_s": b.extra_time(span),
        "iterations_lost": lost,
        "detail": why or f"retried from the checkpoint of iteration {start}",
    }


def scenario_corrupted_checkpoint(b: Bench, at: int, pause: float = 8.0) -> dict:
    """The stage's stored checkpoint is overwritten with random bytes while it pauses, then it crashes: the retry
    must set the damaged file aside and start again from iteration 0, not fail on it attempt after attempt."""
    run = b.launch("corrupted", fault=f"{STAGE}@{at}:pause{pause:g},{STAGE}@{at}")
    run.wait_for("injected pause")
    damaged = b.corrupt_checkpoint("corrupted")
    code = run.finish()
    ok, why, span = b.check("corrupted")
    stage = b.stage("corrupted")
    set_aside = "does not load" in run.text() and "set aside as" in run.text()
    good = code == 0 and ok and damaged and set_aside and stage["executions"] == 2
    return {
        "scenario": "corrupted_checkpoint",
        "recovered": good,
        "recovery_s": b.extra_time(span, pause),
        "iterations_lost": at + 1,  # everything before the crash: the only checkpoint was the damaged one
        "detail": why
        or (
            "the damaged checkpoint was set aside; the stage started again from iteration 0"
            if set_aside
            else "the damaged checkpoint was not reported"
        ),
    }


def scenario_nonfinite(b: Bench, at: int, updates: int = 2) -> dict:
    run = b.launch("nonfinite", fault=f"{STAGE}@{at}:nan{updates}")
    code = run.finish()
    ok, why, span = b.check("nonfinite")
    undone = max((m.value for m in b.history("nonfinite", "faults/nonfinite_updates")), default=0)
    good = code == 0 and ok and undone == updates and b.stage("nonfinite")["executions"] == 1
    return {
        "scenario": "nonfinite",
        "recovered": good,
        "recovery_s": b.extra_time(span),
        "iterations_lost": int(undone),
        "detail": why or f"{undone:.0f} updates undone, learning rate lowered",
    }


def scenario_driver_killed(b: Bench, at: int) -> dict:
    import signal

    run = b.launch("driver-killed", fault=f"{STAGE}@{at}:pause60")
    t_kill = run.wait_for("injected pause")
    os.killpg(run.proc.pid, signal.SIGKILL)  # the driver and its local Ray: nothing can record the end
    run.finish(60)
    again = b.resume("driver-killed")
    code = again.finish()
    ok, why, span = b.check("driver-killed")
    start = _resumed_from(again.text())
    stage = b.stage("driver-killed")
    good = code == 0 and ok and start is not None and stage["state"] == "completed"
    times = {m.step: m.timestamp / 1000 for m in b.history("driver-killed")}
    # from the kill until the resumed run is back where the killed one was
    back = times.get(at, float("nan")) - t_kill
    return {
        "scenario": "driver_killed",
        "recovered": good,
        "recovery_s": round(back, 2),
        "iterations_lost": at - start if start is not None else None,
        "detail": why or f"`llp resume` continued after the checkpoint of iteration {start}",
    }


def scenario_node_lost(b: Bench, at: int, pause: float = 3.0) -> dict:
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1}, "include_dashboard": False}
    )
    try:
        workers = [cluster.add_node(num_cpus=2, resources={"sim_node": 2}) for _ in range(2)]
        cluster.wait_for_nodes()
        run = b.launch(
            "node-lost",
            fault=f"{STAGE}@{at}:pause{pause:g}",
            extra=["--cluster", cluster.address],
            sets=["resources.sim_resources={sim_node: 1}", "resources.learner_resources={head: 1}"],
        )
        run.wait_for("injected pause")
        cluster.remove_node(workers[0])
        code = run.finish()
    finally:
        cluster.shutdown()
    ok, why, span = b.check("node-lost")
    stage = b.stage("node-lost")
    moved = run.text().count("was replaced")
    good = code == 0 and ok and moved >= 1 and stage["executions"] == 1
    return {
        "scenario": "node_lost",
        "recovered": good,
        "recovery_s": b.extra_time(span, pause),
        "iterations_lost": 0,
        "detail": why or f"{moved} simulator actor(s) moved to the other node, no retry",
    }


def scenario_tracking_outage(b: Bench, outage_s: float = 30.0, iterations: int = 1500) -> dict:
    from llp.infra.services import start_mlflow

    run = b.launch("outage", iterations=iterations, every=25)
    run.wait_for(f"{STAGE} [", timeout=300)  # the first iteration's progress line: training is under way
    time.sleep(3)  # some iterations and a checkpoint first
    port = int(b.mlflow.url.rsplit(":", 1)[1])
    b.mlflow.stop()
    time.sleep(outage_s)
    b.mlflow = start_mlflow(b.store, f"s3://{BUCKET}/artifacts", port=port, env_extra=b.s3_env)
    t_back = time.time()
    code = run.finish()
    text = run.text()
    caught_up = [t for t, line in run.lines if "the tracking server is back after" in line]
    ok, why, _ = b.check("outage", iterations)
    noticed = "the tracking server is not answering" in text
    good = code == 0 and ok and noticed and bool(caught_up) and b.stage("outage")["executions"] == 1
    return {
        "scenario": "tracking_outage",
        "recovered": good,
        "recovery_s": round(caught_up[0] - t_back, 2) if caught_up else None,
        "iterations_lost": 0,
        "detail": why or f"MLflow down {outage_s:.0f} s; training went on, every iteration arrived once",
    }


def run(scenarios: list[str] | None = None, iterations: int = 8, checkpoint_every: int = 2, at: int = 4) -> dict:
    """Run the baseline and the chosen scenarios (default: all); returns the report."""
    chosen = list(scenarios or SCENARIOS)
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown fault scenario {unknown[0]!r}; allowed: {', '.join(SCENARIOS)}")
    root = Path(tempfile.mkdtemp(prefix="llp-bench-faults-"))
    bench = Bench(root, iterations, checkpoint_every)
    steps = {
        "simulator_killed": lambda: scenario_simulator_killed(bench, at),
        "stage_crash": lambda: scenario_stage_crash(bench, at),
        "corrupted_checkpoint": lambda: scenario_corrupted_checkpoint(bench, at),
        "nonfinite": lambda: scenario_nonfinite(bench, at),
        "driver_killed": lambda: scenario_driver_killed(bench, at),
        "node_lost": lambda: scenario_node_lost(bench, at),
        "tracking_outage": lambda: scenario_tracking_outage(bench),
    }
    results = []
    try:
        for name, step in [("baseline", lambda: scenario_baseline(bench))] + [(s, steps[s]) for s in chosen]:
            t0 = time.perf_counter()
            print(f"[bench faults] {name} ...", file=sys.stderr, flush=True)
            try:
                result = step()
            except Exception as err:  # a scenario that breaks the harness is a scenario that did not recover
                result = {
                    "scenario": name,
                    "recovered": False,
                    "recovery_s": None,
                    "iterations_lost": None,
                    "detail": f"{type(err).__name__}: {err}",
                }
            result["wall_s"] = round(time.perf_counter() - t0, 1)
            print(f"[bench faults] {name}: {result}", file=sys.stderr, flush=True)
            results.append(result)
    finally:
        bench.close()
    faults = [r for r in results if r["scenario"] != "baseline"]
    return {
        "all_recovered": all(r["recovered"] for r in results),
        "iterations": iterations,
        "checkpoint_every": checkpoint_every,
        "fault_after_iteration": at,
        "baseline_span_s": results[0].get("span_s"),
        "scenarios": {r["scenario"]: {k: v for k, v in r.items() if k != "scenario"} for r in faults},
        "logs": str(root),
        "median_recovery_s": statistics.median([r["recovery_s"] for r in faults if r["recovery_s"] is not None] or [0]),
    }
