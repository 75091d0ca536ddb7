"""ZeRO / FSDP by hand (notebook 16): how a tensor's rows are split over the ranks (torch.chunk
layout, as FSDP2 does), the bytes a rank holds, the ZeRO paper's memory formulas, the
communication per step (the paper's volume, the ring model of the stages as built here,
and the measured bytes side by side), and the plots.

The taught code (the all_gather / reduce_scatter of each stage) stays in the notebook's
`%%px` cells.
"""
from __future__ import annotations

import math
import weakref
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from helpers.figures.column import COLUMN_IN

STAGES = ("DP", "ZeRO-1", "ZeRO-2", "ZeRO-3")


def padded_rows(rows: int, world_size: int) -> int:
    """Rows each rank holds once dim 0 is padded to a multiple of world_size: ⌈rows/n⌉."""
    return math.ceil(rows / world_size)


def row_range(rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """The real rows [lo, hi) of `rank`, torch.chunk's layout: ⌈rows/n⌉ each, the last
    ranks get fewer or none when n does not divide rows."""
    per_rank = padded_rows(rows, world_size)
    lo = min(rank * per_rank, rows)
    return lo, min(lo + per_rank, rows)


def pad_rows(t: torch.Tensor, world_size: int) -> torch.Tensor:
    """`t` with zero rows appended so that dim 0 divides by world_size."""
    extra = padded_rows(t.shape[0], world_size) * world_size - t.shape[0]
    if not extra:
        return t
    return torch.cat([t, t.new_zeros((extra,) + tuple(t.shape[1:]))])


class LiveBytes:
    """Bytes of the tensors `track`ed that are still alive, and the peak of that sum."""

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0

    def track(self, t: torch.Tensor, nbytes: int | None = None) -> torch.Tensor:
        size = t.numel() * t.element_size() if nbytes is None else nbytes
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(t, self._release, size)
        return t

    def _release(self, size: int) -> None:
        self.live -= size


def held_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the storages behind these tensors, each storage counted once (a view
    into a tensor already counted costs nothing)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is None:
            continue
        if hasattr(t, "to_local"):
            t = t.to_local()
        storage = t.untyped_storage()
        seen[storage.data_ptr() or id(storage)] = storage.nbytes()
    return sum(seen.values())


def zero_formula(psi: float, world_size: int, stage: str, param_bytes: float = 2,
                 grad_bytes: float = 2, optimizer_bytes: float = 12) -> dict[str, float]:
    """The ZeRO paper's memory per rank (Rajbhandari et al. 2020): Ψ parameters, bytes per
    element of parameters, gradients and optimizer state (K). §3.1 derives DP's
    2Ψ + 2Ψ + KΨ (mixed precision Adam: K = 12, the defaults); §5.1–5.3 and fig. 1 split
    the terms over the ranks, stage by stage (arXiv 1910.02054)."""
    n = world_size
    shard = {"DP": (1, 1, 1), "ZeRO-1": (1, 1, n), "ZeRO-2": (1, n, n), "ZeRO-3": (n, n, n)}
    if stage not in shard:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    p, g, o = shard[stage]
    return {"parameters": param_bytes * psi / p, "gradients": grad_bytes * psi / g,
            "optimizer state": optimizer_bytes * psi / o}


def comm_formula(shapes: Sequence[Sequence[int]], world_size: int, stage: str,
                 element_bytes: int = 8) -> float:
    """Bytes one rank sends per step (ring), as the notebook's stages are built:
    DP all_reduce of every gradient; ZeRO-1 that plus an all_gather of the (padded)
    parameters; ZeRO-2 reduce_scatter + all_gather; ZeRO-3 all_gather in forward, again
    for the weights (2-D tensors) in backward, and reduce_scatter."""
    n = world_size
    full = sum(math.prod(s) for s in shapes) * element_bytes
    padded = [padded_rows(s[0], n) * n * math.prod(s[1:]) * element_bytes for s in shapes]
    weights = sum(b for b, s in zip(padded, shapes) if len(s) > 1)
    ring = (n - 1) / n
    return {"DP": 2 * ring * full, "ZeRO-1": 2 * ring * full + ring * sum(padded),
            "ZeRO-2": 2 * ring * sum(padded),
            "ZeRO-3": ring * (2 * sum(padded) + weights)}[stage]


def plot_memory(measured: Sequence[dict[str, dict[str, float]]],
                formulas: dict[str, dict[str, float]], title: str = ""):
    """Stacked bars per stage and rank (what the ranks hold) beside the formula's total."""
    import matplotlib.pyplot as plt

    parts = ("parameters", "gradients", "optimizer state", "peak gathered")
    colours = ("#4c72b0", "#55a868", "#c44e52", "#dd8452")
    n = len(measured)
    width = 0.8 / (n + 1)
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for rank, stages in enumerate(measured):
        for s, stage in enumerate(STAGES):
            bottom = 0.0
            for part, colour in zip(parts, colours):
                value = stages[stage][part]
                ax.bar(s + rank * width, value, width, bottom=bottom, color=colour,
                       edgecolor="white", linewidth=0.6,
                       label=part if rank == 0 and s == 0 else None)
                bottom += value
    for s, stage in enumerate(STAGES):
        total = sum(formulas[stage].values())
        ax.bar(s + n * width, total, width, color="none", edgecolor="k", hatch="//",
               label="ZeRO formula, float64 mapping" if s == 0 else None)
    ax.set_ylim(0, 1.08 * ax.get_ylim()[1])
    return _label_stages(fig, ax, width, "bytes per rank",
                         title or "memory per rank: one bar per rank, then the formula")


def _label_stages(fig: Any, ax: Any, width: float, ylabel: str, title: str) -> Any:
    """One stage name under each group of bars, the labels and the legend."""
    import matplotlib.pyplot as plt

    ax.set_xticks(np.arange(len(STAGES)) + 0.4 - width / 2, STAGES)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2,
              frameon=False)                 # below the axes: off the bars
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


