"""Notebook 20's figures of what its ranks measured: the bytes of each block's collectives,
parallelize_module's bytes beside the hand-built block's, and each gradient's gap to one
process before and after the replicated gradients are summed.

Drawn from the values the notebook pulled (`log_row`s, `sp.grad_diffs`); rank colours of
14–20 (`helpers.training.schemes.rank_colour`).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from matplotlib.figure import Figure

from helpers.figures.column import COLUMN_IN
from helpers.training.sent_figures import plot_sent

SHORT = {"all_reduce": "all_reduce", "all_gather_single": "all_gather",
         "reduce_scatter_single": "reduce_scatter"}
FLOOR = 1e-20          # a gap of exactly 0 is drawn here, on the log axis


def _same(values: Sequence[float], what: str) -> float:
    if len(set(values)) != 1:
        raise ValueError(f"the ranks disagree on {what}: {list(values)}")
    return values[0]


def plot_traffic(rows_by_rank: Sequence[Sequence[dict]], title: str) -> Figure:
    """One group of bars per (block, phase, collective) of the `log_row`s: the calls' ring
    model, then each rank's measured bytes (None on NCCL)."""
    keys = [(row["layer"], row["phase"], name) for row in rows_by_rank[0]
            for name in row["collectives"]]

    def cell(rows: Sequence[dict], key: tuple[str, str, str]) -> dict:
        row = next(r for r in rows if (r["layer"], r["phase"]) == key[:2])
        return row["collectives"][key[2]]

    first = [cell(rows_by_rank[0], k) for k in keys]
    groups = [f"{layer}\n{phase}\n{c['calls']}× {SHORT.get(name, name)}"
              for (layer, phase, name), c in zip(keys, first)]
    model = [_same([cell(rows, k)["model"] for rows in rows_by_rank], "the model")
             for k in keys]
    measured = [[cell(rows, k)["measured"] for k in keys] for rows in rows_by_rank]
    return plot_sent(groups, model, measured, title, height_in=3.6)


def plot_torch_vs_hand(hand_by_rank: Sequence[Sequence[dict]],
                       torch_by_rank: Sequence[Sequence[dict]], title: str) -> Figure:
    """Per phase, the hand-built TP + SP block's calls then parallelize_module's (rows of
    `sp.against_hand`: the model of the calls it makes): model and each rank's bytes."""
    phases = [row["phase"] for row in torch_by_rank[0]]
    groups, model, measured = [], [], [[] for _ in hand_by_rank]
    for phase in phases:
        for who, by_rank in (("by hand", hand_by_rank), ("torch", torch_by_rank)):
            rows = [next(r for r in rows if r["phase"] == phase and
                         r["layer"] in ("TP + SP", "parallelize_module")) for rows in by_rank]
            groups.append(f"{phase}\n{who}\n{rows[0]['calls']} calls (model)")
            model.append(_same([r["model"] for r in rows], "the model"))
            for r, row in enumerate(rows):
                measured[r].append(row["measured"])
    return plot_sent(groups, model, measured, title, height_in=3.4)


def plot_grad_gaps(before: Sequence[Mapping[str, float]], after: Sequence[Mapping[str, float]],
                   replicated: Sequence[str], tolerance: float, title: str) -> Figure:
    """Each gradient's largest gap to one process's (`sp.grad_diffs`), every rank a marker:
    before the replicated gradients are summed (left), after (right); log scale, 0 drawn at
    FLOOR; the replicated parameters shaded, the check's tolerance dotted."""
    import matplotlib.pyplot as plt

    from helpers.training.schemes import rank_colour

    names = sorted(before[0], key=lambda k: (k not in replicated, k))
    fig, axes = plt.subplots(1, 2, figsize=(COLUMN_IN, 0.24 * len(names) + 1.6), dpi=100,
                             sharey=True)
    for ax, gaps, when in zip(axes, (before, after),
                              ("as they stand, before the sum", "after one all_reduce")):
        ax.axhspan(-0.5, len(replicated) - 0.5, color="#fdf1e4", zorder=0)
        ax.axvline(tolerance, color="#666666", ls=":", lw=1.2)
        for r, by_name in enumerate(gaps):
            ax.scatter([max(by_name[k], FLOOR) for k in names], range(len(names)),
                       s=22, marker="o" if r % 2 == 0 else "x", color=rank_colour(r),
                       label=f"rank {r}", zorder=3, gid=f"gap:{when}:{r}")
        ax.set_xscale("log")
        ax.set_xlim(FLOOR / 10, 1)
        ax.set_title(when, fontsize=9.5)
        ax.set_xlabel("largest gap to one process", fontsize=9)
        ax.tick_params(labelsize=8)
    axes[0].set_yticks(range(len(names)), names, fontsize=8)
    axes[0].set_ylim(len(names) - 0.5, -0.5)
    axes[0].text(0.02, len(replicated) - 0.7, "replicated", fontsize=8, color="#9a3412",
                 transform=axes[0].get_yaxis_transform())
    fig.legend(*axes[1].get_legend_handles_labels(), loc="lower center", ncol=len(before),
               fontsize=8.5, frameon=False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight(), 1, 1))
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


PART_COLOURS = {"compute": "#4c78a8", "communication": "#f58518", "waiting": "#bab0ac"}


