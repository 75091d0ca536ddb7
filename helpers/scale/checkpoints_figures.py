"""Notebook 26's figures: the rows each rank holds before and after the reload (our own
drawing, from the run's pulls), and the loss curves of the interrupted, restarted and
uninterrupted runs."""
from __future__ import annotations

from typing import Any, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers.training.schemes import INK, MUTED, rank_colour


def _figure(width: float, height: float) -> Figure:
    """A pyplot figure, closed: shown once, as the value of the cell that draws it."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width, height), dpi=100)
    plt.close(fig)
    return fig


def draw_resharding(before: Sequence[dict[str, tuple[int, int]]],
                    after: Sequence[dict[str, tuple[int, int]]],
                    shapes: dict[str, tuple[int, ...]]) -> Figure:
    """One bar per parameter and world size: its dim-0 rows, coloured by the rank that
    holds them (`before`/`after`: rows_held of every rank; `shapes`: full shapes)."""
    names = list(shapes)
    fig = _figure(8, 0.9 + 0.75 * len(names))
    ax = fig.add_axes([0.17, 0.10, 0.80, 0.72])
    y = 0.0
    ticks, labels = [], []
    for name in names:
        rows = shapes[name][0]
        for tag, held in ((f"saved · {len(before)} ranks", before),
                          (f"loaded · {len(after)} ranks", after)):
            for rank, h in enumerate(held):
                a, b = h[name]
                if b <= a:
                    continue
                ax.add_patch(Rectangle((a / rows, y), (b - a) / rows, 0.8,
                                       facecolor=rank_colour(rank, light=True),
                                       edgecolor=rank_colour(rank), linewidth=1.2))
                ax.text((a + b) / 2 / rows, y + 0.4, f"r{rank}\n{a}–{b - 1}", ha="center",
                        va="center", fontsize=7.5, color=INK)
            ticks.append(y + 0.4)
            labels.append(f"{name} {tuple(shapes[name])}\n{tag}")
            y += 1.0
        y += 0.4
    ax.set_xlim(0, 1)
    ax.set_ylim(y - 0.4, -0.2)
    ax.set_yticks(ticks, labels, fontsize=7.5)
    ax.set_xticks([0, 0.5, 1], ["row 0", "half", "last row"], fontsize=8)
    ax.set_title("which rows of each parameter each rank holds (Adam's state: the same rows)",
                 fontsize=10)
    return fig


def plot_losses(interrupted: Sequence[float], resumed: Sequence[float],
                reference: Sequence[float], save_at: int, kill_at: int,
                no_optimizer: Sequence[float] | None = None) -> Figure:
    """Loss before each step: the run that died, the restart from the checkpoint, the
    one process that never stopped (and, if given, a restart without Adam's state)."""
    fig = _figure(8, 3.6)
    ax = fig.add_axes([0.09, 0.15, 0.60, 0.72])
    ax.plot(range(len(reference)), reference, color=MUTED, linewidth=4, alpha=0.45,
            label="one process, never stopped")
    ax.plot(range(len(interrupted)), interrupted, "o-", color=rank_colour(0),
            label=f"run 1 (a rank died in step {kill_at})")
    ax.plot(range(save_at, save_at + len(resumed)), resumed, "s--", color=rank_colour(1),
            label=f"run 2, from the checkpoint of step {save_at}")
    if no_optimizer is not None:
        ax.plot(range(save_at, save_at + len(no_optimizer)), no_optimizer, "^:",
                color=rank_colour(3), label="run 2 without Adam's state (pitfall)")
    ax.axvline(save_at - 0.5, color=INK, linestyle=":", linewidth=1)
    ax.text(save_at - 0.45, max(reference), " checkpoint", fontsize=8, va="top")
    ax.axvline(kill_at, color="#b91c1c", linestyle=":", linewidth=1)
    ax.text(kill_at + 0.05, max(reference) * 0.8, " rank dies", fontsize=8, color="#b91c1c")
    ax.set_xlabel("step")
    ax.set_ylabel("loss before the step (whole batch)")
    ax.set_title("the restarted run continues the curve", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    return fig


def plot_save_times(rows: Sequence[dict[str, dict[str, Any]]]) -> Figure:
    """Per rank and per state size: milliseconds the training loop was blocked by dcp.save,
    by dcp.async_save, and until async_save's future completed. `rows`: one dict per rank,
    {size label: {"save_s": ..., "async_blocked_s": ..., "async_done_s": ...}}."""
    sizes = list(rows[0])
    fig = _figure(8, 3.2)
    keys = [("save_s", "dcp.save\n(blocked)"), ("async_blocked_s", "async_save\n(blocked)"),
            ("async_done_s", "async_save\n(until written)")]
    width = 0.8 / len(rows)
    panel = 0.74 / len(sizes)
    for i, size in enumerate(sizes):
        ax = fig.add_axes([0.08 + i * (panel + 0.06), 0.2, panel - 0.02, 0.66])
        for rank, r in enumerate(rows):
            xs = [j + (rank - (len(rows) - 1) / 2) * width for j in range(len(keys))]
            ax.bar(xs, [r[size][k] * 1e3 for k, _ in keys], width, color=rank_colour(rank),
                   label=f"rank {rank}")
        ax.set_xticks(range(len(keys)), [label for _, label in keys], fontsize=8)
        ax.set_ylabel("milliseconds (this run)", fontsize=8)
        ax.set_title(f"state: {size}", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    return fig
