"""Notebook 27's figures of the planner (models, or counts): one step's plan, the GPU options
ranked by step time with the memory each needs, the Llama 3 405B steps against the paper's,
the collectives counted at 1,024 ranks against the planner's, and the simulated ranks of
LocalTensorMode before and after an all_reduce."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from helpers.figures.column import finish

PARTS = ("parameters", "gradients", "optimizer state", "activations")
PART_COLOURS = ("#6baed6", "#9ecae1", "#fdae6b", "#bcbddc")
FITS, MISSES = "#31a354", "#bbbbbb"


def plot_options(options: Sequence[Mapping[str, Any]], hbm_gb: float, title: str):
    """The options in the order given (fastest first): the predicted step (s) in one panel,
    the memory a GPU needs split into its parts (GB) in the other, with the GPU's memory as a
    line; a configuration that does not fit is drawn grey."""
    n = len(options)
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 0.6 + 0.27 * n), sharey=True)
    y = np.arange(n)[::-1]
    for yi, o in zip(y, options):
        left.barh(yi, o["time_s"], 0.7, color=FITS if o["fits"] else MISSES)
        left.text(o["time_s"], yi, f" {o['time_s']:.1f} s", va="center", fontsize=9)
        start = 0.0
        for part, colour in zip(PARTS, PART_COLOURS):
            width = o["memory_parts"][part] / 1e9
            right.barh(yi, width, 0.7, left=start, color=colour, edgecolor="white", lw=0.4)
            start += width
    left.set_yticks(y, [o["config"] for o in options], fontsize=9)
    slowest = max(o["time_s"] for o in options)
    fastest = min(o["time_s"] for o in options)
    left.set_xlim(fastest * 0.95, slowest * 1.04)   # the options differ by a few per cent
    left.set_xlabel("step (s, model)", fontsize=9)
    right.axvline(hbm_gb, color="black", lw=1)
    right.text(hbm_gb, n - 0.4, f" {hbm_gb:g} GB", fontsize=9, va="bottom")
    right.set_xlabel("memory a GPU needs (GB, model)", fontsize=9)
    right.set_ylim(-0.6, n + 0.4)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (*PART_COLOURS, FITS, MISSES)]
    right.legend(handles, [*PARTS, "step: fits", "step: does not fit"], loc="upper left",
                 bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9)
    return finish(fig, (left, right), title)


def plot_published(published: Sequence[Mapping[str, Any]], title: str):
    """Per Llama 3 405B configuration of the paper's table 4: the FLOP a token (6N and
    attention's, stacked), and three steps: the one the paper's TFLOP/s imply with that count,
    with 6N alone, and the planner's (compute, the pipeline bubble, the collectives)."""
    fig, (flop, step) = plt.subplots(1, 2, figsize=(8, 3.9))
    x = np.arange(len(published))
    labels = [f"{r['gpus']:,} GPUs\n{r['seq'] // 1024}K a seq." for r in published]
    dense = np.array([r["dense_per_token"] for r in published]) / 1e12
    attention = np.array([r["attention_per_token"] for r in published]) / 1e12
    flop.bar(x, dense, 0.6, color="#6baed6", label="6N")
    flop.bar(x, attention, 0.6, bottom=dense, color="#fd8d3c", label="attention, 12·L·s·h")
    flop.set_xticks(x, labels, fontsize=9)
    flop.set_ylabel("TFLOP a token (model)", fontsize=9)
    flop.legend(loc="upper left", frameon=False, fontsize=9)
    flop.set_ylim(0, (dense + attention).max() * 1.45)
    w = 0.26
    step.bar(x - w, [r["paper_s"] for r in published], w, color="#444444",
             label="paper's TFLOP/s, 6N + attention")
    step.bar(x, [r["paper_6n_s"] for r in published], w, color="#999999",
             label="paper's TFLOP/s, 6N alone")
    compute = np.array([r["compute_s"] / r["bubble"] for r in published])
    bubble = np.array([r["compute_s"] for r in published]) - compute
    comm = np.array([r["comm_s"] for r in published])
    step.bar(x + w, compute, w, color="#6baed6", label="ours: compute")
    step.bar(x + w, bubble, w, bottom=compute, color="#c6dbef", label="ours: bubble")
    step.bar(x + w, comm, w, bottom=compute + bubble, color="#fdae6b",
             label="ours: collectives")
    step.set_xticks(x, labels, fontsize=9)
    step.set_ylabel("step (s, model)", fontsize=9)
    step.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False,
                fontsize=9)
    return finish(fig, (flop, step), title)


