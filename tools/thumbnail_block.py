"""Card pictures of parts 3 and 4 (20–24): a transformer block split four ways, a step
fitted in memory and time; each from what the notebook saved with save_run (part 5:
tools/thumbnail_scale.py).

20 the activations a rank keeps for backward (one process, TP, TP + SP), stacked by region;
21 the causal attention scores each rank computes, contiguous split against zig-zag;
22 the tokens each rank sends to each expert, experts under the rank that holds them;
23 the bytes each gradient hook sent, against DDP's own all_reduce, and its error;
24 the hand-built schedules' measured timelines (F, B or I, W per rank), m = 2 × ranks.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
from matplotlib.patches import Rectangle

from tools.thumbnail_training import IDLE, RANK_COLORS, _ranks, _size, timeline_rows
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


# --------------------------------------------------------------------------- 23
def compression_figure(data: Mapping[str, Any]) -> Any:
    """23: rank 0's measured bytes for one backward pass per hook, as bars on one scale, each
    labelled with its share of the first row's (DDP's own) and the gradient's relative error."""
    rows = _ranks(data)[0]["compression"]
    fig, ax = canvas()
    title(fig, f"{data.get('world_size')} ranks: bytes a rank sent per hook")
    left, top = 14, 54
    pitch = (HEIGHT_PX - 20 - top) / len(rows)
    base = max(rows[0]["measured"] or 1, 1)
    scale = (WIDTH_PX - 40) / max(max(r["measured"] or 0 for r in rows), 1)
    for i, row in enumerate(rows):
        y = top + i * pitch
        share = (row["measured"] or 0) / base
        ax.add_patch(Rectangle((left, y + 3), (row["measured"] or 0) * scale, pitch - 6,
                               facecolor="#4c72b0" if i == 0 else "#dd8452", alpha=0.35,
                               edgecolor="none", gid=f"hook:{row['hook']}"))
        ax.text(left + 6, y + pitch / 2, f"{row['hook']}: {share:.2f}× · error "
                f"{row['rel_error']:.0e}", fontsize=MIN_FONT, va="center")
    return fig


# --------------------------------------------------------------------------- 24
SCHEDULE_KINDS = (("F", "#4c72b0", "F"), ("B", "#c44e52", "B"), ("I", "#55a868", "I"),
                  ("W", "#e6ab02", "W"))


def schedules_figure(data: Mapping[str, Any]) -> Any:
    """24: the hand-built schedules at m = 2 × ranks as measured (fastest repeat): one row
    per rank, the compute spans coloured, the rest idle or waiting."""
    from helpers.training.pipeline import step_time

    ranks = _ranks(data)
    m = 2 * len(ranks)
    runs: dict[tuple[str, int], list] = {}
    for state in ranks:
        for name, mb, repeat, events, *_ in state["runs"]:
            if mb == m:
                runs.setdefault((name, repeat), []).append(events)
    best: dict[str, list] = {}
    for (name, _), by_rank in runs.items():
        if len(by_rank) == len(ranks) and (name not in best
                                           or step_time(by_rank) < step_time(best[name])):
            best[name] = by_rank
    fig, ax = canvas()
    title(fig, f"pipeline schedules: {len(ranks)} ranks · m = {m}")
    left, top, right = 14, 56, WIDTH_PX - 14
    block = (HEIGHT_PX - 40 - top) / max(len(best), 1)
    for k, (name, by_rank) in enumerate(best.items()):
        y0 = top + k * block
        scale = (right - left) / step_time(by_rank)
        ax.text(left, y0 + 12, f"{name} · {step_time(by_rank) * 1e3:.0f} ms", fontsize=MIN_FONT,
                va="center", fontweight="bold")
        timeline_rows(ax, name, by_rank, left, right, y0 + 26, (block - 30) / len(by_rank),
                      scale, {key: color for key, color, _ in SCHEDULE_KINDS})
    legend(ax, [(color, words) for _, color, words in SCHEDULE_KINDS] + [(IDLE, "idle")],
           HEIGHT_PX - 20)
    return fig


DRAWINGS: dict[str, Callable[[dict], Any]] = {
    "20_tensor_sequence_parallel": sequence_parallel_figure,
    "21_context_parallel": context_parallel_figure,
    "22_expert_parallel": expert_parallel_figure,
    "23_accumulation_compression": compression_figure,
    "24_pipeline_schedules": schedules_figure,
}
