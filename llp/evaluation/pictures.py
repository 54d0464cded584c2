"""The evaluation report as a picture: success per setting with Wilson 95% intervals, and the tracking kernel
beside a standing robot's."""

from __future__ import annotations


def success_figure(report: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = report["settings"]
    labels = [f"{r['tile_type']}\n{r['difficulty']}" for r in rows]
    rate = np.array([r["success_rate"] for r in rows])
    low = np.array([r["success_ci95"][0] for r in rows])
    high = np.array([r["success_ci95"][1] for r in rows])
    types = list(dict.fromkeys(r["tile_type"] for r in rows))
    colours = plt.get_cmap("tab10")
    colour = [colours(types.index(r["tile_type"]) % 10) for r in rows]
    x = np.arange(len(rows))
    fig, (ax, ax2) = plt.subplots(
        2, 1, figsize=(max(6.0, 0.55 * len(rows) + 2), 6.5), gridspec_kw={"height_ratios": [2, 1]}
    )
    ax.bar(x, 100 * rate, color=colour)
    ax.errorbar(x, 100 * rate, yerr=[100 * (rate - low), 100 * (high - rate)], fmt="none", ecolor="k", capsize=3)
    for xi, r in zip(x, rows):
        ax.text(
            xi,
            102,
            f"n={r['outcomes']['success'] + sum(v for k, v in r['outcomes'].items() if k != 'success')}",
            ha="center",
            fontsize=6,
            rotation=90,
            va="bottom",
        )
    ax.set_ylim(0, 118)
    ax.set_ylabel("success %  (Wilson 95% CI)")
    ax.set_xticks(x, labels, fontsize=6, rotation=90)
    ax.set_title(
        f"{report.get('model', '')}: {report['trials']} trials, success {100 * report['success_rate']:.1f}%, "
        f"falls {100 * report['fall_rate']:.1f}%",
        fontsize=9,
    )
    ax.grid(axis="y", alpha=0.3)
    kern = [r["tracking_kernel"] for r in rows]
    stand = [r["standing_tracking_kernel"] for r in rows]
    ax2.bar(x - 0.2, kern, 0.4, label="policy", color="tab:blue")
    ax2.bar(x + 0.2, stand, 0.4, label="standing still", color="tab:gray")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("tracking kernel")
    ax2.set_xticks(x, labels, fontsize=6, rotation=90)
    ax2.legend(fontsize=7, loc="upper right")
    ax2.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def gait_strip(env, policy, tile_type: str, level: int, seconds: float = 4.0, every: int = 10, speed: float = 0.5):
    """Side view of one robot walking straight ahead at ``speed`` on a ``tile_type`` tile: a stick figure every
    ``every`` policy steps, drawn where it was, over the terrain profile it walked on. Returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import torch

    types = list(env.cfg.terrain.tile_types)
    env.reseed(0)
    obs = env.assign_tiles(np.array([0]), np.array([types.index(tile_type)]), np.array([level]))
    start = env.course_state()
    yaw = start["yaw"][0]
    env.command_envs(np.array([0]), np.array([[speed, 0.0]]), np.array([yaw]))
    obs = env.observe()
    direction = np.array([np.cos(yaw), np.sin(yaw)])
    spawn = start["xy"][0]
    xpos = env.batch.bind("xpos")
    parents = env.model.body_parentid
    robot = list(range(1, env.model.nbody))  # the terrain is static geometry of the world body
    feet = env.scene.foot_sites
    ankles = [b for b in robot if env.model.body(b).name in env.cfg.robot.foot_bodies]
    frames, fell = [], False
    memory = policy.initial_memory(1)
    steps = int(round(seconds / env.dt))
    with torch.no_grad():
        for step in range(1, steps + 1):
            action, memory, _ = policy.step(policy.observe(obs), memory)
            result = env.step(action)
            if bool(result.terminated[0] | result.truncated[0]):
                fell = bool(result.terminated[0])
                break
            if step % every == 1:  # body positions as the physics step left them (before any reset)
                frames.append((xpos[0].copy(), env.site_xpos[0, feet].copy()))
            obs = result.obs
    along = lambda p: (p[..., 0:2] - spawn) @ direction  # noqa: E731
    fig, ax = plt.subplots(figsize=(12, 3.2))
    reach = max(float(along(frames[-1][0][1])) + 1.0, 1.5)
    s = np.linspace(-0.5, reach, 600)
    ground = env.terrain.height_at(spawn[None, :] + s[:, None] * direction[None, :])
    ax.fill_between(s, ground.min() - 0.2, ground, color="0.75", zorder=0)
    colours = plt.get_cmap("viridis")(np.linspace(0.1, 0.9, len(frames)))
    for (bodies, soles), colour in zip(frames, colours):
        for b in robot:
            p = parents[b]
            if p == 0:
                continue
            ax.plot(along(bodies[[p, b]]), bodies[[p, b], 2], color=colour, lw=1.6)
        for a, sole in zip(ankles, soles):
            ax.plot(along(np.stack([bodies[a], sole])), [bodies[a][2], sole[2]], color=colour, lw=1.6)
    distance = float(along(frames[-1][0][1]))
    outcome = f"{distance:.2f} m in {(len(frames) - 1) * every * env.dt:.1f} s" + (", then fell" if fell else "")
    ax.set_title(f"{tile_type} level {level}: command {speed} m/s straight ahead; {outcome}", fontsize=9)
    ax.set_xlim(-0.5, reach)
    ax.set_aspect("equal")
    ax.set_xlabel("distance along the command (m)")
    ax.set_ylabel("height (m)")
    fig.tight_layout()
    return fig


def comparison_figure(reports: dict[str, dict]):
    """Several policies on the same trials: success per tile type (Wilson 95% intervals), one bar per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(reports)
    types = list(next(iter(reports.values()))["by_type"])
    x = np.arange(len(types) + 1)
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(x) + 2), 3.8))
    for k, who in enumerate(names):
        rows = [reports[who]["by_type"][t] for t in types] + [reports[who]]
        rate = np.array([r["success_rate"] for r in rows])
        low = np.array([r["success_ci95"][0] for r in rows])
        high = np.array([r["success_ci95"][1] for r in rows])
        pos = x - 0.4 + width * (k + 0.5)
        ax.bar(pos, 100 * rate, width, label=who)
        ax.errorbar(pos, 100 * rate, yerr=[100 * (rate - low), 100 * (high - rate)], fmt="none", ecolor="k",
                    capsize=2, lw=0.8)  # fmt: skip
    n = next(iter(reports.values()))["trials"]
    ax.set_xticks(x, [*types, "all"], fontsize=8, rotation=30)
    ax.set_ylim(0, 105)
    ax.set_ylabel("success %  (Wilson 95% CI)")
    ax.set_title(f"the same {n} fresh trials for each policy")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
