"""Notebook 22's figures of what the ranks exchanged: the uneven split sizes of the
dispatch all_to_all_single, and the bytes each rank sent against the two models.

Every artist that carries a number has a gid ("split:1:3" = the rows rank 1 sends rank 3),
so that tests read the drawing back.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers.figures.animation import CONTENT_WIDTH_IN
from helpers.training.schemes import INK, MUTED, rank_colour


def plot_splits(states: Sequence[Mapping], title: str) -> Figure:
    """Row r: the rows rank r sends each rank (its `input_splits`); under each column, what
    that rank receives by them and what it expected (its `output_splits`), ✓ when equal."""
    import matplotlib.pyplot as plt

    n = len(states)
    sent = [list(s["input_splits"]) for s in states]
    if any(len(row) != n for row in sent):
        raise ValueError(f"every rank needs {n} input splits, got {sent}")
    top = max(max(row) for row in sent) or 1
    fig, ax = plt.subplots(figsize=(CONTENT_WIDTH_IN, 0.9 + 0.42 * n), dpi=100)
    for r in range(n):
        for s in range(n):
            rows = sent[r][s]
            shade = 0.25 + 0.75 * rows / top
            ax.add_patch(Rectangle((s + 0.04, r + 0.06), 0.92, 0.88, gid=f"split:{r}:{s}",
                                   facecolor=rank_colour(r, light=True), alpha=shade,
                                   edgecolor=rank_colour(r), lw=1.2))
            ax.text(s + 0.5, r + 0.5, f"{rows} rows", ha="center", va="center", fontsize=9,
                    color=INK)
        ax.text(n + 0.1, r + 0.5, f"sends {sum(sent[r])}", ha="left", va="center",
                fontsize=9, gid=f"sends:{r}")
    for s in range(n):
        got = sum(row[s] for row in sent)
        mark = "✓" if [row[s] for row in sent] == list(states[s]["output_splits"]) else "✗"
        ax.text(s + 0.5, n + 0.3, f"receives {got} {mark}", ha="center", va="top",
                fontsize=9, color=INK if mark == "✓" else "#d9534f", gid=f"receives:{s}")
    ax.set_xlim(0, n + 1.1)
    ax.set_ylim(n + 0.85, 0)
    ax.set_xticks([s + 0.5 for s in range(n)], [f"to rank {s}" for s in range(n)], fontsize=9)
    ax.xaxis.tick_top()
    ax.set_yticks([r + 0.5 for r in range(n)], [f"rank {r} sends" for r in range(n)],
                  fontsize=9)
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.set_title(title, loc="left", fontsize=10.5)
    ax.text(n + 0.1, n + 0.3, "✓ = its output_splits", ha="left", va="top", fontsize=9,
            color=MUTED)
    fig.tight_layout()
    plt.close(fig)
    return fig


def _dots(ax, values: Sequence[Sequence[float | None]], marks: Sequence[tuple[str, str]],
          key: str) -> None:
    """One row per rank, one marker per value: (name, marker) of each column of values."""
    for r, per_rank in enumerate(values):
        for (name, mark), value in zip(marks, per_rank):
            if value is None:
                continue
            hollow = mark in "o^"
            ax.plot(value, r, mark, ms={"|": 16, "o": 12}.get(mark, 8), mew=2,
                    color=rank_colour(r), mfc="none" if hollow else rank_colour(r),
                    gid=f"{key}:{name}:{r}", label=name if r == 0 else None,
                    zorder=3 if mark == "x" else 2)
    ax.set_yticks(range(len(values)), [f"rank {r}" for r in range(len(values))], fontsize=9)
    ax.set_ylim(len(values) - 0.5, -0.7)
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="#eeeeee")
    ax.margins(x=0.1)
    ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:g}k")


def plot_bytes(rows_by_rank: Sequence[Mapping[str, Mapping]], title: str) -> Figure:
    """Per rank, for the two row exchanges: the even model (△), the model for the splits used
    (|) and gloo's measurement (■); and the training step's bytes measured, by hand (○) and
    by torch's function (x), forward and backward. `rows_by_rank[r][call]`: one
    `experts.exchange_row` of rank r."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(CONTENT_WIDTH_IN, 2.8), dpi=100, sharey=True)
    marks = (("even model", "^"), ("model", "|"), ("measured", "s"))
    for ax, call in zip(axes[:2], ("rows to experts", "results back")):
        _dots(ax, [[rows[call]["even_model"], rows[call]["model"], rows[call]["measured"]]
                   for rows in rows_by_rank], marks, call)
        ax.set_title(call, loc="left", fontsize=10)
    for name in ("forward", "backward"):
        values = [[rows[f"step {name}"]["measured"], rows[f"torch {name}"]["measured"]]
                  for rows in rows_by_rank]
        _dots(axes[2], values, (("by hand", "o"), ("torch", "x")), f"step {name}")
        for r, (hand, _) in enumerate(values):
            if hand is not None:
                axes[2].text(hand, r - 0.28, name[0] + "wd", ha="center", va="bottom",
                             fontsize=9, color=MUTED)
    axes[2].set_title("a training step, measured", loc="left", fontsize=10)
    for ax in axes:
        ax.set_xlabel("bytes sent", fontsize=9)
    fig.legend(handles=axes[0].get_legend_handles_labels()[0]
               + axes[2].get_legend_handles_labels()[0][:2],
               labels=[m for m, _ in marks] + ["by hand", "torch's function"],
               loc="upper left", bbox_to_anchor=(0.0, 0.93), ncol=5, frameon=False,
               fontsize=9, handletextpad=0.3, columnspacing=1.2)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.84), w_pad=0.8)
    plt.close(fig)
    return fig


def _buffer_row(ax, y: float, outcome) -> None:
    """One rank's receive buffer, each row in the colour of the rank it came from (NaN:
    written by nobody); or how the rank ended, where it returned nothing."""
    if outcome.result is None:
        how = (f"killed by {outcome.signal}" if outcome.killed else
               f"raised {outcome.error.split(':')[0]}" if outcome.error else "no result")
        ax.text(0.1, y + 0.5, how, ha="left", va="center", fontsize=9, color="#d9534f",
                fontweight="bold", gid=f"ended:{outcome.rank}")
        return
    for i, value in enumerate(outcome.result):
        nan = value != value
        ax.add_patch(Rectangle((i + 0.05, y + 0.1), 0.9, 0.8, gid=f"row:{outcome.rank}:{i}",
                               facecolor="#eeeeee" if nan else rank_colour(int(value), True),
                               edgecolor="#999999" if nan else rank_colour(int(value))))
        ax.text(i + 0.5, y + 0.5, "NaN" if nan else f"r{int(value)}", ha="center",
                va="center", fontsize=9, color="#d9534f" if nan else INK)


def plot_buffers(cases: Mapping[str, Sequence], title: str) -> Figure:
    """One panel per case (`cases[name]`: each rank's `RankOutcome`): what each rank's
    receive buffer held after the all_to_all_single, row by row."""
    import matplotlib.pyplot as plt

    n = max(len(outcomes) for outcomes in cases.values())
    width = max(len(o.result or []) for outcomes in cases.values() for o in outcomes)
    fig, axes = plt.subplots(1, len(cases), figsize=(CONTENT_WIDTH_IN, 0.9 + 0.34 * n),
                             dpi=100, squeeze=False)
    for ax, (name, outcomes) in zip(axes[0], cases.items()):
        for outcome in outcomes:
            _buffer_row(ax, outcome.rank, outcome)
        ax.set_xlim(0, max(width, 4))
        ax.set_ylim(n, 0)
        ax.set_yticks([r + 0.5 for r in range(n)], [f"rank {r}" for r in range(n)],
                      fontsize=9)
        ax.set_xticks([])
        ax.tick_params(length=0)
        ax.spines[:].set_visible(False)
        ax.set_title(name, loc="left", fontsize=10)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    plt.close(fig)
    return fig


def plot_losses(shares: Mapping[str, Sequence[float]], whole: float, title: str) -> Figure:
    """Each run's per-rank loss shares stacked (`shares[name][r]`), beside the
    single-process loss `whole` (a dashed line): the shares add up to it."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(CONTENT_WIDTH_IN, 1.0 + 0.45 * len(shares)), dpi=100)
    for y, (name, values) in enumerate(shares.items()):
        left = 0.0
        for r, value in enumerate(values):
            ax.barh(y, value, left=left, height=0.6, color=rank_colour(r, True),
                    edgecolor=rank_colour(r), gid=f"share:{name}:{r}")
            ax.text(left + value / 2, y, f"rank {r}: {value:.3f}", ha="center",
                    va="center", fontsize=9)
            left += value
        ax.text(left * 1.01, y, f"= {left:.6f}", ha="left", va="center", fontsize=9,
                gid=f"sum:{name}")
    ax.axvline(whole, color=INK, ls="--", lw=1)
    ax.text(whole, -0.55, f"one process: {whole:.6f}", ha="right", va="bottom", fontsize=9,
            color=MUTED)
    ax.set_yticks(range(len(shares)), list(shares), fontsize=9)
    ax.set_ylim(len(shares) - 0.5, -0.8)
    ax.set_xlim(0, whole * 1.22)
    ax.set_xlabel("loss: the ranks' shares, added", fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, loc="left", fontsize=10.5)
    fig.tight_layout()
    plt.close(fig)
    return fig
