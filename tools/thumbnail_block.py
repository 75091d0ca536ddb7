"""Card pictures of part 3, a transformer block split four ways (20–22), from save_run.

20 the activations a rank keeps for backward (one process, TP, TP + SP), stacked by region;
21 the causal attention scores each rank computes, contiguous split against zig-zag;
22 the tokens each rank sends to each expert, experts under the rank that holds them.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
from matplotlib.patches import Rectangle

from tools.thumbnail_training import RANK_COLORS, _ranks, _size
from tools.thumbnails import HEIGHT_PX, MIN_FONT, WIDTH_PX, canvas, legend, title

REGIONS = (("layernorm", "LayerNorm region", "#dd8452"),
           ("tensor-parallel", "attention + MLP", "#4c72b0"))


# --------------------------------------------------------------------------- 20
def sequence_parallel_figure(data: Mapping[str, Any]) -> Any:
    """20: bytes of the tensors autograd keeps for backward on rank 0, by region, as
    measured for one process, tensor parallel and tensor + sequence parallel."""
    rank = _ranks(data)[0]
    kept = rank["saved_bytes"]
    fig, ax = canvas()
    title(fig, f"{data.get('world_size')} ranks: activations rank 0 keeps")
    left, top = 150, 64
    pitch = (HEIGHT_PX - 56 - top) / len(kept)
    scale = (WIDTH_PX - left - 120) / max(max(v["total"] for v in kept.values()), 1)
    for i, (setting, regions) in enumerate(kept.items()):
        y = top + i * pitch
        ax.text(left - 10, y + pitch / 2, setting, fontsize=MIN_FONT, ha="right", va="center")
        x = float(left)
        for region, _words, color in REGIONS:
            w = regions.get(region, 0) * scale
            ax.add_patch(Rectangle((x, y + 8), w, pitch - 16, facecolor=color,
                                   edgecolor="white", gid=f"{setting}:{region}"))
            x += w
        ax.text(x + 8, y + pitch / 2, _size(regions["total"]), fontsize=MIN_FONT, va="center")
    legend(ax, [(color, words) for _, words, color in REGIONS], HEIGHT_PX - 20)
    return fig


# --------------------------------------------------------------------------- 21
SPLITS = (("contiguous", "#c44e52", "contiguous"), ("zigzag", "#55a868", "zig-zag"))


def context_parallel_figure(data: Mapping[str, Any]) -> Any:
    """21: per rank, the causal scores it computed (and its time, measured) with the
    contiguous split and with the zig-zag split, as bars on one scale."""
    ranks = _ranks(data)
    fig, ax = canvas()
    title(fig, "causal ring attention: scores per rank")
    left, top = 96, 58
    pitch = (HEIGHT_PX - 50 - top) / len(ranks)
    peak = max(r["load"][split]["scores"] for r in ranks for split, _, _ in SPLITS) or 1
    scale = (WIDTH_PX - left - 150) / peak
    bar = (pitch - 10) / len(SPLITS)
    for i, rank in enumerate(ranks):
        y = top + i * pitch
        ax.text(left - 10, y + pitch / 2, f"rank {rank['rank']}", fontsize=MIN_FONT,
                ha="right", va="center")
        for k, (split, color, _) in enumerate(SPLITS):
            load = rank["load"][split]
            w = load["scores"] * scale
            ax.add_patch(Rectangle((left, y + 4 + k * bar), w, bar - 3, facecolor=color,
                                   edgecolor="none", gid=f"{split}:rank{rank['rank']}"))
            ax.text(left + w + 6, y + 4 + (k + 0.5) * bar, f"{load['compute_ms']:.1f} ms",
                    fontsize=MIN_FONT, va="center")
    legend(ax, [(color, words) for _, color, words in SPLITS], HEIGHT_PX - 20)
    return fig


# --------------------------------------------------------------------------- 22
def expert_parallel_figure(data: Mapping[str, Any]) -> Any:
    """22: rows sent, rank × expert, at the run's first capacity factor; each expert's
    column marked with its owner's colour; the tokens dropped at both capacity factors."""
    ranks = _ranks(data)
    runs = [r["load_runs"] for r in ranks]
    sent = np.array([r[0]["send_counts"] for r in runs], dtype=float)
    n, experts = sent.shape
    per_rank = experts // n
    fig, ax = canvas()
    title(fig, f"top-{data.get('top_k')} routing: rows each rank sends")
    left, top = 96, 84
    cell = min((WIDTH_PX - left - 20) / experts, (HEIGHT_PX - top - 74) / n)
    for e in range(experts):
        owner = RANK_COLORS[(e // per_rank) % len(RANK_COLORS)]
        ax.add_patch(Rectangle((left + e * cell, top - 30), cell - 4, 26, facecolor=owner,
                               edgecolor="none", gid=f"owner:e{e}"))
        ax.text(left + (e + 0.5) * cell - 2, top - 17, f"e{e}", fontsize=MIN_FONT,
                ha="center", va="center", color="white", fontweight="bold")
    peak = sent.max() or 1.0
    for r in range(n):
        ax.text(left - 10, top + (r + 0.5) * cell, f"rank {r}", fontsize=MIN_FONT,
                ha="right", va="center")
        for e in range(experts):
            shade = 0.92 - 0.6 * sent[r, e] / peak
            ax.add_patch(Rectangle((left + e * cell, top + r * cell), cell - 4, cell - 4,
                                   facecolor=(shade, shade, 0.98), edgecolor="none",
                                   gid=f"sent:{r}:{e}"))
            ax.text(left + (e + 0.5) * cell - 2, top + (r + 0.5) * cell - 2,
                    f"{sent[r, e]:.0f}", fontsize=MIN_FONT, ha="center", va="center")
    dropped = [sum(len(rank_runs[k]["dropped"]) for rank_runs in runs)
               for k in range(len(runs[0]))]
    words = " · ".join(f"cf {run['cf']}: {d} dropped" for run, d in zip(runs[0], dropped))
    ax.text(14, HEIGHT_PX - 20, words, fontsize=MIN_FONT, va="center")
    return fig


DRAWINGS: dict[str, Callable[[dict], Any]] = {
    "20_tensor_sequence_parallel": sequence_parallel_figure,
    "21_context_parallel": context_parallel_figure,
    "22_expert_parallel": expert_parallel_figure,
}
