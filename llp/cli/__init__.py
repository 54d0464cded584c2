"""The `llp` command line: run and resume pipelines, inspect them, benchmark, draw pictures.

Heavy imports (torch, ray, prefect, mlflow) happen inside the subcommands, so
`llp --help` and config validation stay fast.
"""

from __future__ import annotations

import argparse
import os
import sys

from llp.cli.pipeline import cmd_config, cmd_resume, cmd_run, cmd_stages, cmd_status, cmd_submit, cmd_ui
from llp.cli.policies import cmd_evaluate, cmd_play, cmd_render
from llp.cli.studies import cmd_ablate, cmd_ablations, cmd_compare
from llp.cli.tools import cmd_bench, cmd_refs, cmd_seeds

PROFILE_HELP = (
    "conf/profile/<name>.yaml. local (the default): a walking teacher, the climb reference grown two rounds, "
    "the evaluation, the climb-and-step expert, the merge of both, transition training, a depth student and its "
    "export, about 90 min in one piece on 2 cores; smoke: "
    "every stage for a few iterations, about 4 min (the tests); cluster: the paper's budgets, for a Ray cluster "
    "with GPUs (days)"
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llp", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def pipeline_options(q: argparse.ArgumentParser, profile: bool = True) -> None:
        if profile:
            q.add_argument("--profile", default="local", help=PROFILE_HELP)
        q.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY.PATH=VALUE",
            help="override one config value (repeatable), e.g. stages.locomotion_teacher.iterations=10",
        )

    def execution_options(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--cluster",
            metavar="ADDRESS",
            help="run the stages' actors on the Ray cluster whose head is at ADDRESS (HOST:PORT of its GCS; "
            "the same as RAY_ADDRESS); this process stays the driver",
        )
        q.add_argument("--from-stage", help="start at this stage (earlier outputs come from the registry)")
        q.add_argument("--until-stage", help="stop after this stage")
        q.add_argument("--force", action="append", default=[], metavar="STAGE", help="re-run STAGE even if cached")
        q.add_argument(
            "--keep-servers",
            action="store_true",
            help="leave the Prefect server this command started running for later commands",
        )

    q = sub.add_parser("run", help="run the LLP pipeline (cached stages are skipped)")
    pipeline_options(q)
    execution_options(q)
    q.add_argument("--run-id", help="name of the run (default: a timestamp)")
    q.add_argument("--ablation", metavar="NAME",
                   help="change one training condition (conf/ablation/NAME.yaml; see `llp ablations`)")  # fmt: skip
    q.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra MLflow tag on the pipeline run (repeatable), e.g. llp.sweep=S1")  # fmt: skip
    q.set_defaults(fn=cmd_run)

    q = sub.add_parser("ablate", help="run ablations x seeds as one Ray Tune sweep that shares untouched stages")
    q.add_argument("names", nargs="*", help="ablations (see `llp ablations`); the sweep adds the baseline")
    q.add_argument("--seeds", type=int, default=1, metavar="K", help="seeds 0..K-1 per setting (default 1)")
    q.add_argument("--profile", default="local", help=PROFILE_HELP)
    q.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override one config value in every trial (repeatable)")  # fmt: skip
    q.add_argument("--run-root", default="runs", help="where the trials' runs and the sweep live (default runs)")
    q.add_argument("--sweep-id", help="name of the sweep (default: a timestamp)")
    q.add_argument("--resume", metavar="SWEEP", help="continue an interrupted sweep: only unfinished trials run")
    q.add_argument("--concurrent", type=int, default=1, metavar="N",
                   help="trials at once (default 1: on one machine, trials would share its cores)")  # fmt: skip
    q.add_argument("--no-baseline", action="store_true", help="leave the unchanged recipe out of the sweep")
    q.add_argument("--until-stage", help="every trial stops after this stage (a resumed sweep keeps it)")
    q.add_argument(
        "--from-stage",
        help="every trial starts at this stage; earlier stages' outputs are the newest "
        "registered versions (the same for every trial)",
    )
    q.set_defaults(fn=cmd_ablate)

    q = sub.add_parser("ablations", help="list the ablations (conf/ablation/) and the paper's that are left out")
    q.set_defaults(fn=cmd_ablations)

    q = sub.add_parser("submit", help="send a pipeline run to a Ray cluster as a Ray job (the driver runs on its head)")
    pipeline_options(q)
    q.add_argument("--address", default="http://127.0.0.1:8265",
                   help="the Ray job server (the dashboard address) of the cluster")  # fmt: skip
    q.add_argument("--run-id", help="name of the run (default: a timestamp)")
    q.add_argument("--until-stage", help="stop after this stage")
    q.add_argument("--force", action="append", default=[], metavar="STAGE", help="re-run STAGE even if cached")
    q.add_argument("--env", action="append", default=[], metavar="NAME",
                   help="pass this variable to the job (no credentials), e.g. MLFLOW_TRACKING_URI")  # fmt: skip
    q.add_argument("--follow", action="store_true", help="stream the job's output; exit with its status")
    q.add_argument("--resume", action="store_true",
                   help="continue the run --run-id on the head (`llp resume` there), not start one")  # fmt: skip
    q.set_defaults(fn=cmd_submit)

    q = sub.add_parser("compare", help="pipeline runs side by side from MLflow (tables, plots, the paper's numbers)")
    q.add_argument("runs", nargs="+", metavar="RUN_OR_TAG",
                   help="a pipeline run id, or KEY=VALUE of a tag (e.g. llp.ablation=paper_rewards)")  # fmt: skip
    q.add_argument("--run-root", default="runs", help="for the local MLflow store when MLFLOW_TRACKING_URI is unset")
    q.add_argument("--experiment", default="llp", help="MLflow experiment")
    q.add_argument("--out", help="report folder (default runs/compare/<time>)")
    q.set_defaults(fn=cmd_compare)

    q = sub.add_parser("resume", help="continue a pipeline run from its first unfinished stage")
    q.add_argument("run", help="run id (a folder under runs/)")
    q.add_argument("--run-root", default="runs")
    pipeline_options(q, profile=False)
    execution_options(q)
    q.set_defaults(fn=cmd_resume)

    q = sub.add_parser("status", help="table of a run's stages: state, duration, output model, MLflow run")
    q.add_argument("run", nargs="?", help="run id (default: the latest)")
    q.add_argument("--run-root", default="runs")
    q.set_defaults(fn=cmd_status)

    q = sub.add_parser("ui", help="open Prefect's and MLflow's UIs for a run (prints both URLs)")
    q.add_argument("run", nargs="?", help="run id (default: the latest)")
    q.add_argument("--run-root", default="runs")
    q.add_argument("--for", dest="seconds", type=float, help="stop after this many seconds (default: Ctrl-C)")
    q.set_defaults(fn=cmd_ui)

    q = sub.add_parser("stages", help="list the pipeline's stages")
    pipeline_options(q)
    q.set_defaults(fn=cmd_stages)

    q = sub.add_parser("config", help="print the resolved, validated pipeline config")
    pipeline_options(q)
    q.set_defaults(fn=cmd_config)

    q = sub.add_parser("evaluate", help="evaluate a registered policy on fresh trials (success with 95%% CIs)")
    q.add_argument(
        "--model",
        required=True,
        help="models:/NAME/VERSION, models:/NAME/latest, models:/NAME@ALIAS, or stand-still (the trivial baseline: "
        "zero actions, the default pose held by PD, on the same trials). The deployable policy "
        "(llp-deployable-policy) runs its ONNX file in closed loop, as a robot would",
    )
    q.add_argument("--trials", type=int, help="trials per setting (default: the profile's stages.evaluate.trials)")
    q.add_argument("--seed", type=int, default=12345, help="seed of the trial plan")
    q.add_argument("--json", action="store_true", help="last line: the report as one JSON object")
    pipeline_options(q)
    q.set_defaults(fn=cmd_evaluate)

    b = sub.add_parser("bench", help="measure throughput (last line: one JSON object with --json)")
    b.add_argument("what", choices=["sim", "learner", "gpu", "rllib", "pipeline", "faults"])
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--robot", default="lightbot0_like", help="sim: robot config name (conf/robot/)")
    b.add_argument("--num-envs", type=int, default=64)
    b.add_argument("--steps", type=int, default=200, help="sim: policy steps per measurement")
    b.add_argument("--iterations", type=int, default=6,
                   help="rllib: training iterations per library; gpu: co-located iterations per env count")  # fmt: skip
    b.add_argument("--device", default=None,
                   help="learner: where the update runs; sim, gpu: where warp runs (cpu, cuda; gpu's default: cuda, "
                   "the others' cpu)")  # fmt: skip
    b.add_argument("--counts", default="4096,16384,32768", help="gpu: env counts to measure, comma-separated")
    b.add_argument("--backend", default="mujoco", help="sim: physics engine (mujoco, warp, isaaclab)")
    b.add_argument("--scenario", action="append", metavar="NAME",
                   help="faults: run only this scenario (repeatable; default: all)")  # fmt: skip
    b.set_defaults(fn=cmd_bench)

    v = sub.add_parser("play", help="render a video (MP4, optionally GIF) of a policy walking on one tile")
    v.add_argument("--model", required=True, help="models:/ URI of the policy, or stand-still")
    v.add_argument("--terrain", default="flat", help="tile type (default flat)")
    v.add_argument("--level", type=int, default=0, help="difficulty level of the tile")
    v.add_argument("--seconds", type=float, default=6.0, help="length of the clip (it ends early on a fall)")
    v.add_argument("--size", default="480x360", help="WIDTHxHEIGHT in pixels")
    v.add_argument("--out", required=True, help="MP4 path to write")
    v.add_argument("--gif", help="also write this GIF (half size, half frame rate)")
    v.add_argument("--seed", type=int, default=0)
    pipeline_options(v)
    v.set_defaults(fn=cmd_play)

    m = sub.add_parser("seeds", help="author the shipped motion seeds, check them, store them in a reference library")
    m.add_argument("names", nargs="*", help="seeds to author (default: all in conf/seeds/)")
    m.add_argument("--out", default="runs/references", help="library folder (default runs/references)")
    m.add_argument("--pictures", help="also write a PNG strip of key frames per seed into this folder")
    m.add_argument("--kinematic", action="store_true",
                   help="keep the keyframes' motion: skip driving seeds with a physics block through the simulator "
                        "(minutes each); for iterating on keyframes")  # fmt: skip
    m.set_defaults(fn=cmd_seeds)

    m = sub.add_parser("refs", help="table of a reference library's entries with their provenance")
    m.add_argument("library", help="library folder (as `llp seeds` writes it), or a pipeline run id")
    m.add_argument("--run-root", default="runs", help="where pipeline runs live (default runs)")
    m.add_argument("--lineage", metavar="ID", help="print one entry's chain of parents back to its seed")
    m.set_defaults(fn=cmd_refs)

    r = sub.add_parser(
        "render", help="write a PNG of a terrain layout, a depth image (clean, or beside the camera model's) or a gait"
    )
    r.add_argument("what", choices=["terrain", "depth", "depth-noise", "gait"])
    r.add_argument("--model", help="gait: models:/ URI of the policy, or stand-still")
    r.add_argument("--level", type=int, default=0, help="gait: difficulty level of the tile")
    r.add_argument("--out", required=True, help="PNG path to write")
    r.add_argument("--task", default="locomotion")
    r.add_argument("--tile-types", nargs="*", default=None, help="terrain: tile types (default: all)")
    r.add_argument("--tile-type", default="climb", help="depth, depth-noise, gait: the tile the robot stands on")
    r.add_argument("--seed", type=int, default=0)
    pipeline_options(r)
    r.set_defaults(fn=cmd_render)
    return p


def main(argv: list[str] | None = None) -> int:
    import signal

    # a terminated `llp run` still stops the servers it started and marks its run failed
    from llp.infra.processes import exit_on_sigterm

    signal.signal(signal.SIGTERM, exit_on_sigterm)
    args = build_parser().parse_args(argv)
    if not os.environ.get("RAY_ADDRESS") and not getattr(args, "cluster", None):
        # a local Ray listens on loopback only and asks for its token (read when ray is first imported, so set
        # here). Clusters keep their own settings.
        from llp.infra.ray_runtime import make_local_ray_private

        make_local_ray_private()
    from llp.config.schema import ConfigError

    try:
        return args.fn(args)
    except ConfigError as err:
        print(f"llp: config error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        if args.command in ("run", "resume", "submit", "ablate", "compare", "evaluate", "seeds", "refs", "play",
                            "render", "bench"):  # fmt: skip
            print(f"llp: {err}", file=sys.stderr)
            return 2
        raise
    except OSError as err:  # a full disk, a folder removed underneath: one line that names the file
        if args.command in ("run", "resume", "evaluate", "seeds", "refs", "play", "render"):
            where = f": {err.filename}" if err.filename else ""
            print(f"llp: {err.strerror or err}{where}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
