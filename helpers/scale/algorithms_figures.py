"""Notebook 25's drawings: the three schemes (from the model), a run's sends step by step
(from the ranks' own logs), measured bytes per rank and the timing sweep."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from helpers.figures.animation import CONTENT_WIDTH_IN, MIN_FONT_PT, step_animation
from helpers.scale.algorithms import NAMES, binomial_children, fold_size, tree_node
from helpers.training.schemes import rank_colour

STEP_COLOURS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02",
                "#a6761d", "#666666"]


def _circle(n: int) -> list[tuple[float, float]]:
    angles = np.pi / 2 - 2 * np.pi * np.arange(n) / n
    return [(float(np.cos(a)), float(np.sin(a))) for a in angles]


def _node(ax: Any, xy: tuple[float, float], r: int, size: float = 0.17) -> None:
    from matplotlib.patches import Circle

    ax.add_patch(Circle(xy, size, facecolor=rank_colour(r, light=True),
                        edgecolor=rank_colour(r), lw=1.6, zorder=3))
    ax.text(*xy, str(r), ha="center", va="center", fontsize=10, fontweight="bold", zorder=4)


def _arrow(ax: Any, a: tuple, b: tuple, colour: str, rad: float = 0.0, style: str = "-",
           label: str | None = None) -> None:
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(a, b, arrowstyle="-|>", mutation_scale=11, color=colour,
                                 lw=1.4, linestyle=style, shrinkA=11, shrinkB=11,
                                 connectionstyle=f"arc3,rad={rad}", zorder=2))
    if label:
        mx, my = (a[0] + b[0]) / 2, (a[1] + b[1]) / 2
        dx, dy = b[0] - a[0], b[1] - a[1]
        ax.text(mx - rad * dy * 0.6, my + rad * dx * 0.6, label, fontsize=8, color=colour,
                ha="center", va="center",
                bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none"))


def draw_schemes(n: int):
    """Ring, binary tree (and its mirror: the double tree), halving-doubling on n ranks."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(CONTENT_WIDTH_IN, 3.6))
    for ax in axes:
        ax.set_aspect("equal")
        ax.set_axis_off()
    # the ring: every step, every rank sends one chunk to r + 1
    ring, pos = axes[0], _circle(n)
    for r in range(n):
        _arrow(ring, pos[r], pos[(r + 1) % n], STEP_COLOURS[0], rad=-0.25 if n > 2 else -0.4)
        _node(ring, pos[r], r)
    ring.set_title(f"ring: 2(n − 1) = {2 * (n - 1)} steps\none chunk to r + 1 per step",
                   fontsize=9)
    # the binary tree, and the mirrored one (dashed) that carries the other half
    tree, height = axes[1], tree_node(0, n).height
    place: dict[int, tuple[float, float]] = {}
    for r in range(n):
        node = tree_node(r, n)
        v = r - (2 ** node.depth - 1)
        width = 2 ** node.depth
        place[r] = ((v + 0.5) / width * 2 - 1, 1 - node.depth * 2 / max(height, 1))
    for r in range(n):
        node = tree_node(r, n)
        if node.parent is not None:
            _arrow(tree, place[r], place[node.parent], STEP_COLOURS[0], rad=0.2)
            _arrow(tree, place[node.parent], place[r], STEP_COLOURS[1], rad=0.2)
        mirror = tree_node(r, n, mirrored=True)
        if mirror.parent is not None and n > 2:
            _arrow(tree, place[mirror.parent], place[r], "#999999", rad=-0.45, style="--")
        _node(tree, place[r], r)
    tree.set_title(f"binary tree: 2·{height} = {2 * height} steps\n"
                   "green: reduce up\norange: broadcast down\n"
                   "dashed: the mirrored tree", fontsize=9)
    # halving-doubling: partners r XOR 2^k, one colour per distance
    hd, p = axes[2], fold_size(n)
    pos = _circle(n)
    d, k = p // 2, 0
    while d >= 1:
        for r in range(p):
            if r < r ^ d:
                _arrow(hd, pos[r], pos[r ^ d], STEP_COLOURS[k + 2], rad=0.15,
                       label=f"±{d}" if r == 0 else None)
                _arrow(hd, pos[r ^ d], pos[r], STEP_COLOURS[k + 2], rad=0.15)
        d, k = d // 2, k + 1
    for r in range(p, n):
        _arrow(hd, pos[r], pos[r - p], "#999999", rad=0.2, style="--", label="fold")
    for r in range(n):
        _node(hd, pos[r], r)
    logp = p.bit_length() - 1
    hd.set_title(f"halving-doubling: {2 * logp + 2 * (p < n)} steps\n2·log₂{p}"
                 + (" + 2 (the fold)" if p < n else "")
                 + "\npartners r XOR 2ᵏ:\nhalves, then doubles", fontsize=9)
    for ax in axes:
        ax.set_xlim(-1.35, 1.35)
        ax.set_ylim(-1.35, 1.35)
    fig.suptitle(f"three ways to all_reduce on {n} ranks (our drawing, from the model)",
                 fontsize=11, fontweight="bold", y=0.99)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.0, top=0.675, wspace=0.08)
    plt.close(fig)
    return fig


