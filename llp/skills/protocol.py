"""The evaluation protocol every stage judges its policies by (as `llp evaluate`): the task's terrain
settings and the courses, each on fresh trials of its own seed, spread over the Ray pool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llp.config.schema import check, field
from llp.config.stage import TaskStageConfig
from llp.stages.common import check_course_tiles, checked_env_config


def _traverse() -> list[str]:
    return ["stairs_up", "stairs_down"]


@dataclass(kw_only=True)
class EvaluateConfig(TaskStageConfig):
    """What to evaluate, and the protocol's trial counts and rules."""

    policy: str = field(default="locomotion_teacher", doc="Upstream stage whose 'policy' output is evaluated.")
    env: dict[str, Any] = field(default_factory=dict, doc="Overrides of the task config for the trials (validated).")
    trials: int = field(default=20, doc="Trials per setting (the paper: 500 per skill setting).")
    transition_trials: int = field(default=20, doc="Trials per transition-course setting (the paper: 100).")
    duration_s: float = field(default=10.0, doc="Longest trial, seconds.")
    traverse_types: list[str] = field(
        default_factory=_traverse, doc="Goal-less tile types crossed straight ahead (the others: follow commands)."
    )
    traverse_speed: float = field(default=0.5, doc="Forward command on traverse tiles, m/s.")
    traverse_distance: float = field(
        default=3.0, doc="Distance from the spawn that counts as crossing a traverse tile, metres."
    )
    stuck_s: float = field(default=4.0, doc="A trial without stuck_distance of progress for this long is stuck.")
    stuck_distance: float = field(default=0.25, doc="Progress that counts, metres.")
    envs_per_actor: int = field(default=64, doc="Envs per evaluator actor (trials run in waves of this size).")
    video_seconds: float = field(
        default=4.0, doc="A clip this long per tile type goes to the stage's MLflow run (evaluation/videos/); 0: none."
    )
    courses: dict[str, list[float]] = field(
        default_factory=dict,
        doc="Course settings beside the terrain's: report label -> [lo, hi], where the trials start (metres from "
        "the course tile's spawn; [0, 0]: the whole approach). Each label is a setting per climb height of "
        "course_env, transition_trials trials each; e.g. course: [0, 0] (the approach into the skill, the paper's "
        "course) and climb: [1.95, 2.15] (the skill from where its motion starts). {}: terrain only.",
    )
    course_env: dict[str, Any] = field(
        default_factory=dict,
        doc="Overrides of the task for the course settings: the transition stage's course (climb tiles, the goal "
        "on the box, its commands and randomization), without its start curriculum.",
    )
    retries: int = field(default=1, doc="Prefect retries of this stage.")

    def validate(self, path: str) -> None:
        check(self.trials >= 1, f"{path}.trials", "must be >= 1")
        check(self.transition_trials >= 1, f"{path}.transition_trials", "must be >= 1")
        check(self.duration_s > 0, f"{path}.duration_s", "must be positive")
        check(self.envs_per_actor >= 1, f"{path}.envs_per_actor", "must be >= 1")
        check(self.video_seconds >= 0, f"{path}.video_seconds", "must be >= 0 (0: no videos)")
        check(self.stuck_s > 0 and self.stuck_distance > 0, f"{path}.stuck_s", "stuck_s and stuck_distance > 0")
        env = self.env_config(path)
        half = min(env.terrain.tile_length, env.terrain.tile_width) / 2
        check(
            0 < self.traverse_distance < half,
            f"{path}.traverse_distance",
            f"must be positive and less than half a tile ({half} m), or the robot leaves the tile first",
        )
        for i, t in enumerate(self.traverse_types):
            check(t in env.terrain.tile_types, f"{path}.traverse_types[{i}]", f"{t!r} is not a tile type of the task")
        for label, start in self.courses.items():
            where = f"{path}.courses.{label}"
            check(len(start) == 2 and 0 <= start[0] <= start[1], where, f"{start}: need [lo, hi] with 0 <= lo <= hi")
            course = self.course_config(label, path)
            check_course_tiles(course, f"{path}.course_env")
            far = course.terrain.approach_length
            check(start[1] < far, where, f"{start}: must start before the box ({far} m from the spawn)")

    def course_config(self, label: str, path: str = "env"):
        """The protocol for course setting ``label``: the course's tiles, every trial from its start range."""
        from dataclasses import replace

        env = course_trials_env(self.course_env, tuple(self.courses[label]))
        return replace(self, env=env, traverse_types=[], courses={}).env_config(f"{path}.course_env")

    def env_config(self, path: str = "env", action_joints: list[str] | None = None, policy_spec: dict | None = None):
        """The task's env for evaluation: every difficulty present, curriculum frozen, no pushes, commands held
        for the whole trial, episodes longer than a trial; the policy drives ``action_joints`` (from its spec).
        A policy that reads terms the task does not observe (a depth student's image) gets them, through the
        camera it was trained with, unless ``env.camera_model`` names the camera to test with (the paper's
        perfect-camera ablation: trained perfect, tested real)."""
        from llp.config.schema import merge
        from llp.evaluation.protocol import evaluation_levels

        base = checked_env_config(self.task, self.robot, self.env, path)
        extra = _policy_needs(base.observations, policy_spec or {})
        if "camera_model" in self.env:  # the evaluation's own camera wins over the one the policy trained with
            extra.pop("camera_model", None)
        if extra:
            base = checked_env_config(self.task, self.robot, merge(self.env, extra), path)
        frozen = {
            "terrain": {"num_levels": evaluation_levels(base.terrain)},
            "curriculum": {"enabled": False},
            "randomization": {"push_interval_s": None},
            "commands": {"resample_s": self.duration_s + 1.0},
            "terminations": {"episode_length_s": self.duration_s + 1.0},
        }
        if action_joints:
            import re

            frozen["robot"] = {"policy_joints": [re.escape(name) for name in action_joints]}
        return checked_env_config(self.task, self.robot, merge(merge(self.env, extra), frozen), path)