def plot_counts(counted: Mapping[str, Mapping[str, int]],
                planned: Mapping[str, Mapping[str, int]], title: str):
    """Per phase (the keys of `counted`): the calls of each collective CommDebugMode counted
    (bars), and the planner's (a black tick on each bar's place)."""
    kinds = sorted({k for d in (*counted.values(), *planned.values()) for k in d})
    colours = dict(zip(kinds, ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")))
    phases = list(counted)
    fig, ax = plt.subplots(figsize=(8, 2.9))
    w = 0.8 / len(kinds)
    for i, phase in enumerate(phases):
        for j, kind in enumerate(kinds):
            xj = i + (j - (len(kinds) - 1) / 2) * w
            ax.bar(xj, counted[phase].get(kind, 0), w * 0.9, color=colours[kind],
                   label=f"{kind} (CommDebugMode)" if i == 0 else None)
            ax.plot([xj - w * 0.45, xj + w * 0.45], [planned[phase].get(kind, 0)] * 2,
                    color="black", lw=2, label="planner" if i == 0 and j == 0 else None)
    ax.set_xticks(range(len(phases)), [p.replace(" ", "\n") for p in phases], fontsize=9)
    ax.set_ylabel("calls in the phase", fontsize=9)
    top = max(max(d.values(), default=0) for d in (*counted.values(), *planned.values()))
    ax.set_ylim(0, top * 1.15 + 0.5)
    ax.tick_params(labelsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_plan(plans: Mapping[str, Sequence[Mapping[str, Any]]], title: str):
    """One bar per (configuration, phase, collective) of one rank's plan: the bytes it sends
    in the ring model, labelled with the calls × S that give them."""
    rows = [(name, r) for name, plan in plans.items() for r in plan]
    fig, ax = plt.subplots(figsize=(8, 0.7 + 0.3 * len(rows)))
    y = np.arange(len(rows))[::-1]
    top = max(r["model"] for _, r in rows)
    names = list(plans)
    for yi, (name, r) in zip(y, rows):
        ax.barh(yi, r["model"] / 1e6, 0.7, color=f"C{names.index(name)}")
        ax.text(r["model"] / 1e6 + top / 1e6 * 0.01, yi,
                f"{r['calls']} × S {r['size']:,} B", va="center", fontsize=9)
    ax.set_yticks(y, [f"{name} · {r['phase']} · {r['kind']}" for name, r in rows], fontsize=9)
    ax.set_xlim(0, top / 1e6 * 1.35)
    ax.set_xlabel("bytes the rank sends in one step (MB, ring model)", fontsize=9)
    ax.tick_params(labelsize=9)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_simulated(before: Mapping[int, float], after: Mapping[int, float], title: str):
    """Per simulated rank: the value it held before the collective and after it."""
    ranks = sorted(before)
    fig, ax = plt.subplots(figsize=(8, 2.4))
    x = np.arange(len(ranks))
    ax.bar(x - 0.2, [before[r] for r in ranks], 0.4, color="#9ecae1", label="before")
    ax.bar(x + 0.2, [after[r] for r in ranks], 0.4, color="#1f77b4", label="after all_reduce")
    ax.set_xticks(x, [f"rank {r}" for r in ranks], fontsize=9)
    ax.set_ylabel("the rank's value", fontsize=9)
    ax.tick_params(labelsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=9)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig
