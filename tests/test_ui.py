"""Seeing a run as users do: `llp ui` in a real headless browser, truthful run states, `llp play` videos.

These runs use the local default (no PREFECT_API_URL or MLFLOW_TRACKING_URI): the run's own SQLite MLflow
store and Prefect database under its run root, which `llp ui` serves after the run has ended. Screenshots go
to $LLP_SCREENSHOTS when it is set (the README's pictures come from there), else to the test's temp dir.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, ROOT

pytestmark = pytest.mark.timeout(900)

SMOKE = ["--profile", "smoke"]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def local_env() -> dict:
    """The environment of a user on a fresh machine: no tracking or Prefect server configured."""
    drop = ("MLFLOW_TRACKING_URI", "PREFECT_API_URL", "MLFLOW_S3_ENDPOINT_URL", "LLP_INJECT_FAULT")
    return {k: v for k, v in os.environ.items() if k not in drop} | {"PYTHONUNBUFFERED": "1"}


def llp_local(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "llp"), *args], cwd=ROOT, env=local_env(), capture_output=True, text=True, timeout=timeout
    )


def browse(url: str, screenshot: Path | None = None) -> str:
    """The page's text after its scripts ran, as Debian's Chromium renders it headless; optionally a PNG."""
    assert CHROMIUM, "the UI tests need Debian's chromium (the Makefile installs it: apt-get install chromium)"
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,900"]
    base.append("--virtual-time-budget=20000")
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=180).stdout
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*base, f"--screenshot={screenshot}", url], capture_output=True, timeout=180)
        assert screenshot.stat().st_size > 10_000, "an empty screenshot"
    text = re.sub(r"<script.*?</script>|<style.*?</style>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text))


def task_runs(flow_run_page: str) -> dict[str, tuple[str, str]]:
    """The flow run's task runs from Prefect's API: id -> (name, state)."""
    import urllib.request

    base, flow_run = flow_run_page.split("/runs/flow-run/")
    body = json.dumps({"flow_runs": {"id": {"any_": [flow_run]}}}).encode()
    request = urllib.request.Request(f"{base}/api/task_runs/filter", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return {r["id"]: (r["name"], r["state_name"]) for r in json.loads(response.read())}


class UiProcess:
    """`llp ui` running in the background; its printed URLs."""

    def __init__(self, run_root: Path, run_id: str):
        self.proc = subprocess.Popen(
            [str(BIN / "llp"), "ui", run_id, "--run-root", str(run_root), "--for", "600"],
            cwd=ROOT,
            env=local_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.urls: dict[str, str] = {}
        deadline = time.time() + 240
        while len(self.urls) < 2 and time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            m = re.match(r"(Prefect|MLflow):\s+(\S+)", line)
            if m:
                self.urls[m.group(1)] = m.group(2)
        assert len(self.urls) == 2, "".join(self.lines)
        self.lines.append(self.proc.stdout.readline())  # "started here: ..." (read now: communicate() would skip it)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        rest, _ = self.proc.communicate(timeout=120)
        self.lines.append(rest)
        return self.proc.returncode


def healthy(url: str) -> bool:
    from llp.infra.services import healthy as ok

    return ok(url)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("uiruns")
    videos = ["--set", "stages.evaluate.video_seconds=1.0"]  # the smoke profile renders none (test time)
    result = llp_local("run", *SMOKE, "--set", f"run_root={root}", "--run-id", "ui-ok", "--until-stage", "evaluate",
                       *videos)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {"root": root, "result": result}


def shots() -> Path | None:
    return Path(os.environ["LLP_SCREENSHOTS"]) if os.environ.get("LLP_SCREENSHOTS") else None


def test_llp_ui_shows_the_flow_run_and_the_mlflow_runs_of_a_finished_run(local_run, tmp_path):
    root = local_run["root"]
    book = json.loads((root / "ui-ok" / "ledger.json").read_text())
    assert book["state"] == "completed"
    ui = UiProcess(root, "ui-ok")
    try:
        out = shots() or tmp_path
        prefect = browse(ui.urls["Prefect"], out / "ui_prefect.png")
        # the flow run is named after the llp run id; its graph (a canvas: see the screenshot) shows the stage
        # tasks, and each task's own page shows its state
        assert "Flow Run: ui-ok" in prefect and "Completed" in prefect and "3 Task runs" in prefect, prefect[:2000]
        tasks = task_runs(ui.urls["Prefect"])
        assert sorted(tasks.values()) == [
            ("evaluate", "Completed"),
            ("locomotion_teacher", "Completed"),
            ("reference_augmentation", "Completed"),
        ]
        base = ui.urls["Prefect"].split("/runs/")[0]
        for task_id, (name, state) in tasks.items():
            page = browse(f"{base}/runs/task-run/{task_id}")
            assert name in page and state in page, page[:2000]
        mlflow = browse(ui.urls["MLflow"], out / "ui_mlflow.png")
        assert "pipeline ui-ok" in mlflow and "Status Finished" in mlflow, mlflow[:2000]
        stage = "(evaluate|locomotion_teacher|reference_augmentation)"
        assert re.search(rf"Child runs {stage} , {stage} , {stage}", mlflow), mlflow[:2000]
        base = ui.urls["MLflow"].split("/#/")[0]
        model = browse(f"{base}/#/models/llp-locomotion-teacher/versions/1", out / "ui_mlflow_model.png")
        for tag in ("llp.pipeline_run", "llp.code_version", "llp.inputs"):
            assert tag in model, model[:2000]
    finally:
        code = ui.stop()
    assert code == 0, "".join(ui.lines)
    started = "".join(ui.lines)
    assert "started here: prefect server, mlflow server" in started  # the run had stopped its own servers
    assert not healthy(ui.urls["MLflow"].split("/#/")[0] + "/health")  # ... and `llp ui` stopped what it started


@pytest.mark.fault
def test_a_killed_run_is_crashed_in_the_ledger_mlflow_and_prefect(local_run, tmp_path):
    root = local_run["root"]
    env = local_env()
    proc = subprocess.Popen(
        [str(BIN / "llp"), "run", *SMOKE, "--set", f"run_root={root}", "--run-id", "killed"]
        + ["--set", "stages.locomotion_teacher.iterations=400", "--until-stage", "locomotion_teacher"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    ledger = root / "killed" / "ledger.json"
    deadline = time.time() + 300
    while time.time() < deadline:
        book = json.loads(ledger.read_text()) if ledger.exists() else {}
        if book.get("stages", {}).get("locomotion_teacher", {}).get("mlflow_run"):
            break
        assert proc.poll() is None, "the run ended before it could be killed"
        time.sleep(1)
    time.sleep(5)  # mid-stage
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and what shares its session; nothing can record the end
    proc.wait()
    try:
        status = llp_local("status", "killed", "--run-root", str(root))
        assert "state crashed" in status.stdout, status.stdout
        assert re.search(r"locomotion_teacher\s+crashed", status.stdout), status.stdout
        book = json.loads(ledger.read_text())
        import mlflow

        mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
        client = mlflow.MlflowClient()
        assert client.get_run(book["mlflow_parent_run"]).info.status == "KILLED"
        assert client.get_run(book["stages"]["locomotion_teacher"]["mlflow_run"]).info.status == "KILLED"
        ui = UiProcess(root, "killed")
        try:
            page = browse(ui.urls["Prefect"])
            assert "Flow Run: killed" in page and "Crashed" in page, page[:2000]
            assert list(task_runs(ui.urls["Prefect"]).values()) == [("locomotion_teacher", "Crashed")]
            page = browse(ui.urls["MLflow"])
            assert "pipeline killed" in page and "Status Killed" in page, page[:2000]
        finally:
            assert ui.stop() == 0
        # the killed run's Prefect server was adopted by `llp ui`, which stopped it on exit
        assert "prefect (left by a killed run)" in "".join(ui.lines), "".join(ui.lines)
        assert not healthy(ui.urls["Prefect"].split("/runs/")[0] + "/api/health")
    finally:
        _stop_orphans(root)


def _stop_orphans(root: Path) -> None:
    """What the killed driver had started and left behind: its Prefect server (in its own session) and its
    local Ray processes (found by the run's Ray folder on their command lines; no other Ray is touched)."""
    from llp.infra.services import stop_process_group

    info = root / "prefect" / "server.json"
    if info.exists():
        stop_process_group(json.loads(info.read_text())["pid"])
        info.unlink()
    ray_dir = str((root / "killed" / "ray").resolve())
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if ray_dir in (proc / "cmdline").read_bytes().decode(errors="replace"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            pass


def test_llp_play_writes_a_video_of_the_registered_teacher(local_run, tmp_path):
    import av

    root = local_run["root"]
    out, gif = tmp_path / "teacher.mp4", tmp_path / "teacher.gif"
    result = llp_local(
        "play", "--model", "models:/llp-locomotion-teacher/1", "--terrain", "stairs_up", "--level", "1",
        "--seconds", "2", "--size", "320x240", "--out", str(out), "--gif", str(gif),
        *SMOKE, "--set", f"run_root={root}",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    with av.open(str(out)) as container:
        stream = container.streams.video[0]
        frames = [f for f in container.decode(video=0)]
        assert (stream.width, stream.height) == (320, 240)
    fell = "fell" in result.stdout
    assert len(frames) == 51 or (fell and 2 <= len(frames) < 51), result.stdout  # 2 s at 25 fps, both ends
    assert f"{len(frames)} frames, 320x240 at 25 fps" in result.stdout
    from PIL import Image

    with Image.open(gif) as image:
        assert image.n_frames == (len(frames) + 1) // 2
    bad = llp_local("play", "--model", "stand-still", "--terrain", "lava", "--out", str(out), *SMOKE)
    assert bad.returncode == 2 and "--terrain 'lava' is not a tile of the task" in bad.stderr


def test_the_evaluation_logs_a_video_per_tile_type(local_run):
    import mlflow

    root = local_run["root"]
    book = json.loads((root / "ui-ok" / "ledger.json").read_text())
    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    files = mlflow.MlflowClient().list_artifacts(book["stages"]["evaluate"]["mlflow_run"], "evaluation/videos")
    names = sorted(Path(f.path).name for f in files)
    assert names == sorted(f"{t}_level1.mp4" for t in ("flat", "rough", "stairs_up", "stairs_down")), names


@pytest.mark.fault
def test_sigterm_ends_a_run_as_interrupted_with_status_143_and_a_resume_hint(local_run):
    root = local_run["root"]
    proc = subprocess.Popen(
        [str(BIN / "llp"), "run", *SMOKE, "--set", f"run_root={root}", "--run-id", "terminated"]
        + ["--set", "stages.locomotion_teacher.iterations=400", "--until-stage", "locomotion_teacher"],
        cwd=ROOT,
        env=local_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ledger = root / "terminated" / "ledger.json"
    deadline = time.time() + 300
    while time.time() < deadline:
        book = json.loads(ledger.read_text()) if ledger.exists() else {}
        if book.get("stages", {}).get("locomotion_teacher", {}).get("mlflow_run"):
            break
        assert proc.poll() is None, "the run ended before it could be stopped"
        time.sleep(1)
    time.sleep(5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    # 143 from llp; Ray's core worker may still abort (-6) while the interpreter exits (issue 13)
    assert proc.returncode in (143, -6), err[-3000:]
    assert "llp resume terminated" in err
    book = json.loads(ledger.read_text())
    assert book["state"] == "interrupted" and book["stages"]["locomotion_teacher"]["state"] == "interrupted"
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    client = mlflow.MlflowClient()
    assert client.get_run(book["mlflow_parent_run"]).info.status == "KILLED"
    assert client.get_run(book["stages"]["locomotion_teacher"]["mlflow_run"]).info.status == "KILLED"
    status = llp_local("status", "terminated", "--run-root", str(root))
    assert "state interrupted" in status.stdout, status.stdout