def _policy_needs(observations: dict[str, list[str]], spec: dict) -> dict:
    """Env overrides for a policy: the observation terms it reads that the task lacks, and the camera it was
    trained with; {} when it needs nothing the task does not give."""
    groups = {g: list(terms) for g, terms in observations.items()}
    for ref in spec.get("obs", []):
        group, _, term = ref.partition("/")
        if term not in groups.setdefault(group, []):
            groups[group].append(term)
    out: dict = {} if groups == observations else {"observations": groups}
    camera = spec.get("camera") or {}
    out.update({k: camera[k] for k in ("depth_camera", "camera_model") if k in camera})
    return out


def course_trials_env(course_env: dict[str, Any], start: tuple[float, float]) -> dict[str, Any]:
    """Overrides for trials on a course a policy trained on: its tiles, its commands (the goal's pace) and its
    randomization, every trial from ``start`` (no start curriculum)."""
    randomization = {k: v for k, v in course_env.get("randomization", {}).items() if k != "goal_start_curriculum"}
    env = {"terrain": course_env.get("terrain", {}), "randomization": {**randomization, "goal_starts": [list(start)]}}
    if "commands" in course_env:
        env["commands"] = course_env["commands"]
    return env


def course_protocol(courses: dict[str, list[float]], **fields) -> EvaluateConfig:
    """The protocol with ``courses`` on the transition course (its tiles and commands, no start curriculum)
    beside the terrain, no clips."""
    from llp.stages.common import transition_course

    course = transition_course()
    course["randomization"].pop("goal_start_curriculum")
    return EvaluateConfig(video_seconds=0.0, retries=0, courses=courses, course_env=course, **fields)


STAND_STILL = "baseline:stand-still"


