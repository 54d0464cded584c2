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
