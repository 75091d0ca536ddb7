"""Card pictures of part 5 (25–27): the collectives at scale; each from what the notebook
saved with save_run.

25 the bytes each rank wrote for one all_reduce, per hand-built algorithm and gloo's own;
26 the loss curve: the run a dead rank stopped, the restart from the checkpoint, the
   reference run that never stopped;
27 the planner's predicted step time against the measured one, per configuration.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from matplotlib.patches import Rectangle

from tools.thumbnail_training import RANK_COLORS, _ranks
from tools.thumbnails import BAD, HEIGHT_PX, IDLE, MIN_FONT, OK, WIDTH_PX, canvas, legend, title

ALGORITHM_WORDS = {"ring": "ring", "tree": "tree", "double_tree": "double tree",
                   "halving_doubling": "halving-doubling", "library": "gloo's own"}


# --------------------------------------------------------------------------- 25
def algorithms_figure(data: Mapping[str, Any]) -> Any:
    """25: per algorithm, one bar per rank, its length the bytes the rank wrote (measured) in
    units of S, the tensor's size: the tree's imbalance and the ring's evenness side by side."""
    rows, n, size = data["bytes_rows"], int(data["world_size"]), float(data["S"])
    names = list(dict.fromkeys(row["algorithm"] for row in rows))
    fig, ax = canvas()
    title(fig, f"{n} ranks: bytes each rank wrote, in S")
    left, top = 190, 54
    pitch = (HEIGHT_PX - 50 - top) / len(names)
    peak = max(row["measured"] for row in rows) / size
    scale = (WIDTH_PX - left - 60) / max(peak, 1e-9)
    for i, name in enumerate(names):
        y = top + i * pitch
        ax.text(left - 10, y + pitch / 2, ALGORITHM_WORDS.get(name, name), fontsize=MIN_FONT,
                ha="right", va="center")
        mine = sorted((row for row in rows if row["algorithm"] == name), key=lambda r: r["rank"])
        bar = (pitch - 8) / max(len(mine), 1)
        for row in mine:
            width = row["measured"] / size * scale
            ax.add_patch(Rectangle((left, y + 4 + row["rank"] * bar), width, bar - 1,
                                   facecolor=RANK_COLORS[row["rank"] % len(RANK_COLORS)],
                                   edgecolor="none", gid=f"{name}:rank{row['rank']}"))
        most = max(row["measured"] for row in mine) / size
        ax.text(left + most * scale + 6, y + pitch / 2, f"{most:.2g}", fontsize=MIN_FONT,
                va="center")
    legend(ax, [(RANK_COLORS[r % len(RANK_COLORS)], f"rank {r}") for r in range(min(n, 4))],
           HEIGHT_PX - 20)
    return fig


# --------------------------------------------------------------------------- 26
def checkpoints_figure(data: Mapping[str, Any]) -> Any:
    """26: the loss per step of the reference run (never stopped), the run a rank's death
    cut short, and the run restarted from the checkpoint on another world size."""
    reference, interrupted = data["reference"], data["interrupted"]
    resumed = _ranks(data)[0]["resumed"]
    first = len(reference) - len(resumed)
    fig, ax = canvas()
    title(fig, f"{data.get('saved_world_size')} ranks, one dies: {data.get('world_size')} resume")
    left, top, right, bottom = 40, 60, WIDTH_PX - 30, HEIGHT_PX - 56
    low, high = min(reference + interrupted + resumed), max(reference + interrupted + resumed)
    span = max(high - low, 1e-12)

    def point(step: int, loss: float) -> tuple[float, float]:
        x = left + (right - left) * step / max(len(reference) - 1, 1)
        return x, bottom - (bottom - top) * (loss - low) / span

    ax.plot(*zip(*(point(s, v) for s, v in enumerate(reference))), color=IDLE, lw=6,
            gid="reference")
    ax.plot(*zip(*(point(s, v) for s, v in enumerate(interrupted))), "o-", color=BAD, ms=9,
            lw=2, gid="interrupted")
    ax.plot(*zip(*(point(first + s, v) for s, v in enumerate(resumed))), "s--", color=OK,
            ms=9, lw=2, gid="resumed")
    x_dead, y_dead = point(len(interrupted), interrupted[-1])
    ax.text(x_dead, y_dead - 18, "✗", color=BAD, fontsize=MIN_FONT + 4, ha="center")
    legend(ax, [(IDLE, "never stopped"), (BAD, "a rank died"),
                (OK, f"resumed at step {first}")], HEIGHT_PX - 20)
    return fig


# --------------------------------------------------------------------------- 27
def planning_figure(data: Mapping[str, Any]) -> Any:
    """27: per configuration run here, the predicted step time and the measured one as two
    bars on one scale, labelled with measured / predicted."""
    rows = data["errors"]
    fig, ax = canvas()
    title(fig, f"{data.get('world_size')} ranks: predicted vs measured step")
    left, top = 130, 54
    pitch = (HEIGHT_PX - 50 - top) / len(rows)
    peak = max(max(r["time predicted us"], r["time measured us"]) for r in rows)
    scale = (WIDTH_PX - left - 90) / max(peak, 1e-9)
    for i, row in enumerate(rows):
        y = top + i * pitch
        ax.text(left - 10, y + pitch / 2, row["config"], fontsize=MIN_FONT, ha="right",
                va="center")
        half = (pitch - 8) / 2
        for k, (key, color) in enumerate((("time predicted us", "#4c72b0"),
                                          ("time measured us", "#dd8452"))):
            ax.add_patch(Rectangle((left, y + 4 + k * half), row[key] * scale, half - 1,
                                   facecolor=color, edgecolor="none",
                                   gid=f"{row['config']}:{key.split()[1]}"))
        end = max(row["time predicted us"], row["time measured us"]) * scale
        ax.text(left + end + 6, y + pitch / 2, f"×{row['ratio']:.2f}", fontsize=MIN_FONT,
                va="center")
    legend(ax, [("#4c72b0", "predicted"), ("#dd8452", "measured")], HEIGHT_PX - 20)
    return fig


DRAWINGS: dict[str, Callable[[dict], Any]] = {
    "25_algorithms": algorithms_figure,
    "26_checkpoints_failures": checkpoints_figure,
    "27_planning": planning_figure,
}
