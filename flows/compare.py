"""`llp compare`: pipeline runs side by side, from MLflow alone, as the paper's tables.

Each column is a setting of the pipeline: the runs that share an ablation tag (``llp.ablation``), or one run.
A column with several runs (seeds) shows the mean success over its runs and their spread. A column with one
run shows its success with the 95% Wilson interval of its trials. Rows are evaluation settings (tile type
and difficulty), as in the paper. The paper's reported numbers come from ``conf/paper/results.yaml`` and
sit beside them as a reference column. Plots:
- success against difficulty, per tile type, with Wilson intervals;
- learning curves of every training stage.

The report is written as Markdown and HTML, and logged as an artifact of an MLflow run of kind
``comparison``.
"""

from __future__ import annotations

import html
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from llp.config.files import CONF_DIR

CURVE_METRICS = ("episode/return", "episode/length")


@dataclass
class RunResult:
    """What one pipeline run contributes: its evaluation report and its stages' learning curves."""

    run_id: str  # the pipeline run id (llp.pipeline_run)
    label: str  # its column: the ablation tag, or the run id
    profile: str
    mlflow_run: str
    report: dict | None  # the evaluation stage's report (the teacher)
    curves: dict[str, dict[str, list[tuple[int, float]]]] = field(default_factory=dict)  # stage -> metric -> pts
    student_report: dict | None = None  # the depth student the run ends in (fine-tuned, if it was)
    student_teacher_report: dict | None = None  # its teacher on the student's trials
    final_report: dict | None = None  # the final evaluation's: the deployable files, closed loop
    final_teacher_report: dict | None = None  # ... and the depth student's teacher on the same trials


def paper_results() -> dict:
    return yaml.safe_load((CONF_DIR / "paper" / "results.yaml").read_text())


def paper_cell(paper: dict, tile_type: str, difficulty: str) -> str:
    row = paper["results"].get(tile_type, {})
    values = row.get(difficulty) or row.get("*")
    if not values:
        return "-"
    return ", ".join(f"{name.replace('_', ' ')} {v:.1f}%" for name, v in values.items())


def find_runs(client, experiment: str, selectors: list[str]) -> list:
    """The MLflow pipeline runs named by ``selectors``: a pipeline run id, or KEY=VALUE of a tag."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ValueError(f"no MLflow experiment {experiment!r} at {client.tracking_uri}")
    found, seen = [], set()
    for sel in selectors:
        if "=" in sel:
            key, _, value = sel.partition("=")
            query = f"tags.`{key}` = '{value}'"
        else:
            query = f"tags.`llp.pipeline_run` = '{sel}'"
        runs = client.search_runs([exp.experiment_id], f"{query} and tags.`llp.kind` = 'pipeline'",
                                  order_by=["attributes.start_time ASC"])  # fmt: skip
        if not runs:
            known = client.search_runs([exp.experiment_id], "tags.`llp.kind` = 'pipeline'", max_results=8)
            names = ", ".join(r.data.tags.get("llp.pipeline_run", "?") for r in known) or "none"
            raise ValueError(f"{sel!r}: no pipeline run matches it in experiment {experiment!r} (recent: {names})")
        for run in runs:
            if run.info.run_id not in seen:
                seen.add(run.info.run_id)
                found.append(run)
    return found


def _stage_runs(client, run) -> dict[str, str]:
    """Stage -> MLflow run id: the pipeline run's tags (cached stages point at the run that computed them),
    or, for runs from before those tags, its child runs."""
    tags = run.data.tags
    out = {k.split(".", 2)[2]: v for k, v in tags.items() if k.startswith("llp.stage_run.")}
    if out:
        return out
    children = client.search_runs([run.info.experiment_id], f"tags.`mlflow.parentRunId` = '{run.info.run_id}'")
    return {c.data.tags["llp.stage"]: c.info.run_id for c in children if "llp.stage" in c.data.tags}


def collect(client, run, tmp: Path) -> RunResult:
    import mlflow

    tags = run.data.tags
    pipeline_run = tags.get("llp.pipeline_run", run.info.run_id)
    result = RunResult(pipeline_run, tags.get("llp.ablation", pipeline_run), tags.get("llp.profile", "?"),
                       run.info.run_id, None)  # fmt: skip

    def report(stage_run: str, artifact: str) -> dict | None:
        try:
            path = mlflow.artifacts.download_artifacts(
                run_id=stage_run, artifact_path=artifact, dst_path=str(tmp / stage_run)
            )
            return json.loads(Path(path).read_text())
        except (OSError, mlflow.exceptions.MlflowException):
            return None

    for stage, stage_run in _stage_runs(client, run).items():
        if stage == "evaluate":
            result.report = report(stage_run, "evaluation/report.json")
            continue
        if stage == "evaluate_final":  # the pipeline's product (the deployable files) and the teacher it came from
            result.final_report = report(stage_run, "evaluation/report.json")
            result.final_teacher_report = report(stage_run, "evaluation/reports/teacher.json")
            continue
        if stage == "depth_student":  # the student the pipeline ends in (fine-tuned, if it was) and its teacher
            for who in ("fine-tuned", "distilled"):
                result.student_report = result.student_report or report(stage_run, f"evaluation/reports/{who}.json")
            result.student_teacher_report = report(stage_run, "evaluation/reports/teacher.json")
        curves = {}
        for key in CURVE_METRICS:
            history = client.get_metric_history(stage_run, key)
            if history:
                curves[key] = sorted((m.step, m.value) for m in history)
        if curves:
            result.curves[stage] = curves
    return result


# ---------------------------------------------------------------------------------------------- tables
def _cell(rows: list[dict]) -> str:
    """One column's cell for one setting: a run's rate with its interval, or several runs' mean and spread."""
    rates = [r["success_rate"] for r in rows if r is not None and not math.isnan(r["success_rate"])]
    if not rates:
        return "-"
    if len(rates) == 1:
        r = rows[0]
        lo, hi = r["success_ci95"]
        n = sum(r["outcomes"].values())
        return f"{100 * r['success_rate']:.1f}% [{100 * lo:.0f}-{100 * hi:.0f}] n={n}"
    sd = statistics.stdev(rates)
    return f"{100 * statistics.mean(rates):.1f}% ± {100 * sd:.1f} ({len(rates)} seeds)"


