"""What ■ did, rank by rank, on a time axis: the cell's end against each rank's own."""
from __future__ import annotations

from helpers.debugging.flight_figures import TORCH
from helpers.figures.grid import legend_below

FINISHED, STOPPED, PRESS, RETURN = "#12b76a", "#667085", "#d92d20", "#2e90fa"


def plot_interrupt(timeline: dict, title: str):
    """One row per rank: when it ran the interrupted cell (`interrupted.timeline`), green
    where it finished, orange where it waited in a collective until it raised; the moment
    ■ was pressed, the moment the cell returned, and the collective timeout as lines."""
    import matplotlib.pyplot as plt

    ranks = timeline["timeline"]
    world_size = len(ranks)
    fig = plt.figure(figsize=(9.0, 0.7 * world_size + 2.2), dpi=100)
    plt.close(fig)                       # made through pyplot so Jupyter shows it, once
    ax = fig.add_subplot()
    ends = [row["completed_s"] or 0 for row in ranks.values()]
    right = max(ends + [timeline["timeout_s"], timeline["elapsed_s"]]) * 1.12
    for row, (rank, found) in enumerate(sorted(ranks.items(), key=lambda kv: int(kv[0]))):
        began, ended = found["started_s"] or 0.0, found["completed_s"]
        finished = found["outcome"] == "ok"
        width = (ended if ended is not None else right) - began
        ax.barh(row, max(width, right / 150), left=began, height=0.55,
                color=FINISHED if finished else TORCH)
        said = "finished" if finished else found["outcome"] or "still running"
        at = began + max(width, 0)
        ax.text(min(at + right / 80, right * 0.99), row, said, va="center",
                ha="left" if at < right * 0.8 else "right", fontsize=10)
    marks = [(timeline.get("pressed_s"), PRESS, "■ pressed"),
             (timeline["elapsed_s"], RETURN, "the cell returned"),
             (timeline["timeout_s"], STOPPED, "collective timeout")]
    for x, colour, label in marks:
        if x is not None:
            ax.axvline(x, color=colour, linestyle="--", linewidth=1.5)
            ax.text(x, -0.75, label, color=colour, ha="center", fontsize=10)
    ax.set_yticks(range(world_size), [f"rank {r}" for r in sorted(map(int, ranks))],
                  fontsize=11)
    ax.set_ylim(world_size - 0.4, -1.1)
    ax.set_xlim(0, right)
    ax.set_xlabel("seconds since the cell was sent to the ranks", fontsize=10)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    legend_below(ax, [(FINISHED, "ran the cell to its end"),
                      (TORCH, "inside a collective, then raised")], fontsize=10)
    ax.legend_.set_bbox_to_anchor((0.5, -0.22))
    ax.set_title(title, fontsize=12, pad=12)
    return fig
