"""A skill's trials from its motion's start (standing, walking, or led in from behind it), and the
evaluations of the multi-expert stages: the terrain protocol per policy, and each skill's course."""

from __future__ import annotations

from llp.skills.protocol import EvaluateConfig

WALK_IN_UNHELD_Z = 1.0  # m: a height error the walk-in evaluation tolerates (the robot's own height is ~0.7 m)


LEAD_IN_BANDS = 3  # trials that start behind the motion's start: their success per third of that distance


def success_by_lead_in(trials: list[dict], reach: float, bands: int = LEAD_IN_BANDS) -> dict[str, float]:
    """The share of ``trials`` (trial records) that succeed per equal band of their distance behind the motion's
    start (``lead_in_m``), 0 to ``reach`` m, nearest first: {"0.00-0.12 m": rate, ...}; a band no trial started
    in is left out; none without a distance (``reach`` 0)."""
    if reach <= 0:
        return {}
    edges = [reach * k / bands for k in range(bands + 1)]
    out = {}
    for k in range(bands):
        lo, hi = edges[k], edges[k + 1]
        inside = [t for t in trials if lo <= t["lead_in_m"] < hi or (k == bands - 1 and t["lead_in_m"] >= hi)]
        if inside:
            out[f"{lo:.2f}-{hi:.2f} m"] = sum(t["success"] for t in inside) / len(inside)
    return out


def lead_in_reach(task) -> float:
    """How far behind the motion's start a tracking task's trials may begin (standing or walking), m."""
    return max(task.lead_in_m, task.walking_lead_in_m)


def lead_in_words(by_band: dict[str, float]) -> str:
    """``success_by_lead_in``'s bands for a log line ("" without any)."""
    if not by_band:
        return ""
    return "; by distance behind the start: " + ", ".join(f"{b} {100 * r:.0f}%" for b, r in by_band.items())


class DefaultPose:
    """The default pose held under PD: actions of 0 in an env whose actions offset the default pose."""

    def __init__(self, num_actions: int):
        self.num_actions = num_actions

    def initial_memory(self, n: int):
        return n

    def observe(self, obs):
        return obs

    def step(self, obs, memory):
        import torch

        return torch.zeros(memory, self.num_actions), memory, None


def run_trials(env_cfg, actor, trials: int, seed: int) -> list[dict]:
    """``trials`` rollouts of the deterministic policy from the reference's first frame (with the start noise
    of training); one record each: success, fell, frames, tracking error, the trajectory."""
    import torch

    from llp.motion.tracking_env import TrackingEnv

    env = TrackingEnv(env_cfg, trials, seed=seed)
    obs = env.start_trials()
    memory = actor.initial_memory(trials)
    done = set()
    with torch.no_grad():
        while len(done) < trials:
            mean, memory, _ = actor.step(actor.observe(obs), memory)
            result = env.step(mean)
            obs = result.obs
            done |= {rec["env"] for rec in env.finished}
    first = {}
    for rec in env.finished:  # each env's first episode is its trial
        first.setdefault(rec["env"], rec)
    return [first[e] for e in sorted(first)]


def evaluate_locomotion(ctx, protocol: EvaluateConfig, policies: dict, group: str = "locomotion") -> dict:
    """The evaluation protocol (as ``llp evaluate``) for each policy (a URI; None: standing still) on the same
    fresh trials; metrics eval/<group>/<who>/..."""
    from llp.skills.protocol import evaluate_policy

    rows = {}
    for who, uri in policies.items():
        bar = ctx.progress(1, 0, label=f"evaluate {who} ({group})")
        policy = None if uri is None else ctx.frozen_policy(uri)
        report = evaluate_policy(policy, protocol, ctx.resources, ctx.seed, bar.trials)
        row = {k: report[k] for k in ("model", "success_rate", "fall_rate", "tracking_kernel", "trials", "outcomes",
                                      "mean_progress_m", "ends_to_goal_m")}  # fmt: skip
        row["success_by_type"] = {t: r["success_rate"] for t, r in report["by_type"].items()}
        key = f"eval/{group}/{who.replace(' ', '_')}"
        metrics = {f"{key}/{k}": float(row[k]) for k in ("success_rate", "fall_rate", "tracking_kernel",
                                                          "mean_progress_m")}  # fmt: skip
        metrics.update({f"{key}/{t}/success_rate": v for t, v in row["success_by_type"].items()})
        ctx.log_metrics(metrics, step=0)
        print(f"[llp] {ctx.stage}: {group}: {who}: {100 * row['success_rate']:.0f}% of {row['trials']} trials "
              f"succeed, {100 * row['fall_rate']:.0f}% fall", flush=True)  # fmt: skip
        rows[who] = row
    return rows


def evaluate_skill_starts(ctx, trials: int, skill: str, expert, env_cfg, students: dict[str, str]) -> dict:
    """``evaluate_skill`` from the standing start ({skill: rows}) and, where the group also starts walking, from
    the walking start, heights not held to the reference's clock ({"<skill> walking start": rows}, metrics
    eval/<skill>_walking_start/...), and where its walking starts lead in, from up to ``walking_lead_in_m``
    behind it ({"<skill> walking lead-in": rows}, with the success per band of that distance)."""
    from dataclasses import replace

    from llp.skills.trials import WALK_IN_UNHELD_Z

    def starting(share: float, lead_in: float = 0.0):  # walking ones keep their own timing (as the skill stage's)
        unheld = replace(env_cfg.task.terminations, walking_unheld_z=WALK_IN_UNHELD_Z if share else None)
        task = replace(env_cfg.task, walking_starts=share, walking_lead_in_m=lead_in, terminations=unheld)
        return replace(env_cfg, task=task)

    table = {skill: evaluate_skill(ctx, trials, skill, expert, starting(0.0), students)}
    if env_cfg.walking_states is not None:
        starts = {"walking start": starting(1.0)}
        if env_cfg.task.walking_lead_in_m > 0:
            starts["walking lead-in"] = starting(1.0, env_cfg.task.walking_lead_in_m)
        for start, env in starts.items():
            name = f"{skill} {start}"
            table[name] = evaluate_skill(ctx, trials, skill, expert, env, students, label=name.replace(" ", "_"))
    return table


def evaluate_skill(ctx, trials: int, skill: str, expert, env_cfg, students: dict[str, str], label: str = "") -> dict:
    """The skill's course from ``env_cfg``'s start, every height: its expert (in its own proprioception), each
    student (name -> URI) and the default pose, on the same trials; metrics eval/<label or skill>/<who>/..."""
    from dataclasses import replace

    from llp.skills.trials import DefaultPose, lead_in_reach, lead_in_words, run_trials, success_by_lead_in

    own = replace(env_cfg, task=replace(env_cfg.task, proprio_layout=expert.spec["proprio_layout"]))
    policies = {f"{skill} expert": (expert.load(), own, expert.uri)}
    policies.update({who: (ctx.frozen_policy(uri).load(), env_cfg, uri) for who, uri in students.items()})
    policies["default pose"] = (None, env_cfg, "baseline:default-pose")
    rows = {}
    for who, (actor, env, model) in policies.items():
        if actor is None:
            from llp.motion.tracking_env import TrackingEnv

            actor = DefaultPose(TrackingEnv(env, 1).num_actions)
        records = run_trials(env, actor, trials, seed=ctx.seed + 104729)
        n = len(records)
        row = {"model": model, "trials": n, "success_rate": sum(t["success"] for t in records) / n,
               "fall_rate": sum(t["fell"] for t in records) / n}  # fmt: skip
        by_band = success_by_lead_in(records, lead_in_reach(env.task))
        if by_band:
            row["success_by_lead_in"] = by_band
        row["success_by_reference"] = {
            ref: sum(t["success"] for t in records if t["reference_id"] == ref) / max(1, sum(t["reference_id"] == ref
                                                                                          for t in records))
            for ref in sorted({t["reference_id"] for t in records})
        }  # fmt: skip
        key = f"eval/{label or skill}/{who.replace(' ', '_')}"
        ctx.log_metrics({f"{key}/success_rate": row["success_rate"], f"{key}/fall_rate": row["fall_rate"]}, step=0)
        print(f"[llp] {ctx.stage}: {label or skill}: {who}: {100 * row['success_rate']:.0f}% of {n} trials succeed, "
              f"{100 * row['fall_rate']:.0f}% fall{lead_in_words(by_band)}", flush=True)  # fmt: skip
        rows[who] = row
    return rows