def evaluate_policy(policy, cfg: EvaluateConfig, resources, seed: int, on_progress=None) -> dict:
    """Evaluate ``policy`` (a ``FrozenPolicy``, or None for the stand-still baseline) on fresh trials spread
    over the Ray pool (which the caller has started); returns the report: the terrain's settings, then each
    course's (``cfg.courses``), every setting on trials of its own seed. The same seed gives the same trials,
    whatever the policy."""
    from dataclasses import replace

    report = _evaluate_part(policy, replace(cfg, courses={}), resources, seed, on_progress)
    if not cfg.courses:
        return report
    from llp.evaluation.protocol import Setting, TrialRecord, summarize

    settings = [Setting(**{k: r[k] for k in Setting.__dataclass_fields__}) for r in report["settings"]]
    records = [TrialRecord(**r) for r in report["records"]]
    for k, label in enumerate(cfg.courses):
        course = replace(cfg, env=course_trials_env(cfg.course_env, tuple(cfg.courses[label])), traverse_types=[],
                         courses={}, trials=cfg.transition_trials)  # fmt: skip
        part = _evaluate_part(policy, course, resources, seed + 7919 * (k + 1), on_progress)
        offset_setting, offset_trial = len(settings), len(records)
        settings += [Setting(**{**{f: r[f] for f in Setting.__dataclass_fields__}, "tile_type": label})
                     for r in part["settings"]]  # fmt: skip
        records += [TrialRecord(**{**r, "index": r["index"] + offset_trial, "setting": r["setting"] + offset_setting})
                    for r in part["records"]]  # fmt: skip
    combined = summarize(settings, records)
    combined.update({k: v for k, v in report.items() if k not in combined and k != "records"})
    combined["records"] = [r.to_dict() for r in records]
    combined["courses"] = {label: list(start) for label, start in cfg.courses.items()}
    return combined


def _evaluate_part(policy, cfg: EvaluateConfig, resources, seed: int, on_progress=None) -> dict:
    from llp.actors.evaluator import evaluate_on_pool
    from llp.evaluation.protocol import plan_trials, settings_for, summarize
    from llp.evaluation.trials import TrialRules

    uri, program, spec = (STAND_STILL, None, None) if policy is None else (policy.uri, policy.program, policy.spec)
    env_cfg = cfg.env_config(action_joints=None if spec is None else spec.get("action_joints"), policy_spec=spec)
    if spec is not None and abs(float(spec.get("policy_dt", env_cfg.policy_dt)) - env_cfg.policy_dt) > 1e-9:
        raise ValueError(f"{uri} acts every {spec['policy_dt']} s, the task's control step is {env_cfg.policy_dt} s: "
                         "a policy is evaluated at its own control rate")  # fmt: skip
    sigma = (
        env_cfg.rewards["lin_vel_tracking"].params.get("sigma", 0.25) if "lin_vel_tracking" in env_cfg.rewards else 0.25
    )
    rules = TrialRules(
        duration_s=cfg.duration_s,
        traverse_speed=cfg.traverse_speed,
        traverse_distance=cfg.traverse_distance,
        stuck_s=cfg.stuck_s,
        stuck_distance=cfg.stuck_distance,
        tracking_sigma=float(sigma),
    )
    settings = settings_for(env_cfg.terrain, cfg.trials, cfg.transition_trials, cfg.traverse_types)
    trials = plan_trials(settings, seed)
    records = evaluate_on_pool(
        resources, env_cfg, cfg.envs_per_actor, seed, program, spec, settings, trials, rules, on_progress
    )
    report = summarize(settings, records)
    report.update(model=uri, seed=seed, task=cfg.task, robot=cfg.robot, rules=rules.__dict__,
                  sim={"backend": env_cfg.backend, "device": env_cfg.device})  # fmt: skip
    report["records"] = [r.to_dict() for r in records]
    return report