def plot_bench_pairs(names: Sequence[str], title: str) -> Figure | None:
    """`make bench`'s profiled step of each pair (`helpers.bench.quote.training_row`), per
    rank: by hand and torch's, split into compute, communication and waiting (ms). None when
    no run has the pairs (the printed quote says so)."""
    import matplotlib.pyplot as plt

    from helpers.bench.quote import PARTS, training_row

    try:
        rows = [training_row(name)[0] for name in names]
    except LookupError:
        return None
    n = len(rows[0]["breakdown_per_rank"]["hand"])
    fig, axes = plt.subplots(1, len(rows), figsize=(COLUMN_IN, 0.5 * n + 1.5), dpi=100,
                             sharex=True, squeeze=False)
    for ax, name, row in zip(axes[0], names, rows):
        labels = []
        for i, (r, side) in enumerate((r, s) for r in range(n) for s in ("hand", "torch")):
            left = 0.0
            for part in PARTS:
                value = row["breakdown_per_rank"][side][r][part]
                ax.barh(i, value, left=left, height=0.8, color=PART_COLOURS[part],
                        label=part if i == 0 else None, gid=f"{name}:{side}:{r}:{part}")
                left += value
            labels.append(f"rank {r} {'by hand' if side == 'hand' else 'torch'}")
        ax.set_yticks(range(2 * n), labels, fontsize=8)
        ax.set_ylim(2 * n - 0.5, -0.5)
        ax.set_title(f"{name}: a step {row['step_ms']['hand']:.0f} ms by hand,\n"
                     f"{row['step_ms']['torch']:.0f} ms torch (by hand / torch ×{row['ratio']:.2f})",
                     fontsize=9)
        ax.set_xlabel("ms of a profiled step", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.spines[["top", "right"]].set_visible(False)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=3,
               fontsize=8.5, frameon=False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout(rect=(0, 0.3 / fig.get_figheight(), 1, 1))
    plt.close(fig)
    return fig


CALL_COLOURS = {"all_reduce": "#fde2e2", "all_gather_single": "#dbeafe",
                "reduce_scatter_single": "#dcfce7"}


def plot_call_order(orders: Sequence[Mapping[str, Sequence[str]]], title: str) -> Figure:
    """Per rank, a lane per block (TP, TP + SP): the collectives it called, in order, forward
    then backward (then the grad sync); orders: each rank's {"TP forward": [names], ...}."""
    from helpers.training.schemes import Canvas, rank_colour

    blocks = ("TP", "TP + SP")
    phases = ("forward", "backward", "grad sync")
    widths = {ph: max(len(o.get(f"{b} {ph}", [])) for o in orders for b in blocks)
              for ph in phases}
    left, bw, gap, lane = 3.4, 2.05, 0.8, 0.95
    x0 = {}
    x = left
    for ph in phases:
        x0[ph] = x
        x += widths[ph] * bw + gap
    c = Canvas(x, 1.1 + len(orders) * (2 * lane + 0.35), title,
               "each box one call, in the order this rank made it; blue all_gather, green "
               "reduce_scatter, red all_reduce")
    for ph in phases:
        if widths[ph]:
            c.text(x0[ph] + widths[ph] * bw / 2, 0.5, ph, size=9.5, bold=True)
    for r, order in enumerate(orders):
        for j, block in enumerate(blocks):
            y = 1.0 + r * (2 * lane + 0.35) + j * lane
            c.text(left - 0.15, y + lane / 2, f"rank {r} · {block}", ha="right", size=9,
                   colour=rank_colour(r))
            for ph in phases:
                for k, name in enumerate(order.get(f"{block} {ph}", [])):
                    c.box(x0[ph] + k * bw, y + 0.04, bw - 0.1, lane - 0.1,
                          SHORT.get(name, name).replace("_", "\n", 1),
                          face=CALL_COLOURS.get(name, "white"),
                          size=8, gid=f"call:{r}:{block}:{ph}:{k}:{name}")
    return c.fig


def plot_wrong_heads(states: Sequence[dict], title: str) -> Figure:
    """Per rank, each output value's error when the heads are counted from the DTensor's
    shape (y: wrong − right) against the right value (x); on the dotted line at 0 they
    agree. states: pulled "wrong_output" (None where the reshape failed), "torch_output"."""
    import matplotlib.pyplot as plt

    from helpers.training.schemes import rank_colour

    n = len(states)
    fig, axes = plt.subplots(1, n, figsize=(COLUMN_IN, 2.75), dpi=100, squeeze=False,
                             sharex=True, sharey=True)
    for r, (ax, s) in enumerate(zip(axes[0], states)):
        ax.set_title(f"rank {r}", fontsize=9, color=rank_colour(r))
        ax.set_xlabel("right output value", fontsize=8.5)
        ax.tick_params(labelsize=8)
        if s["wrong_output"] is None:
            ax.text(0.5, 0.5, "RuntimeError:\nno output", transform=ax.transAxes,
                    ha="center", fontsize=8.5)
            continue
        right = np.ravel(np.asarray(s["torch_output"], dtype=float))
        wrong = np.ravel(np.asarray(s["wrong_output"], dtype=float))
        ax.plot(right, wrong - right, ".", ms=2.5, color=rank_colour(r), gid=f"heads:{r}")
        ax.axhline(0, color="k", ls=":", lw=0.8)
    axes[0][0].set_ylabel("wrong − right", fontsize=8.5)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig
