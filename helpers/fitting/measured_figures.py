"""Notebook 23's figures of what the ranks measured in its pitfalls and its compression
hooks: a wrongly scaled gradient against the reference, how each rank ended when only rank 0
skipped the sync, the bytes each hook sent and the size of each of its calls."""
from __future__ import annotations

import re
from typing import Any, Sequence

from matplotlib.figure import Figure

from helpers.training.schemes import INK, MUTED, rank_colour

_CALL_COLOURS = ["#93c5fd", "#fde68a", "#fca5a5"]     # a hook's 1st, 2nd and 3rd call


def hook_label(hook: str) -> str:
    """A hook's name with PowerSGD's rank named as such ("powerSGD_hook rank 2" →
    "powerSGD_hook, PowerSGD rank 2"), beside the process ranks of the same figure."""
    return hook.replace("_hook rank ", "_hook, PowerSGD rank ")


def _figure(width: float, height: float) -> Figure:
    """A pyplot figure, closed: shown once, as the value of the cell that draws it."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width, height), dpi=100)
    plt.close(fig)
    return fig


def plot_scaled_grads(grads: Sequence[Sequence[float]], reference: Sequence[float],
                      k: int) -> Figure:
    """One panel per rank: each entry of that rank's gradient (y) against the same entry
    of the single-process reference (x), with the lines y = x and y = k·x."""
    n = len(grads)
    fig = _figure(7.9, 2.7)
    ref = [float(v) for v in reference]
    lo, hi = min(ref), max(ref)
    span = [lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo)]
    width = 0.84 / n
    for rank, grad in enumerate(grads):
        ax = fig.add_axes([0.08 + rank * width, 0.2, width - 0.035, 0.62])
        ax.plot(span, span, color=MUTED, linewidth=1, linestyle="--", label="y = x: right")
        ax.plot(span, [k * s for s in span], color=INK, linewidth=1, label=f"y = {k}·x")
        ax.scatter(ref, [float(v) for v in grad], s=6, color=rank_colour(rank), zorder=3)
        ax.set_title(f"rank {rank}", fontsize=10, color=rank_colour(rank))
        ax.set_xlabel("reference", fontsize=8)
        ax.tick_params(labelsize=7.5)
        if rank == 0:
            ax.set_ylabel("this rank's gradient", fontsize=8)
        else:
            ax.set_yticklabels([])
    fig.legend(*fig.axes[0].get_legend_handles_labels(), loc="upper center", ncol=2,
               fontsize=8, frameon=False, bbox_to_anchor=(0.5, 1.0))
    return fig


def outcome_rows(outcomes: Sequence[Any]) -> list[dict[str, Any]]:
    """run_disposable's outcomes as {"rank", "seconds", "what"}: returned, or its error."""
    rows = []
    for o in outcomes:
        if o.error is not None:
            what = re.sub(r"\[[^\]]*\]\s*", "", o.error.split(" This is")[0])   # gloo's file
            what = f"raised: {what}"
        elif o.returncode == 0:
            what = "returned its gradient"
        else:
            what = o.summary().split(": ", 1)[1]
        rows.append({"rank": o.rank, "seconds": o.seconds or 0.0, "what": what[:80]})
    return rows