TEACHER = "teacher"


def columns(results: list[RunResult]) -> list[RunResult]:
    """The policies compared, at the last stage every run reached: the deployable files (the final evaluation:
    terrain and courses), or else the depth students, after a "teacher" column (the first run's teacher on the
    same trials) when every run got that far; else the locomotion teachers."""
    if not results:
        return results
    first = results[0]
    for final, its_teacher in (("final_report", "final_teacher_report"), ("student_report", "student_teacher_report")):
        if all(getattr(r, final) for r in results):
            teacher = RunResult(first.run_id, TEACHER, first.profile, first.mlflow_run, getattr(first, its_teacher))
            rows = [RunResult(r.run_id, r.label, r.profile, r.mlflow_run, getattr(r, final), r.curves) for r in results]
            return [teacher, *rows] if teacher.report else rows
    return results


def table(results: list[RunResult], paper: dict) -> tuple[list[str], list[list[str]]]:
    labels = list(dict.fromkeys(r.label for r in results))
    settings: list[tuple[str, str]] = []
    for r in results:
        for s in (r.report or {}).get("settings", []):
            if (s["tile_type"], s["difficulty"]) not in settings:
                settings.append((s["tile_type"], s["difficulty"]))
    head = ["setting", *labels, "paper (reported)"]
    rows = []
    for tile_type, difficulty in settings:
        row = [f"{tile_type} {difficulty}".replace(" -", "")]
        for label in labels:
            cells = []
            for r in results:
                if r.label == label and r.report:
                    key = (tile_type, difficulty)
                    match = [s for s in r.report["settings"] if (s["tile_type"], s["difficulty"]) == key]
                    cells.append(match[0] if match else None)
            row.append(_cell([c for c in cells if c is not None]))
        row.append(paper_cell(paper, tile_type, difficulty))
        rows.append(row)
    overall = ["all settings"]
    for label in labels:
        overall.append(_cell([r.report for r in results if r.label == label and r.report]))
    rows.append([*overall, "-"])
    kernel = ["tracking kernel (standing still)"]
    for label in labels:
        reports = [r.report for r in results if r.label == label and r.report]
        values = [f"{x['tracking_kernel']:.3f} ({x['standing_tracking_kernel']:.3f})" for x in reports]
        kernel.append(", ".join(values) or "-")
    rows.append([*kernel, "-"])
    return head, rows


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def paper_table(paper: dict) -> tuple[list[str], list[list[str]]]:
    rows = []
    for tile_type, by_difficulty in paper["results"].items():
        for difficulty, values in by_difficulty.items():
            for name, value in values.items():
                where = "all" if difficulty == "*" else difficulty
                rows.append([tile_type, where, name.replace("_", " "), f"{value:.1f}%"])
    return ["tile type", "difficulty", "policy", "success"], rows


# ---------------------------------------------------------------------------------------------- plots
def success_plot(results: list[RunResult], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    types = list(dict.fromkeys(s["tile_type"] for r in results if r.report for s in r.report["settings"]))
    fig, axes = plt.subplots(1, max(1, len(types)), figsize=(3.2 * max(1, len(types)), 3.4), squeeze=False)
    for ax, tile_type in zip(axes[0], types):
        for k, r in enumerate(results):
            rows = [s for s in (r.report or {}).get("settings", []) if s["tile_type"] == tile_type]
            if not rows:
                continue
            x = [s["level"] + 0.06 * k for s in rows]
            y = [100 * s["success_rate"] for s in rows]
            lo = [100 * (s["success_rate"] - s["success_ci95"][0]) for s in rows]
            hi = [100 * (s["success_ci95"][1] - s["success_rate"]) for s in rows]
            name = r.label if r.label == r.run_id else f"{r.label} ({r.run_id})"
            ax.errorbar(x, y, yerr=[lo, hi], marker="o", ms=3, capsize=2, lw=1, label=name)
        ax.set_title(tile_type, fontsize=9)
        levels = [s["level"] for s in rows]
        ax.set_xlim(min(levels) - 0.5, max(levels) + 0.5)
        ax.set_xticks(levels)
        ax.set_xticklabels([s["difficulty"].replace("step ", "") for s in rows], fontsize=6, rotation=30)
        ax.set_ylim(-5, 105)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("success, % (95% Wilson interval)")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=7, loc="lower center", ncol=min(4, max(1, len(names))), frameon=False)
    fig.tight_layout(rect=(0, 0.06 * (1 + (len(names) - 1) // 4), 1, 1))  # room for the legend under the plots
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def curves_plot(results: list[RunResult], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stages = list(dict.fromkeys(s for r in results for s in r.curves))
    fig, axes = plt.subplots(1, max(1, len(stages)), figsize=(5 * max(1, len(stages)), 3.2), squeeze=False)
    for ax, stage in zip(axes[0], stages):
        for r in results:
            points = r.curves.get(stage, {}).get("episode/return")
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], lw=1, label=f"{r.label} ({r.run_id})")
        ax.set_title(f"{stage}: mean episode return", fontsize=9)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------- report
def html_table(head: list[str], rows: list[list[str]], css: str) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    out = [f'<table class="{css}"><thead><tr>{cells}</tr></thead><tbody>']
    out += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows]
    return "\n".join(out + ["</tbody></table>"])


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 13px; }}
th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; }}
th {{ background: #f3f3f3; }}
img {{ max-width: 100%; border: 1px solid #eee; }}
</style></head>
<body>
<h1>{title}</h1>
<p>{summary}</p>
<h2>Success per setting</h2>
{main}
<img id="success" src="success.png" alt="success against difficulty">
<h2>Learning curves</h2>
<img id="curves" src="curves.png" alt="learning curves">
<h2>The paper's reported numbers</h2>
{paper}
<script>
// a marker for checks in a headless browser: how many pictures loaded
window.addEventListener("load", function () {{
  var images = Array.from(document.images);
  var loaded = images.filter(function (i) {{ return i.complete && i.naturalWidth > 0; }}).length;
  document.body.setAttribute("data-images", loaded + "/" + images.length);
}});
</script>
</body></html>
"""


def write_report(results: list[RunResult], out: Path, paper: dict | None = None) -> dict[str, Path]:
    paper = paper or paper_results()
    out.mkdir(parents=True, exist_ok=True)
    runs = ", ".join(f"{r.run_id} ({r.label}, profile {r.profile})" for r in results)
    title = "LLP comparison: " + " vs ".join(dict.fromkeys(r.label for r in results))
    what = ("deployable policies (closed loop)" if all(r.final_report for r in results) else
            "depth students" if all(r.student_report for r in results) else "teachers")  # fmt: skip
    results = columns(results)
    head, rows = table(results, paper)
    phead, prows = paper_table(paper)
    compared = f"{what}, beside their teacher on the same trials" if results[0].label == TEACHER else what
    summary = (f"Runs: {runs}. Compared: the {compared} (the last stage every run reached). Cells: success with "
               "the 95% Wilson interval of the run's trials; columns of several runs (seeds): the mean over runs "
               "and its standard deviation.")  # fmt: skip
    paths = {"success": success_plot(results, out / "success.png"), "curves": curves_plot(results, out / "curves.png")}
    md = [f"# {title}", "", summary, "", "## Success per setting", "", markdown_table(head, rows), "",
          "![success against difficulty](success.png)", "", "## Learning curves", "", "![learning curves](curves.png)",
          "", "## The paper's reported numbers", "", markdown_table(phead, prows), ""]  # fmt: skip
    paths["markdown"] = out / "report.md"
    paths["markdown"].write_text("\n".join(md))
    paths["html"] = out / "report.html"
    page = PAGE.format(
        title=html.escape(title),
        summary=html.escape(summary),
        main=html_table(head, rows, "main"),
        paper=html_table(phead, prows, "paper"),
    )
    paths["html"].write_text(page)
    data = [{"run_id": r.run_id, "label": r.label, "profile": r.profile, "mlflow_run": r.mlflow_run,
             "model": (r.report or {}).get("model"),
             "report": {k: v for k, v in (r.report or {}).items() if k != "records"}} for r in results]  # fmt: skip
    paths["data"] = out / "data.json"
    paths["data"].write_text(json.dumps(data, indent=1))
    return paths


def log_comparison(client, experiment: str, results: list[RunResult], out: Path) -> str:
    """An MLflow run of kind ``comparison`` holding the report; returns its id."""
    exp = client.get_experiment_by_name(experiment)
    run = client.create_run(
        exp.experiment_id,
        run_name="compare " + " ".join(r.run_id for r in results)[:200],
        tags={"llp.kind": "comparison", "llp.compared": ",".join(r.run_id for r in results)[:5000]},
    )
    client.log_artifacts(run.info.run_id, str(out), "report")
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id