def animate_run(log: Sequence[Sequence[int]], n: int, numel: int, algorithm: str):
    """One frame per step of a run: every rank's tensor as a strip of elements; the
    elements each rank sent at this step coloured in its colour, an arrow to whom.

    `log`: every rank's sends, (step, src, dst, lo, hi), as the ranks recorded them.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    log = sorted(tuple(int(v) for v in e) for e in log)
    n_steps = max(e[0] for e in log) + 1
    height = 0.55 * n + 1.2
    margin = 7.0 + 0.9 * n                      # room right of the strips: arrows, labels
    fig = plt.figure(figsize=(CONTENT_WIDTH_IN, height))
    ax = fig.add_axes([0.1, 0.02, 0.88, 1 - 0.8 / height])
    ax.set_xlim(-0.5, numel + margin)
    ax.set_ylim(n - 0.4, -0.7)
    ax.set_axis_off()
    cells = []
    for r in range(n):
        ax.text(-0.8, r, f"rank {r}", ha="right", va="center", fontsize=10,
                color=rank_colour(r), fontweight="bold")
        cells.append([ax.add_patch(Rectangle((i, r - 0.3), 1, 0.6, facecolor="white",
                                             edgecolor="#bbbbbb", lw=0.5))
                      for i in range(numel)])
    ax.text(numel / 2, -0.55, f"elements 0 … {numel - 1} of each rank's tensor",
            ha="center", va="center", fontsize=MIN_FONT_PT + 1, color="#555555")
    title = fig.text(0.01, 1 - 0.08 / height, "", fontsize=11, fontweight="bold", va="top")
    fig.text(0.01, 1 - 0.4 / height, "coloured: the elements each rank sends at this step; "
             "arrow and label: to which rank, how many elements", fontsize=MIN_FONT_PT + 0.5,
             color="#555555", va="top")
    arrows: list[Any] = []
    shown: dict[str, Any] = {}

    def draw_frame(i: int) -> None:
        for a in arrows:
            a.remove()
        arrows.clear()
        sends = [e for e in log if e[0] == i - 1]
        for r in range(n):
            for box in cells[r]:
                box.set_facecolor("white")
        to: dict[int, list[str]] = {}
        for _, src, dst, lo, hi in sends:
            for box in cells[src][lo:hi]:
                box.set_facecolor(rank_colour(src, light=True))
            x = numel + 0.7 + 0.9 * src            # one lane per sender: arrows never overlap
            arrows.append(ax.add_patch(FancyArrowPatch(
                (x, src), (x, dst), arrowstyle="-|>", mutation_scale=12, color=rank_colour(src),
                lw=1.6, shrinkA=2, shrinkB=6)))
            to.setdefault(src, []).append(f"{dst} ({hi - lo})")
        for src, targets in to.items():
            arrows.append(ax.text(numel + 0.6 + 0.9 * n, src, "→ " + ", ".join(targets),
                                  fontsize=8.5, color=rank_colour(src), ha="left",
                                  va="center"))
        title.set_text(f"{NAMES[algorithm]} · {n} ranks · "
                       + ("before the first step" if i == 0 else
                          f"step {i} of {n_steps}: {len(sends)} send(s)"))
        shown["sends"] = [(src, dst, lo, hi) for _, src, dst, lo, hi in sends]
        shown["title"] = title.get_text()

    plt.close(fig)
    return step_animation(fig, n_steps + 1, draw_frame, lambda: dict(shown))


def plot_bytes(rows: Sequence[dict], n: int, size: int):
    """Measured bytes per rank (bars) beside the model (black ticks), per algorithm."""
    import matplotlib.pyplot as plt

    algorithms = list(dict.fromkeys(row["algorithm"] for row in rows))
    fig, ax = plt.subplots(figsize=(CONTENT_WIDTH_IN, 3.4))
    width = 0.8 / n
    for r in range(n):
        mine = {row["algorithm"]: row for row in rows if row["rank"] == r}
        xs = np.arange(len(algorithms)) + (r - (n - 1) / 2) * width
        ax.bar(xs, [(mine[a]["measured"] or 0) / size for a in algorithms], width * 0.92,
               color=rank_colour(r, light=True), edgecolor=rank_colour(r), label=f"rank {r}")
        ax.scatter(xs, [mine[a]["model"] / size for a in algorithms], marker="_", s=220,
                   color="black", zorder=3, label="model" if r == 0 else None)
    ax.set_xticks(range(len(algorithms)), [NAMES[a].replace(" (", "\n(") for a in algorithms],
                  fontsize=8.5)
    ax.set_ylabel("bytes written / S")
    ax.set_title(f"what each rank wrote in one call, S = {size // 1024} KiB, {n} ranks "
                 "(bars: measured on gloo; ticks: model)", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8.5, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_sweep(timings: dict, predictions: dict, unfitted: Mapping[int, str]):
    """Time per call against size, one panel per world size: measured (markers, lines)
    and the α-β model (dashed) with α, β fitted to this world size's ring; a panel without
    predictions says why in its title (`unfitted`)."""
    import matplotlib.pyplot as plt

    sizes_n = sorted(timings)
    fig, axes = plt.subplots(1, len(sizes_n), figsize=(CONTENT_WIDTH_IN, 3.6), squeeze=False)
    colours = {"ring": STEP_COLOURS[0], "tree": STEP_COLOURS[1],
               "double_tree": STEP_COLOURS[3], "halving_doubling": STEP_COLOURS[2],
               "library": "#444444"}
    for ax, n in zip(axes[0], sizes_n):
        t = timings[n]
        for a, colour in colours.items():
            if a in t:
                ax.plot(t["sizes"], t[a], "o-", color=colour, lw=1.4, ms=4, label=NAMES[a])
            if a in predictions.get(n, {}):
                ax.plot(t["sizes"], predictions[n][a], "--", color=colour, lw=1.0)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("S (bytes)")
        why = "" if n in predictions else f"\nno model: {unfitted.get(n, 'no fit')}"
        ax.set_title(f"{n} ranks{why}", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("µs per call (fastest batch)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8.5, frameon=False)
    fig.suptitle("measured (solid); the α-β model from each world size's ring fit (dashed)",
                 fontsize=10.5)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    plt.close(fig)
    return fig


def draw_broadcasts(n: int):
    """The chain and the binomial tree from rank 0, steps numbered (the model)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(CONTENT_WIDTH_IN * 0.75, 2.8))
    pos = _circle(n)
    for ax in axes:
        ax.set_aspect("equal")
        ax.set_axis_off()
        ax.set_xlim(-1.35, 1.35)
        ax.set_ylim(-1.35, 1.35)
    for r in range(n - 1):
        _arrow(axes[0], pos[r], pos[r + 1], STEP_COLOURS[r % 8], rad=-0.2, label=str(r + 1))
    step, k = 1, 0
    while step < n:
        for r in range(n):
            if step in [c - r for c in binomial_children(r, n)]:
                _arrow(axes[1], pos[r], pos[r + step], STEP_COLOURS[k % 8], rad=0.1,
                       label=str(k + 1))
        step, k = step * 2, k + 1
    for ax in axes:
        for r in range(n):
            _node(ax, pos[r], r)
    axes[0].set_title(f"chain: {n - 1} steps", fontsize=9.5)
    axes[1].set_title(f"binomial tree: {k} steps", fontsize=9.5)
    plt.close(fig)
    return fig
