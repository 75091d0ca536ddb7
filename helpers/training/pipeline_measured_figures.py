"""Notebook 18's figures of measured numbers beside the timelines (pipeline_figures): where
a step's time went at each m, how many micro-batches each rank held, and the bytes each
stage sent (the model's payload, and what gloo's framing adds at each m)."""
from __future__ import annotations

from typing import Mapping, Sequence

from helpers.figures.column import COLUMN_IN
from helpers.training.pipeline import COLOURS

TEXT_PT = 8                      # 11 px on the page
SCHEDULE_COLOURS = {"GPipe": "#4c72b0", "1F1B": "#dd8452"}


def plot_step_split(table: Sequence[Mapping], title: str):
    """One panel per schedule, a stacked bar per m: forward + backward, send and recv, and
    the rest of the step (idle), each the mean over the ranks (`bubble_table` rows with
    "schedule", "m", "step_ms", "compute_ms", "transfer_ms")."""
    import matplotlib.pyplot as plt

    schedules = list(dict.fromkeys(row["schedule"] for row in table))
    fig, axes = plt.subplots(1, len(schedules), sharey=True, squeeze=False,
                             figsize=(COLUMN_IN, 3.3))
    parts = (("forward + backward", "compute_ms", COLOURS["forward"]),
             ("send and recv", "transfer_ms", COLOURS["send"]))
    for ax, name in zip(axes[0], schedules):
        rows = sorted((r for r in table if r["schedule"] == name), key=lambda r: r["m"])
        x = range(len(rows))
        bottom = [0.0] * len(rows)
        for label, key, colour in parts:
            values = [r[key] for r in rows]
            ax.bar(x, values, 0.7, bottom=bottom, color=colour, label=label)
            bottom = [b + v for b, v in zip(bottom, values)]
        rest = [max(r["step_ms"] - b, 0.0) for r, b in zip(rows, bottom)]
        ax.bar(x, rest, 0.7, bottom=bottom, facecolor="white", edgecolor="grey",
               label="rest of the step (idle)")
        for i, r in enumerate(rows):
            ax.text(i, max(r["step_ms"], bottom[i]), f"{r['step_ms']:.0f}", ha="center",
                    va="bottom", fontsize=TEXT_PT)
        ax.set_xticks(list(x), [str(r["m"]) for r in rows], fontsize=TEXT_PT)
        ax.set_xlabel("micro-batches m", fontsize=TEXT_PT + 1)
        ax.set_title(f"{name}: ms per step (mean over the ranks)", fontsize=10)
        ax.tick_params(axis="y", labelsize=TEXT_PT)
    axes[0, 0].set_ylabel("ms", fontsize=TEXT_PT + 1)
    top = max(max(r["step_ms"], r["compute_ms"] + r["transfer_ms"]) for r in table)
    axes[0, 0].set_ylim(0, top * 1.12)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=TEXT_PT + 0.5,
               frameon=False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def plot_in_flight(peaks: Mapping[str, Sequence[int]], m: int, title: str):
    """A pair of bars per rank: the most micro-batches it held in flight in each schedule
    ({schedule: [peak of each rank]}), the value on each bar."""
    import matplotlib.pyplot as plt

    n_ranks = max(len(v) for v in peaks.values())
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 2.5))
    width = 0.8 / len(peaks)
    for k, (name, per_rank) in enumerate(peaks.items()):
        xs = [r - 0.4 + (k + 0.5) * width for r in range(len(per_rank))]
        ax.bar(xs, per_rank, width * 0.9, color=SCHEDULE_COLOURS.get(name, f"C{k}"),
               label=name)
        for x, value in zip(xs, per_rank):
            ax.text(x, value, str(value), ha="center", va="bottom", fontsize=TEXT_PT)
    ax.set_xticks(range(n_ranks), [f"rank {r} (stage {r})" for r in range(n_ranks)],
                  fontsize=TEXT_PT)
    ax.set_ylabel("micro-batches in flight", fontsize=TEXT_PT + 1)
    ax.set_ylim(0, max(m, max(max(v) for v in peaks.values())) * 1.2)
    ax.tick_params(axis="y", labelsize=TEXT_PT)
    ax.legend(fontsize=TEXT_PT, ncol=len(peaks), loc="lower left",
              bbox_to_anchor=(0.0, 1.0), frameon=False)
    fig.suptitle(title, x=0.99, ha="right", fontsize=10)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def plot_stage_bytes(traffic_by_rank: Sequence[Sequence[Mapping]], title: str):
    """Left: the model's bytes each stage sends per step (S a send, the same at every m).
    Right, where measured: what the stage's process wrote beyond the model at each m, per
    stage, GPipe filled and 1F1B hollow (`p2p_counts` rows with "schedule" and "m")."""
    import matplotlib.pyplot as plt

    measured = all(row["measured"] is not None for rows in traffic_by_rank for row in rows)
    fig, axes = plt.subplots(1, 2 if measured else 1, squeeze=False,
                             figsize=(COLUMN_IN, 2.9), width_ratios=[1, 1.6][:1 + measured])
    ax = axes[0, 0]
    models = [max(row["model"] for row in rows) / 2**20 for rows in traffic_by_rank]
    ax.bar(range(len(models)), models, 0.6, color="grey")
    for r, value in enumerate(models):
        ax.text(r, value, f"{value:.1f}", ha="center", va="bottom", fontsize=TEXT_PT)
    ax.set_xticks(range(len(models)), [f"stage {r}" for r in range(len(models))],
                  fontsize=TEXT_PT)
    ax.set_ylim(0, max(models) * 1.2)
    ax.set_ylabel("MiB per step (model)", fontsize=TEXT_PT + 1)
    ax.set_title("payload, any m (model)", fontsize=10)
    ax.tick_params(axis="y", labelsize=TEXT_PT)
    if measured:
        ax = axes[0, 1]
        series: dict[tuple, list[int]] = {}     # stages that wrote the same: one line
        for r, rows in enumerate(traffic_by_rank):
            mine = sorted(rows, key=lambda row: (row["schedule"], row["m"]))
            key = tuple((row["schedule"], row["m"], row["measured"] - row["model"])
                        for row in mine)
            series.setdefault(key, []).append(r)
        for k, (key, stages) in enumerate(series.items()):
            for name, marker, fill in (("GPipe", "o", f"C{k}"), ("1F1B", "s", "none")):
                points = [(m, extra) for schedule, m, extra in key if schedule == name]
                ax.plot(*zip(*points), marker=marker, color=f"C{k}", markerfacecolor=fill,
                        markersize=8 if fill == "none" else 4,
                        label=("stage " if len(stages) == 1 else "stages ")
                        + ", ".join(map(str, stages)) if name == "GPipe" else None)
        ms = sorted({row["m"] for row in traffic_by_rank[0]})
        ax.set_xticks(ms, [str(m) for m in ms], fontsize=TEXT_PT)
        ax.set_xlabel("micro-batches m", fontsize=TEXT_PT + 1)
        ax.set_ylabel("bytes beyond the model", fontsize=TEXT_PT + 1)
        ax.set_title("measured − model (● GPipe, □ 1F1B)", fontsize=10)
        ax.tick_params(axis="y", labelsize=TEXT_PT)
        ax.legend(fontsize=TEXT_PT, loc="upper left", frameon=False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
