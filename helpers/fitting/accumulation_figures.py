"""Notebook 23's figures: the scheme (our own drawing) and what every rank measured."""
from __future__ import annotations

from typing import Any, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from helpers.training.schemes import GROUP, INK, MUTED, rank_colour


def _figure(width: float, height: float) -> Figure:
    """A pyplot figure, closed: shown once, as the value of the cell that draws it."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width, height), dpi=100)
    plt.close(fig)
    return fig


def _box(ax, x: float, y: float, w: float, h: float, face: str, text: str = "",
         size: float = 8, edge: str = INK, style: str = "-") -> None:
    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=edge, linestyle=style,
                           linewidth=1.0))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, color=INK)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], colour: str = INK) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9,
                                 color=colour, linewidth=1.0))


def draw_scheme(world_size: int, k: int, depth: int = 4) -> Figure:
    """Three panels: micro-batches × accumulation steps × ranks with the one all_reduce;
    checkpointing (what forward keeps, what backward recomputes); a compression hook."""
    fig = _figure(8, 8.2)
    top, mid, low = (fig.add_axes(box) for box in ([0.02, 0.50, 0.96, 0.48],
                                                     [0.02, 0.22, 0.96, 0.26],
                                                     [0.02, 0.01, 0.96, 0.19]))
    for ax in (top, mid, low):
        ax.set_axis_off()
    # 1. accumulation: one row per rank, k micro-batches, then the all_reduce
    top.set_xlim(0, 10)
    top.set_ylim(-0.6, world_size + 1.1)
    top.text(0, world_size + 0.75, f"1 · one optimizer step = {k} micro-batches × "
             f"{world_size} ranks", fontsize=10, weight="bold", color=INK)
    width = 1.35
    for r in range(world_size):
        y = world_size - 1 - r
        top.text(0, y + 0.35, f"rank {r}", fontsize=9, color=rank_colour(r), va="center")
        for i in range(k):
            sync = i == k - 1
            _box(top, 1.0 + i * (width + 0.12), y, width, 0.7, rank_colour(r, light=True),
                 f"fwd+bwd {i + 1}\n" + ("sync" if sync else "no_sync()"), size=7)
        _arrow(top, (1.0 + k * (width + 0.12), y + 0.35), (7.3, y + 0.35), MUTED)
    _box(top, 7.35, -0.05, 1.1, world_size - 0.15, "#fde7d6", "all_reduce\n(once)", size=8,
         edge=GROUP)
    for r in range(world_size):
        _box(top, 8.75, world_size - 1 - r, 1.1, 0.7, rank_colour(r, light=True),
             "step", size=8)
    top.text(0, -0.5, "grads add up in .grad over the micro-batches (loss / k); only the "
             "last backward sends", fontsize=8, color=MUTED)
    # 2. checkpointing: forward keeps each block's input only, backward recomputes
    mid.set_xlim(0, 10)
    mid.set_ylim(0, 3.2)
    mid.text(0, 2.95, "2 · recomputation (torch.utils.checkpoint, one block at a time)",
             fontsize=10, weight="bold", color=INK)
    for row, (label, keep) in enumerate((("without", "all activations kept"),
                                         ("with", "block inputs kept"))):
        y = 1.6 - row * 1.3
        mid.text(0, y + 0.35, label, fontsize=9, color=INK, va="center")
        for b in range(depth):
            x = 1.2 + b * 1.6
            _box(mid, x, y, 1.3, 0.7, "#e5e7eb", f"block {b}", size=8)
            face = "#93c5fd" if row == 0 else "#ffffff"
            _box(mid, x + 0.05, y + 0.05, 0.3 if row else 1.2, 0.12, "#1d4ed8"
                 if row else face)
        mid.text(7.8, y + 0.35, keep + ("" if row == 0 else ";\nbackward runs each\nforward "
                                        "again"), fontsize=8, color=MUTED, va="center")
    # 3. a compression hook: compress, all_reduce, decompress
    low.set_xlim(0, 10)
    low.set_ylim(0, 1.6)
    low.text(0, 1.4, "3 · a DDP communication hook, per bucket of gradients", fontsize=10,
             weight="bold", color=INK)
    steps = [("bucket\nfp64 grads", "#e5e7eb"), ("compress\n(fp16, or P,Q)", "#fde68a"),
             ("all_reduce\n(fewer bytes)", "#fde7d6"), ("decompress\n→ bucket", "#fde68a"),
             ("optimizer\nstep", "#e5e7eb")]
    for i, (text, face) in enumerate(steps):
        _box(low, 0.1 + i * 2.0, 0.2, 1.6, 0.8, face, text, size=8,
             edge=GROUP if "all_reduce" in text else INK)
        if i:
            _arrow(low, (i * 2.0 - 0.3, 0.6), (i * 2.0 + 0.1, 0.6))
    return fig


def plot_bytes(per_rank: Sequence[Sequence[dict[str, Any]]], n: int) -> Figure:
    """Per rank: measured bytes of one optimizer step for each variant, the model beside."""
    from helpers.fitting.accumulation import ring_all_reduce

    fig = _figure(8, 3.6)
    ax = fig.add_axes([0.09, 0.30, 0.62, 0.60])
    labels = [r["what"] for r in per_rank[0]]
    width = 0.8 / len(per_rank)
    for rank, rows in enumerate(per_rank):
        xs = [i + (rank - (len(per_rank) - 1) / 2) * width for i in range(len(rows))]
        ax.bar(xs, [r["measured"] or 0 for r in rows], width, color=rank_colour(rank),
               label=f"rank {rank}, measured")
    for i, r in enumerate(per_rank[0]):
        model = r["calls_made"] * ring_all_reduce(r["size"], n)
        ax.hlines(model, i - 0.45, i + 0.45, color=INK, linestyle="--",
                  label="model (ring)" if i == 0 else None)
    ax.set_xticks(range(len(labels)), labels, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("bytes sent in one step")
    ax.set_title(f"gloo · {n} ranks · what each rank wrote in one optimizer step", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    return fig


def plot_recompute(costs: Sequence[dict[str, dict[str, Any]]]) -> Figure:
    """Per rank: the bytes saved for backward and the forward/backward times, without and
    with checkpointing (this run's times)."""
    fig = _figure(8, 3.4)
    left = fig.add_axes([0.09, 0.17, 0.36, 0.68])
    right = fig.add_axes([0.58, 0.17, 0.24, 0.68])
    variants = list(costs[0])
    width = 0.8 / len(costs)
    for rank, cost in enumerate(costs):
        xs = [i + (rank - (len(costs) - 1) / 2) * width for i in range(len(variants))]
        left.bar(xs, [cost[v]["saved_bytes"] / 1024 for v in variants], width,
                 color=rank_colour(rank), label=f"rank {rank}")
        for i, v in enumerate(variants):
            f_ms, b_ms = cost[v]["forward_s"] * 1e3, cost[v]["backward_s"] * 1e3
            right.bar(xs[i], f_ms, width, color=rank_colour(rank, light=True),
                      edgecolor=rank_colour(rank))
            right.bar(xs[i], b_ms, width, bottom=f_ms, color=rank_colour(rank))
    left.set_xticks(range(len(variants)), variants, fontsize=8)
    left.set_ylabel("saved for backward (KiB)")
    left.set_title("activation memory, measured", fontsize=10)
    right.set_xticks(range(len(variants)), variants, fontsize=8)
    right.set_ylabel("ms (light: forward,\ndark: backward)")
    right.set_title("this run's time", fontsize=10)
    left.legend(loc="upper left", bbox_to_anchor=(2.25, 1.0), fontsize=8, frameon=False)
    return fig


def plot_compression(losses: dict[str, Sequence[float]],
                     rel_errors: Sequence[dict[str, float]]) -> Figure:
    """Left: the loss over steps of each hook (mean over ranks = the whole batch's), its
    key under it; right: each rank's relative error of the gradient against the exact one,
    per hook (bars from the axis' left end: a log axis has no zero)."""
    import math

    fig = _figure(7.9, 4.9)
    left = fig.add_axes([0.09, 0.45, 0.33, 0.47])
    right = fig.add_axes([0.68, 0.12, 0.2, 0.8])
    styles = ["-", "--", ":", "-.", (0, (3, 1, 1, 1)), (0, (5, 2)), (0, (1, 2))]
    for i, (hook, curve) in enumerate(losses.items()):
        left.plot(range(len(curve)), curve, linestyle=styles[i % len(styles)], marker="o",
                  markersize=3, label=hook)
    left.set_xlabel("step")
    left.set_ylabel("loss (whole batch)")
    left.set_title("training loss", fontsize=10)
    left.legend(fontsize=7.5, frameon=False, loc="upper left", bbox_to_anchor=(-0.2, -0.2),
                ncol=2 if len(losses) > 4 else 1)
    hooks = list(rel_errors[0])
    shown = [[max(errs[h], 1e-17) for h in hooks] for errs in rel_errors]
    floor = 10.0 ** (math.floor(math.log10(min(map(min, shown)))) - 1)
    width = 0.8 / len(rel_errors)
    for rank, values in enumerate(shown):
        ys = [i + (rank - (len(rel_errors) - 1) / 2) * width for i in range(len(hooks))]
        right.barh(ys, [v - floor for v in values], width, left=floor,
                   color=rank_colour(rank), label=f"rank {rank}")
    right.set_xscale("log")
    right.set_xlim(left=floor)
    right.set_yticks(range(len(hooks)), hooks, fontsize=7.5)
    right.invert_yaxis()
    right.set_xlabel("‖g − g_exact‖ / ‖g_exact‖")
    right.set_title("gradient error, per rank", fontsize=10)
    right.legend(fontsize=7.5, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig
