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
    """Three panels: micro-batches × accumulation steps × ranks with the one all_reduce
    (top); checkpointing, what forward keeps and what backward recomputes (bottom left); a
    compression hook (bottom right). Drawn in inches, y downwards."""
    row, h = 0.36, 0.3                           # panel 1: one rank's row, its boxes
    low = 0.45 + world_size * row + 0.15         # where panels 2 and 3 start
    width, height = 7.7, low + 1.3
    fig = _figure(width, height)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_axis_off()
    # 1. accumulation: one row per rank, k micro-batches, then the all_reduce
    ax.text(0, 0.12, f"1 · one optimizer step = {k} micro-batches × {world_size} ranks",
            fontsize=10, weight="bold", color=INK, va="center")
    w = min(0.95, 4.55 / k - 0.08)
    reduce_x = 0.6 + k * (w + 0.08) + 0.45
    for r in range(world_size):
        y = 0.3 + r * row
        ax.text(0, y + h / 2, f"rank {r}", fontsize=9, color=rank_colour(r), va="center")
        for i in range(k):
            sync = i == k - 1
            _box(ax, 0.6 + i * (w + 0.08), y, w, h, rank_colour(r, light=True),
                 f"fwd+bwd {i + 1}\n" + ("sync" if sync else "no_sync()"), size=7)
        _arrow(ax, (0.6 + k * (w + 0.08), y + h / 2), (reduce_x - 0.05, y + h / 2), MUTED)
        _box(ax, reduce_x + 1.35, y, 0.85, h, rank_colour(r, light=True), "step", size=8)
    _box(ax, reduce_x, 0.28, 0.95, world_size * row - row + h + 0.04, "#fde7d6",
         "all_reduce\n(once)", size=8, edge=GROUP)
    ax.text(0, 0.3 + world_size * row + 0.08, "grads add up in .grad over the micro-batches "
            "(loss / k); only the last backward sends", fontsize=8, color=MUTED, va="center")
    # 2. checkpointing: forward keeps each block's input only, backward recomputes
    ax.text(0, low + 0.17, "2 · recomputation (torch.utils.checkpoint,\none block at a time)",
            fontsize=10, weight="bold", color=INK, va="center")
    for line, (label, keep) in enumerate((("without", "all activations kept"),
                                          ("with", "block inputs kept"))):
        y = low + 0.45 + line * 0.42
        ax.text(0, y + 0.16, label, fontsize=9, color=INK, va="center")
        for b in range(depth):
            x = 0.62 + b * 0.62
            _box(ax, x, y, 0.56, 0.34, "#e5e7eb")
            ax.text(x + 0.28, y + 0.13, f"block {b}", ha="center", va="center", fontsize=8,
                    color=INK)
            _box(ax, x + 0.04, y + 0.24, 0.12 if line else 0.48, 0.06,
                 "#1d4ed8" if line else "#93c5fd")
        ax.text(0.62 + depth * 0.62 + 0.02, y + 0.17, keep + (
            "" if line == 0 else ";\nbackward runs each\nforward again"), fontsize=8,
            color=MUTED, va="center")
    # 3. a compression hook: compress, all_reduce, decompress (a row, then back)
    x0 = 4.35
    ax.text(x0, low + 0.17, "3 · a DDP communication hook,\nper bucket of gradients",
            fontsize=10, weight="bold", color=INK, va="center")
    steps = [("bucket\nfp64 grads", "#e5e7eb"), ("compress\n(fp16, or P,Q)", "#fde68a"),
             ("all_reduce\n(fewer bytes)", "#fde7d6"), ("decompress\n→ bucket", "#fde68a"),
             ("optimizer\nstep", "#e5e7eb")]
    places = [(x0, low + 0.45), (x0 + 1.15, low + 0.45), (x0 + 2.3, low + 0.45),
              (x0 + 2.3, low + 0.93), (x0 + 1.15, low + 0.93)]
    bw, bh = 1.0, 0.34
    for i, ((text, face), (x, y)) in enumerate(zip(steps, places)):
        _box(ax, x, y, bw, bh, face, text, size=8, edge=GROUP if "all_reduce" in text else INK)
        if i:
            (px, py) = places[i - 1]
            if py == y:                          # along a row, rightwards then back
                a, b = (px + bw, x) if x > px else (px, x + bw)
                _arrow(ax, (a + 0.02, y + bh / 2), (b - 0.02 if x > px else b + 0.02,
                                                    y + bh / 2))
            else:                                # down to the row below
                _arrow(ax, (x + bw / 2, py + bh + 0.02), (x + bw / 2, y - 0.02))
    return fig


def plot_bytes(per_rank: Sequence[Sequence[dict[str, Any]]], n: int) -> Figure:
    """Per rank: measured bytes of one optimizer step for each variant, the model beside;
    under each variant, the all_reduce calls counted from Python (rank 0's)."""
    from helpers.fitting.accumulation import ring_all_reduce

    fig = _figure(8, 3.6)
    ax = fig.add_axes([0.09, 0.30, 0.62, 0.60])
    labels = [f"{r['what']}\n{r['calls']} call{'s' * (r['calls'] != 1)} counted"
              for r in per_rank[0]]
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