def plot_outcomes(rows: Sequence[dict[str, Any]], title: str) -> Figure:
    """One bar per rank: how long its case ran, and how it ended (written after the bar)."""
    n = len(rows)
    fig = _figure(7.9, 0.75 + 0.36 * n)
    ax = fig.add_axes([0.08, 0.8 / (0.75 + 0.36 * n), 0.9, 0.36 * n / (0.75 + 0.36 * n)])
    longest = max(r["seconds"] for r in rows) or 1.0
    for i, r in enumerate(rows):
        ax.barh(i, r["seconds"], 0.6, color=rank_colour(r["rank"], light=True),
                edgecolor=rank_colour(r["rank"]))
        ax.text(r["seconds"] + 0.01 * longest, i, f"{r['seconds']:.1f} s · {r['what']}",
                va="center", fontsize=8, color=INK)
    ax.set_yticks(range(n), [f"rank {r['rank']}" for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, longest * 3.0)
    ax.set_xlabel("seconds in the case, this run", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.set_title(title, fontsize=10)
    return fig


def plot_hook_bytes(tables: Sequence[Sequence[dict[str, Any]]], baseline: str,
                    title: str) -> Figure:
    """Per hook, the bytes each rank measured in one backward pass (a bar per rank), the
    ring model (a dashed tick) and rank 0's measured share of `baseline`'s."""
    hooks = [r["hook"] for r in tables[0]]
    n = len(tables)
    fig = _figure(7.9, 0.9 + 0.42 * len(hooks))
    ax = fig.add_axes([0.34, 0.75 / (0.9 + 0.42 * len(hooks)), 0.5,
                       0.42 * len(hooks) / (0.9 + 0.42 * len(hooks))])
    width = 0.8 / n
    for rank, rows in enumerate(tables):
        ys = [i + (rank - (n - 1) / 2) * width for i in range(len(rows))]
        ax.barh(ys, [(r["measured"] or 0) / 1e3 for r in rows], width,
                color=rank_colour(rank), label=f"rank {rank}")
    base = next(r["measured"] for r in tables[0] if r["hook"] == baseline)
    top = max((r["measured"] or 0) for rows in tables for r in rows) / 1e3
    for i, r in enumerate(tables[0]):
        ax.vlines(r["model"] / 1e3, i - 0.45, i + 0.45, color=INK, linestyle="--",
                  label="model (ring)" if i == 0 else None)
        if r["measured"] and base:
            ax.text(top * 1.04, i, f"× {r['measured'] / base:.3f}", va="center", fontsize=8,
                    color=MUTED)
    ax.set_yticks(range(len(hooks)), [hook_label(h) for h in hooks], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.25)
    ax.set_xlabel(f"kB each rank sent, measured (× : rank 0's share of {baseline}'s)",
                  fontsize=8)
    ax.tick_params(labelsize=8)
    ax.set_title(title, fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return fig


def plot_call_sizes(sizes: dict[str, Sequence[int]], title: str) -> Figure:
    """Per hook, its calls' sizes S end to end (one segment per call, its bytes inside
    where they fit); a hook with no counted call is DDP's own all_reduce, sent from C++."""
    hooks = list(sizes)
    fig = _figure(7.9, 0.8 + 0.38 * len(hooks))
    ax = fig.add_axes([0.34, 0.6 / (0.8 + 0.38 * len(hooks)), 0.62,
                       0.38 * len(hooks) / (0.8 + 0.38 * len(hooks))])
    top = max(sum(s) for s in sizes.values()) or 1
    for i, hook in enumerate(hooks):
        left = 0
        for j, s in enumerate(sizes[hook]):
            ax.barh(i, s, 0.6, left=left, color=_CALL_COLOURS[j % len(_CALL_COLOURS)],
                    edgecolor=INK, linewidth=0.8)
            if s / top > 0.09:                        # 0.66 × 7.9 in × 0.09: ≈ 47 px
                ax.text(left + s / 2, i, f"{s:,}", ha="center", va="center", fontsize=7.5,
                        color=INK)
            left += s
        if not sizes[hook]:
            ax.text(0.01 * top, i, "no call counted: DDP's all_reduce, from C++",
                    va="center", fontsize=8, color=MUTED)
    ax.set_yticks(range(len(hooks)), [hook_label(h) for h in hooks], fontsize=8)
    ax.set_ylim(len(hooks) - 0.5, -0.5)
    ax.set_xlim(0, top * 1.02)
    ax.set_xlabel("S of each call, in bytes, end to end (call 1 · call 2 · call 3)",
                  fontsize=8)
    ax.tick_params(labelsize=8)
    ax.set_title(title, fontsize=10)
    return fig
