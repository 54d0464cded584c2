"""LLP stage 7, evaluation: a registered policy on fresh trials, with the paper's protocol.

Every tile type of the task at every difficulty (climbs 45-75 cm in 5 cm steps,
vaults 40-50 cm) is a setting; each setting gets ``trials`` spawn-to-goal
trials (``transition_trials`` on transition courses), each with its own seed,
each ending exactly once in success, fall, stuck or timeout
(``llp.evaluation.trials``). Success rates carry Wilson 95% intervals; the
velocity-tracking kernel is shown beside the kernel a robot standing still
would score on the same commands. The same code runs as ``llp evaluate
--model URI``; the protocol itself is ``llp.skills.protocol``, which every stage shares.
"""

from __future__ import annotations

from llp.skills.protocol import EvaluateConfig, evaluate_policy


def run(ctx, cfg: EvaluateConfig, inputs: dict[str, str]) -> dict[str, str]:
    """Evaluate the upstream policy; metrics, the report and its picture go to the stage's MLflow run."""
    uri = inputs["policy"]
    ctx.init_ray()
    bar = ctx.progress(1, 0, label="evaluate")
    report = evaluate_policy(ctx.frozen_policy(uri), cfg, ctx.resources, ctx.seed, bar.trials)
    ctx.fault_point(0)
    metrics = {
        "eval/success_rate": report["success_rate"],
        "eval/fall_rate": report["fall_rate"],
        "eval/tracking_kernel": report["tracking_kernel"],
        "eval/standing_tracking_kernel": report["standing_tracking_kernel"],
        "eval/trials": float(report["trials"]),
    }
    for t, row in report["by_type"].items():
        metrics[f"eval/{t}/success_rate"] = row["success_rate"]
        metrics[f"eval/{t}/fall_rate"] = row["fall_rate"]
        metrics[f"eval/{t}/tracking_kernel"] = row["tracking_kernel"]
    ctx.log_metrics(metrics, step=0)
    ctx.log_json(report, "evaluation/report.json")
    from llp.evaluation.pictures import success_figure

    ctx.log_figure(success_figure(report), "evaluation/success.png")
    if cfg.video_seconds > 0:
        _log_videos(ctx, cfg, uri)
    return {}


def _log_videos(ctx, cfg: EvaluateConfig, uri: str) -> None:
    """One clip per tile type, at the middle difficulty, straight ahead at the traverse speed."""
    import tempfile
    from pathlib import Path

    from llp.evaluation.video import policy_clip, write_mp4

    frozen = ctx.frozen_policy(uri)
    terrain = cfg.env_config().terrain
    level = terrain.num_levels // 2
    with tempfile.TemporaryDirectory() as tmp:
        for tile_type in terrain.tile_types:
            clip = policy_clip(frozen, cfg, tile_type, level, cfg.video_seconds, seed=ctx.seed)
            path = write_mp4(clip.frames, clip.fps, Path(tmp) / f"{tile_type}_level{level}.mp4")
            ctx.log_file(path, "evaluation/videos")
