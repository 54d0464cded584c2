"""LLP stage 7 on what the pipeline makes: its final policies judged side by side on the same fresh trials.

The depth student's teacher (the transition policy), the depth student as registered (torch) and the
deployable files (``policy.onnx`` in onnxruntime, each observation built from ``policy.json``'s layout alone,
depth rendered through the camera model it names, at its control rate) run the evaluation protocol beside a
robot standing still: the terrain's settings, the course from its approach (the paper's handoff from walking
into the skill) and the climb from where the skill's motion starts, at every climb height the reference
library reached. ``evaluation/report.json`` is the deployable's report (what ``llp compare`` reads); each
policy's report, a table and a picture go beside it. The deployable must act as the student it was exported
from: per setting, each one's success lies inside the other's Wilson interval, and the share of trials with
the same outcome is logged.
"""

from __future__ import annotations

from dataclasses import dataclass

from llp.config.schema import check, field
from llp.config.stage import StageConfig
from llp.skills.library import CourseOfSkill, course_at
from llp.skills.protocol import EvaluateConfig, course_protocol

# the policies judged, in the order of the report: role -> (config field naming the stage, the stage's output)
ROLES = {"teacher": ("teacher", "policy"), "student": ("student", "policy"), "deployable": ("deployable", "deployable")}


def _protocol() -> EvaluateConfig:
    # the approach (the whole 2.5 m into the box: the paper's course), and the skill from its motion's start (0.35-0.55
    # m before the box: the climb itself)
    return course_protocol({"course": [0.0, 0.0], "climb": [1.95, 2.15]})


@dataclass(kw_only=True)
class FinalEvaluationConfig(CourseOfSkill, StageConfig):
    """Which stages' policies to judge, where the climb heights come from, and the protocol."""

    teacher: str = field(
        default="transition", doc="Stage whose 'policy' the depth student learned from ('': not judged)."
    )
    student: str = field(default="depth_student", doc="Stage whose 'policy' is the depth student ('': not judged).")
    deployable: str = field(default="export", doc="Stage whose 'deployable' holds the exported files ('': none).")
    protocol: EvaluateConfig = field(
        default_factory=_protocol, doc="The protocol: terrain settings, and the courses with their starts."
    )

    def validate(self, path: str) -> None:
        check(any(getattr(self, f) for f, _ in ROLES.values()), path, "name at least one policy to judge")
        check(self.retries >= 0, f"{path}.retries", "must be >= 0")
        self.protocol.validate(f"{path}.protocol")

    def inputs(self) -> dict[str, str]:
        named = {role: f"{getattr(self, f)}.{out}" for role, (f, out) in ROLES.items() if getattr(self, f)}
        return {**named, **self.course_input()}


def run(ctx, cfg: FinalEvaluationConfig, inputs: dict[str, str]) -> dict[str, str]:
    """Every named policy and the stand-still baseline on the same trials; the reports and their agreement go to
    the stage's MLflow run. Returns {} (metrics and pictures only)."""
    from dataclasses import replace

    from llp.evaluation.pictures import comparison_figure
    from llp.skills.protocol import evaluate_policy

    protocol = cfg.protocol
    if protocol.courses:
        protocol = replace(protocol, course_env=course_at(protocol.course_env, cfg.course_obstacle(ctx, inputs)))
    ctx.init_ray()
    judged = {role: inputs[role] for role in ROLES if role in inputs}
    reports = {}
    for who, uri in [*judged.items(), ("stand_still", None)]:
        bar = ctx.progress(1, 0, label=f"evaluate {who}")
        policy = None if uri is None else ctx.frozen_policy(uri)
        reports[who] = evaluate_policy(policy, protocol, ctx.resources, ctx.seed, bar.trials)
        ctx.log_metrics(_metrics(who, reports[who]), step=0)
        ctx.log_json(reports[who], f"evaluation/reports/{who}.json")
        print(f"[llp] {ctx.stage}: {who} ({reports[who]['model']}): {_summary(reports[who])}", flush=True)
    main = reports.get("deployable") or reports[next(iter(judged))]
    ctx.log_json(main, "evaluation/report.json")
    table = {"policies": {who: r["model"] for who, r in reports.items()}, "settings": _table(reports),
             "tracking_by_command": {who: r["tracking_by_command"] for who, r in reports.items()}}  # fmt: skip
    if "deployable" in reports and "student" in reports:
        table["deployable_vs_student"] = agreement(reports["deployable"], reports["student"])
        a = table["deployable_vs_student"]
        ctx.log_metrics({"eval/deployable_vs_student/same_outcome": a["same_outcome"],
                         "eval/deployable_vs_student/settings_agree": float(a["settings_agree"])}, step=0)  # fmt: skip
        verdict = "agree" if a["settings_agree"] else f"DISAGREE on {a['disagree']}"
        print(f"[llp] {ctx.stage}: the deployable files and the torch student {verdict} (each setting's success "
              f"inside the other's Wilson interval); {100 * a['same_outcome']:.1f}% of trials end alike",
              flush=True)  # fmt: skip
    ctx.log_json(table, "evaluation/final.json")
    ctx.log_figure(comparison_figure(reports), "evaluation/final.png")
    return {}


def agreement(a: dict, b: dict) -> dict:
    """How two reports on the same trials agree: per setting, whether each success rate lies inside the other's
    Wilson interval, and the share of trials that ended with the same outcome."""
    disagree = []
    for ra, rb in zip(a["settings"], b["settings"]):
        inside = lambda r, other: other["success_ci95"][0] <= r["success_rate"] <= other["success_ci95"][1]  # noqa: E731
        if not (inside(ra, rb) and inside(rb, ra)):
            disagree.append(f"{ra['tile_type']} {ra['difficulty']}")
    outcomes = {r["index"]: r["outcome"] for r in b["records"]}
    same = sum(outcomes.get(r["index"]) == r["outcome"] for r in a["records"]) / max(1, len(a["records"]))
    return {"settings_agree": not disagree, "disagree": disagree, "same_outcome": same, "trials": len(a["records"])}


def _metrics(who: str, report: dict) -> dict[str, float]:
    out = {f"eval/{who}/{k}": float(report[k]) for k in ("success_rate", "fall_rate", "tracking_kernel")}
    for t, row in report["by_type"].items():
        out[f"eval/{who}/{t}/success_rate"] = row["success_rate"]
    from llp.sim.command_regions import slug

    for region, row in report["tracking_by_command"].items():  # e.g. eval/student/command/backward_sideways/...
        out[f"eval/{who}/command/{slug(region)}/success_rate"] = row["success_rate"]
    return out


def _summary(report: dict) -> str:
    parts = [f"{t} {100 * r['success_rate']:.0f}%" for t, r in report["by_type"].items()]
    return f"{100 * report['success_rate']:.1f}% of {report['trials']} trials succeed ({', '.join(parts)})"


def _table(reports: dict[str, dict]) -> list[dict]:
    """One row per setting: each policy's success, its Wilson interval and its falls."""
    first = next(iter(reports.values()))
    rows = []
    for k, s in enumerate(first["settings"]):
        row = {"tile_type": s["tile_type"], "difficulty": s["difficulty"], "trials": sum(s["outcomes"].values())}
        for who, r in reports.items():
            mine = r["settings"][k]
            row[who] = {"success_rate": mine["success_rate"], "success_ci95": mine["success_ci95"],
                        "fall_rate": mine["fall_rate"]}  # fmt: skip
        rows.append(row)
    return rows
