"""Data parallelism by hand (notebook 15): a deeper toy MLP for bucketing and overlap,
parameter bookkeeping, and the plots of losses, gradients, buckets and the timeline.

The taught code (the all_reduce of every gradient, the buckets, the hooks) stays in the
notebook's `%%px` cells.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from helpers.figures.column import COLUMN_IN
from helpers.training.toy import D_IN, D_OUT, DTYPE

WIDTH_IN = COLUMN_IN            # the page's column at dpi 100: shown unscaled
LEGEND_PT, LEGEND_ROW_IN = 8.5, 0.24


def make_deep_mlp(depth: int = 6, width: int = 32, seed: int = 0,
                  dtype: torch.dtype = DTYPE) -> nn.Sequential:
    """`depth` Linear layers with Tanh between them: more gradient tensors to bucket."""
    if depth < 2:
        raise ValueError(f"depth must be at least 2, got {depth}")
    torch.manual_seed(seed)
    sizes = [D_IN] + [width] * (depth - 1) + [D_OUT]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < depth - 1:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers).to(dtype)


def parameter_bytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def plot_losses(rank_losses: Sequence[Sequence[float]], reference: Sequence[float],
                title: str = ""):
    """Each rank's loss on its shard, their mean and the reference's, step by step (steps
    are counted: integer ticks); the legend beside the axes, off the lines."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    steps = np.arange(1, len(reference) + 1)
    for rank, losses in enumerate(rank_losses):
        ax.plot(steps, losses, marker="o", alpha=0.7, label=f"rank {rank} (its shard)")
    ax.plot(steps, np.mean(rank_losses, axis=0), "k--", lw=2, label="mean over ranks")
    ax.plot(steps, reference, "r:", lw=3, label="reference\n(whole batch)")
    ax.set_xticks(steps)
    ax.set_xlabel("step")
    ax.set_ylabel("loss before the step")
    ax.set_title(title or "loss per rank and the single-process reference", fontsize=11)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def _flattened(grads: Mapping[str, torch.Tensor]) -> np.ndarray:
    """Every gradient of a {name: tensor} dict, flattened, end to end: the plot's x axis."""
    return np.concatenate([np.ravel(np.asarray(g, dtype=float)) for g in grads.values()])