# The ZeRO paper's communication volume per rank and step, in elements of Ψ (§7.1: DP 2Ψ;
# §7.2.1: P_os+g 2Ψ; §7's opening paragraph: P_os and P_g add no communication; §7.2.2:
# P_os+g+p 3Ψ, i.e. 1.5× DP).
PAPER_VOLUME = {"DP": 2, "ZeRO-1": 2, "ZeRO-2": 2, "ZeRO-3": 3}


def paper_volume(psi: float, stage: str, element_bytes: int = 8) -> float:
    """The paper's bytes per rank and step: its volume in elements × bytes per element."""
    return PAPER_VOLUME[stage] * psi * element_bytes


def plot_comm(measured: Sequence[dict[str, float | None]], ring_model: dict[str, float],
              paper: dict[str, float], title: str = ""):
    """Per stage: the paper's bytes, the ring model's, then each rank's measured bytes."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    n = len(measured)
    width = 0.8 / (n + 2)
    x = np.arange(len(STAGES))
    ax.bar(x, [paper[s] for s in STAGES], width, color="none", edgecolor="#555555",
           hatch="..", label="paper (§7), × 8 B")
    ax.bar(x + width, [ring_model[s] for s in STAGES], width, color="none", edgecolor="k",
           hatch="//", label="ring model, as built")
    for rank, sent in enumerate(measured):
        if sent["DP"] is not None:
            ax.bar(x + (rank + 2) * width, [sent[s] for s in STAGES], width,
                   label=f"rank {rank}, measured (gloo)")
    for s, stage in enumerate(STAGES):
        tops = [paper[stage], ring_model[stage]] + [m[stage] or 0 for m in measured]
        text = f"× DP:\nmodel {ring_model[stage] / ring_model['DP']:.2f}"
        if measured[0]["DP"] is not None:
            text += f"\nrank 0 {measured[0][stage] / measured[0]['DP']:.2f}"
        ax.text(s + 0.4 - width / 2, max(tops), text, ha="center", va="bottom", fontsize=9)
    ax.set_ylim(0, 1.4 * ax.get_ylim()[1])
    return _label_stages(fig, ax, width, "bytes per rank per step",
                         title or "communication per step: paper, ring model, measured")


def plot_shards(hand: Sequence[dict], fsdp: Sequence[dict], title: str = ""):
    """Per rank and parameter: the hand-built shard's values beside FSDP2's local shard;
    the key under the panels."""
    import matplotlib.pyplot as plt

    names = list(hand[0])
    n = len(hand)
    fig, axes = plt.subplots(n, len(names), figsize=(COLUMN_IN, 1.5 * n + 1.5),
                             squeeze=False)
    for rank in range(n):
        for j, name in enumerate(names):
            ax = axes[rank][j]
            a = np.ravel(np.asarray(hand[rank][name], dtype=float))
            b = np.ravel(np.asarray(fsdp[rank][name], dtype=float))
            ax.plot(a, "o", ms=5, mfc="none", label="by hand")
            ax.plot(b, ".", ms=3, color="k", label="FSDP2 to_local()")
            ax.set_title(f"rank {rank} · {name}\n{len(a)} / {len(b)} values", fontsize=8)
            ax.tick_params(labelsize=7)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=2,
               fontsize=8.5, frameon=False)
    fig.suptitle(title or "each rank's shard of each parameter: by hand vs FSDP2", fontsize=10)
    fig.tight_layout(rect=(0, 0.34 / fig.get_figheight(), 1, 1))
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