def plot_grads(before: Sequence[Mapping[str, torch.Tensor]],
               after: Sequence[Mapping[str, torch.Tensor]],
               reference: Mapping[str, torch.Tensor], title: str = ""):
    """Per rank, its {parameter: gradient} before and after the all_reduce, beside the
    reference's gradients."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(WIDTH_IN, 3.6), sharey=True)
    for rank, (b, a) in enumerate(zip(before, after)):
        axes[0].plot(_flattened(b), lw=1, alpha=0.8, label=f"rank {rank}")
        axes[1].plot(_flattened(a), lw=4 - 0.6 * rank, alpha=0.6, label=f"rank {rank}")
    axes[1].plot(_flattened(reference), "k:", lw=1.2, label="reference")
    axes[0].set_title("before the all_reduce:\neach rank's own shard", fontsize=10)
    axes[1].set_title("after all_reduce / world_size:\none gradient", fontsize=10)
    for ax in axes:
        ax.set_xlabel("gradient element\n(all parameters, flattened)")
    fig.suptitle(title or "gradients of step 1, per rank", fontsize=11)
    _legend_below(fig, *axes[1].get_legend_handles_labels())
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def _legend_below(fig, handles: Sequence, labels: Sequence[str]) -> None:
    """The legend under the panels (five entries a row), off the data: the figure grows by
    its rows. Call it after the suptitle: its tight_layout makes room for both."""
    ncol = min(5, len(labels))
    rows = -(-len(labels) // ncol)
    fig.set_figheight(fig.get_figheight() + rows * LEGEND_ROW_IN)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=LEGEND_PT,
               frameon=False)
    fig.tight_layout(rect=(0, (rows * LEGEND_ROW_IN + 0.1) / fig.get_figheight(), 1, 1))


def plot_buckets(results: Sequence[Sequence[dict]], title: str = ""):
    """results[rank] = [{"label", "calls_per_step", "ms_per_step", "model_per_step",
    "measured_per_step"}, ...]: calls, bytes (measured per rank, the ring model dashed)
    and time per step, per bucket size. Measured bytes None (NCCL): the model alone."""
    import matplotlib.pyplot as plt

    labels = [r["label"] for r in results[0]]
    panels = (("calls_per_step", "all_reduce calls per step"),
              ("measured_per_step", "bytes per step per rank"),
              ("ms_per_step", "ms per step (median)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(WIDTH_IN, 3.6))
    width = 0.8 / len(results)
    for rank, rows in enumerate(results):
        pos = np.arange(len(labels)) + rank * width
        for ax, (key, _) in zip(axes, panels):
            if rows[0][key] is not None:
                ax.bar(pos, [r[key] for r in rows], width, label=f"rank {rank}")
    axes[1].plot(np.arange(len(labels)) + 0.4 - width / 2,
                 [r["model_per_step"] for r in results[0]], "k--", marker="_", ms=20,
                 label="ring model (NCCL)")
    for ax, (_, what) in zip(axes, panels):
        ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels, fontsize=8,
                      rotation=30, ha="right")
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlabel("bucket size")
        ax.set_title(what, fontsize=9)
    if results[0][0]["measured_per_step"] is not None:
        axes[1].set_title("bytes per step per rank:\nmeasured here (gloo) vs the ring model",
                          fontsize=9)
    handles, names = axes[0].get_legend_handles_labels()       # the ranks, then the model
    handles.append(axes[1].lines[-1])
    fig.suptitle(title or "bucketing: fewer, larger all_reduce calls", fontsize=11)
    _legend_below(fig, handles, [*names, "ring model (NCCL)"])
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def per_call_ms(calls: Sequence[float], ms: Sequence[float]) -> float:
    """The slope of time per step against calls per step (least squares): ms per call."""
    return float(np.polyfit(np.asarray(calls, dtype=float), np.asarray(ms, dtype=float), 1)[0])


def overlap_share(timeline: dict) -> float:
    """Share of the communication time that lies inside the backward pass (0..1)."""
    start, end = timeline["backward"]
    total = inside = 0.0
    for launched, done in timeline["buckets"]:
        total += done - launched
        inside += max(0.0, min(done, end) - max(launched, start))
    return inside / total if total else 0.0


TIMELINE_COLOURS = {"forward": "#4c72b0", "backward": "#55a868", "wait": "#c44e52",
                    "step": "#8172b2"}
BUCKET_COLOUR = "#dd8452"


def plot_timeline(timelines: Sequence[dict], title: str = ""):
    """Per rank: one lane for its own work (forward, backward, wait, step), then one lane
    per bucket, in launch order: its all_reduce from launch to done. The legend above."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    n, lanes = len(timelines), 1 + max(len(tl["buckets"]) for tl in timelines)
    fig, ax = plt.subplots(figsize=(8, 0.12 * lanes * n + 0.3 * n + 1.5))
    ticks, labels = [], []
    for rank, tl in enumerate(timelines):
        top = rank * (lanes + 1.2)                  # a gap between ranks
        for phase, colour in TIMELINE_COLOURS.items():
            a, b = tl[phase]
            ax.broken_barh([(a * 1e3, max(b - a, 1e-6) * 1e3)], (top, 0.9), facecolors=colour)
        for i, (a, b) in enumerate(tl["buckets"]):
            ax.broken_barh([(a * 1e3, max(b - a, 1e-6) * 1e3)], (top + 1.1 + i, 0.8),
                           facecolors=BUCKET_COLOUR, edgecolor="k", lw=0.4, gid=f"bucket:{rank}:{i}")
        ticks += [top + 0.45, top + 1.1 + (lanes - 1) / 2]
        labels += [f"rank {rank}: {overlap_share(tl):.0%} of its\nall_reduce time in backward",
                   f"its {lanes - 1} buckets,\none lane each"]
    ax.set_yticks(ticks, labels, fontsize=9)
    ax.set_ylim(n * (lanes + 1.2) - 1.0, -0.3)
    ax.set_xlabel("ms since the step began")
    handles = [Patch(color=c, label=k) for k, c in TIMELINE_COLOURS.items()]
    handles.append(Patch(facecolor=BUCKET_COLOUR, edgecolor="k", label="all_reduce of a bucket"))
    fig.legend(handles=handles, loc="upper center", ncol=5, fontsize=9, frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.45 / fig.get_figheight()))
    fig.suptitle(title or "one training step, measured on every rank", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
