"""Notebook 21's drawings and plots: the scheme (our own drawing), the work per rank, the
measured timelines and the ring of K/V blocks, step by step, from the run's record.

Each rank has its colour of the series (`helpers.training.schemes.rank_colour`); artists
that carry a fact have a gid ("cell:contiguous:2:0" = query chunk 2, key chunk 0), so that
tests read the drawing.
"""
from __future__ import annotations

import math
from typing import Sequence

from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, Patch, Rectangle

from helpers.figures.animation import CONTENT_WIDTH_IN, MIN_FONT_PT, step_animation
from helpers.training.schemes import INK, MUTED, rank_colour
from helpers.transformer.block import SEQ
from helpers.transformer.ring_attention import LAYOUTS, token_positions

SKIPPED = "#d9d9d9"
COMPUTE, POST, WAIT = "#4c8bf5", "#9b59b6", "#d9534f"
NAMES = {"contiguous": "contiguous split", "zigzag": "zig-zag split"}


def _chunk_owner(n: int, layout: str) -> list[int]:
    """The rank that holds each chunk of the sequence, in sequence order."""
    owner = [0] * 2 * n
    size = SEQ // (2 * n)
    for r in range(n):
        for p in token_positions(r, n, layout)[::size]:
            owner[p // size] = r
    return owner


def _ring(ax, n: int) -> None:
    """The ranks on a circle, each keeping its Q, K/V passed on to rank + 1."""
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-2.05, 1.6)
    ax.set_aspect("equal")
    ax.set_axis_off()
    at = [(math.sin(2 * math.pi * r / n), math.cos(2 * math.pi * r / n)) for r in range(n)]
    for r, (x, y) in enumerate(at):
        # radius 0.5: both labels inside the circle (helpers.figures.audit checks it)
        ax.add_patch(Circle((x, y), 0.5, facecolor=rank_colour(r, True),
                            edgecolor=rank_colour(r), lw=2, gid=f"ring:{r}"))
        ax.text(x, y + 0.1, f"rank {r}", ha="center", va="center", fontsize=8.5,
                fontweight="bold")
        ax.text(x, y - 0.17, f"Q{r} stays", ha="center", va="center", fontsize=7.5)
        nx, ny = at[(r + 1) % n]
        bend = 0.35 if n > 2 else 0.5
        ax.add_patch(FancyArrowPatch((x, y), (nx, ny), connectionstyle=f"arc3,rad=-{bend}",
                                     arrowstyle="-|>,head_length=5,head_width=2.6",
                                     shrinkA=28, shrinkB=28, color=INK, lw=1.3,
                                     gid=f"pass:{r}"))
    ax.text(0, -1.62, "K/V blocks go rank → rank + 1,\nn − 1 steps", ha="center",
            va="top", fontsize=8.5, color=MUTED)


def _matrix(ax, n: int, layout: str, causal: bool) -> None:
    """The score matrix, queries down, keys across, cut into chunks: who computes each
    piece (the query's rank), at which step its K/V arrives, grey where causal skips it."""
    owner = _chunk_owner(n, layout)
    c = len(owner)
    ax.set_xlim(-0.9, c)
    ax.set_ylim(c, -0.9)
    ax.set_aspect("equal")
    ax.set_axis_off()
    font = 8.5 if c <= 4 else 7.5
    for j, r in enumerate(owner):      # the sequence, along the top and the left
        for x, y in ((j, -0.7), (-0.7, j)):
            ax.add_patch(Rectangle((x + 0.04 if y < 0 else x, y if y < 0 else y + 0.04),
                                   0.92 if y < 0 else 0.55, 0.55 if y < 0 else 0.92,
                                   facecolor=rank_colour(r), edgecolor="none"))
    for i, q_rank in enumerate(owner):
        for j, k_rank in enumerate(owner):
            future = causal and j > i
            face = SKIPPED if future else rank_colour(q_rank, True)
            ax.add_patch(Rectangle((j + 0.04, i + 0.04), 0.92, 0.92, facecolor=face,
                                   edgecolor="white", gid=f"cell:{layout}:{i}:{j}"))
            if causal and i == j:      # the diagonal: the upper half is masked
                ax.add_patch(Rectangle((j + 0.04, i + 0.04), 0.92, 0.92, facecolor="none",
                                       edgecolor=SKIPPED, hatch="////", lw=0))
            if not future:
                ax.text(j + 0.5, i + 0.5, str((q_rank - k_rank) % n), ha="center",
                        va="center", fontsize=font, color=INK)
    ax.set_title(NAMES[layout], fontsize=10, loc="left")


def draw_ring_attention(world_size: int, causal: bool = True) -> Figure:
    """The scheme: the ring (Q stays, K/V moves) and the score matrix for both splits."""
    import matplotlib.pyplot as plt

    if world_size < 1:
        raise ValueError(f"a ring needs 1+ ranks, got {world_size}")
    fig = plt.figure(figsize=(CONTENT_WIDTH_IN, 3.6), dpi=100)
    grid = fig.add_gridspec(1, 3, width_ratios=[0.8, 1, 1], left=0.01, right=0.99,
                            top=0.82, bottom=0.02, wspace=0.08)
    _ring(fig.add_subplot(grid[0]), world_size)
    for k, layout in enumerate(LAYOUTS):
        _matrix(fig.add_subplot(grid[k + 1]), world_size, layout, causal)
    fig.suptitle(f"Ring attention on {world_size} ranks: 24 tokens, queries (rows) stay, "
                 "keys and values (columns) travel", fontsize=11, x=0.01, ha="left",
                 fontweight="bold")
    fig.text(0.01, 0.885, "number = the step at which that rank merges that K/V chunk; "
             "grey = in the future: skipped (causal); hatched: masked inside the chunk",
             fontsize=8.5, color=MUTED)
    plt.close(fig)
    return fig


def plot_work(load: Sequence[dict], title: str) -> Figure:
    """Per rank and split: scores computed (counted) and compute time (measured)."""
    import matplotlib.pyplot as plt

    n = len(load)
    fig, axes = plt.subplots(1, 2, figsize=(CONTENT_WIDTH_IN, 3.3), dpi=100)
    for ax, key, label in ((axes[0], "scores", "query·key scores computed"),
                           (axes[1], "compute_ms", "compute time (ms), measured")):
        for k, layout in enumerate(LAYOUTS):
            for r in range(n):
                ax.bar(r + (k - 0.5) * 0.38, load[r][layout][key], width=0.36,
                       color=rank_colour(r, light=k == 1), edgecolor=rank_colour(r),
                       hatch="//" if k == 1 else None, gid=f"{key}:{layout}:{r}")
        ax.set_xticks(range(n), [f"rank {r}" + ("\nblocks {} | {}".format(
            *(load[r][layout]["blocks"] for layout in LAYOUTS)) if key == "scores" else "")
            for r in range(n)])
        ax.set_ylabel(label)
        ax.spines[["top", "right"]].set_visible(False)
        spread = {layout: [load[r][layout][key] for r in range(n)] for layout in LAYOUTS}
        ax.set_title("slowest / fastest rank:\n" + ", ".join(
            f"{NAMES[layout].split()[0]} {max(v) / min(v):.2f}×"
            for layout, v in spread.items()), fontsize=9, loc="left")
    fig.legend(handles=[Patch(facecolor="#999999", label="contiguous"),
                        Patch(facecolor="#dddddd", edgecolor="#999999", hatch="//",
                              label="zig-zag")],
               loc="upper right", ncol=2, frameon=False, fontsize=9)
    fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    plt.close(fig)
    return fig


def plot_timelines(timelines: dict[str, Sequence[Sequence]], title: str) -> Figure:
    """One panel per loop, one row per rank: compute (blue), posting the transfer (purple)
    and waiting for the next K/V block (red), in ms since the barrier, as each rank
    measured them."""
    import matplotlib.pyplot as plt

    names = list(timelines)
    n = len(timelines[names[0]])
    end = max(e[3] for events in timelines.values() for rank in events for e in rank) * 1e3
    fig, axes = plt.subplots(len(names), 1, figsize=(CONTENT_WIDTH_IN, 1.0 + 0.9 * n),
                             dpi=100, sharex=True)
    for ax, name in zip(axes, names):
        for r, events in enumerate(timelines[name]):
            for kind, step, begin, finish in events:
                ax.barh(r, (finish - begin) * 1e3, left=begin * 1e3, height=0.7,
                        color={"compute": COMPUTE, "post": POST}.get(kind, WAIT),
                        gid=f"{name}:{r}:{kind}:{step}")
            waited = sum(e[3] - e[2] for e in events if e[0] == "wait") * 1e3
            ax.text(end * 1.03, r, f"waited {waited:.1f} ms", va="center", fontsize=9,
                    gid=f"{name}:{r}:waited")
        loop = max(e[3] for events in timelines[name] for e in events) * 1e3
        ax.set_yticks(range(n), [f"rank {r}" for r in range(n)])
        ax.set_ylim(n - 0.4, -0.6)
        ax.set_xlim(0, end * 1.2)
        ax.set_title(f"{name}: the whole loop {loop:.1f} ms", fontsize=10, loc="left")
        ax.spines[["top", "right"]].set_visible(False)
    axes[-1].set_xlabel("ms since the barrier")
    fig.legend(handles=[Patch(color=COMPUTE, label="compute (merge a block)"),
                        Patch(color=POST, label="post the transfer"),
                        Patch(color=WAIT, label="wait for the next K/V block")],
               loc="upper left", bbox_to_anchor=(0.0, 0.95), ncol=3, frameon=False,
               fontsize=9)
    fig.suptitle(title, x=0.01, y=0.99, ha="left", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    plt.close(fig)
    return fig


class _KVRing:
    """Ranks on a circle, each with its Q and the K/V block it holds; between steps the
    blocks in flight to the next rank."""

    def __init__(self, held: Sequence[Sequence[int]]):
        import matplotlib.pyplot as plt

        self.held, self.n = [list(h) for h in held], len(held)
        self.steps = len(self.held[0])
        self.frame_count = 2 * self.steps - 1
        n = self.n
        self.fig = plt.figure(figsize=(CONTENT_WIDTH_IN, 3.9), dpi=100)
        ax = self.fig.add_axes([0, 0, 1, 0.88])
        ax.set_xlim(-2.9, 2.9)
        ax.set_ylim(-1.55, 1.55)
        ax.set_aspect("equal")
        ax.set_axis_off()
        self.title = self.fig.text(0.01, 0.95, "", fontsize=11, fontweight="bold", va="center")
        self.at = [(1.15 * math.sin(2 * math.pi * r / n), 1.05 * math.cos(2 * math.pi * r / n))
                   for r in range(n)]
        self.blocks, self.labels = [], []
        for r, (x, y) in enumerate(self.at):
            ax.add_patch(Rectangle((x - 0.55, y - 0.25), 0.5, 0.5, facecolor=rank_colour(r),
                                   edgecolor=INK, lw=0.8))
            ax.text(x - 0.3, y, f"Q{r}", ha="center", va="center", fontsize=9.5,
                    color="white", fontweight="bold")
            ax.text(x - 0.3, y + 0.38, f"rank {r}", ha="center", va="center", fontsize=9)
            box = ax.add_patch(Rectangle((x + 0.05, y - 0.25), 0.5, 0.5, facecolor="white",
                                         edgecolor=INK, lw=0.8))
            self.blocks.append(box)
            self.labels.append(ax.text(x + 0.3, y, "", ha="center", va="center",
                                       fontsize=9, fontweight="bold"))
            nx, ny = self.at[(r + 1) % n]
            ax.add_patch(FancyArrowPatch((x, y), (nx, ny), connectionstyle="arc3,rad=-0.3",
                                         arrowstyle="-|>,head_length=5,head_width=2.6",
                                         shrinkA=30, shrinkB=30, color="#aaaaaa", lw=1.0))
        self.moving = [ax.text(0, 0, "", ha="center", va="center", fontsize=9, zorder=6,
                               visible=False, fontweight="bold",
                               bbox=dict(boxstyle="round,pad=0.3", fc="white", ec=INK, lw=0.8))
                       for _ in range(n)]
        self.fig.legend(handles=[Patch(facecolor=rank_colour(r), label=f"rank {r}'s tokens")
                                 for r in range(n)],
                        loc="center right", frameon=False, fontsize=max(MIN_FONT_PT, 9))
        plt.close(self.fig)

    def draw_frame(self, i: int) -> None:
        step, in_flight = (i + 1) // 2, i % 2 == 1
        shown = step - 1 if in_flight else step
        for r in range(self.n):
            owner = self.held[r][shown]
            self.blocks[r].set_facecolor("white" if in_flight else rank_colour(owner))
            self.labels[r].set_text("" if in_flight else f"KV{owner}")
            token = self.moving[r]
            token.set_visible(in_flight)
            if in_flight:
                (x, y), (nx, ny) = self.at[r], self.at[(r + 1) % self.n]
                token.set_position(((x + nx) / 2 * 1.35, (y + ny) / 2 * 1.35)
                                   if self.n > 2 else ((x + nx) / 2 + (-0.6 if r else 0.6),
                                                       (y + ny) / 2))
                token.set_text(f"KV{owner}")
                token.get_bbox_patch().set_facecolor(rank_colour(owner, True))
        what = (f"step {step}: in flight to rank + 1" if in_flight else
                f"step {step}: each rank merges the K/V block it holds")
        self.title.set_text(f"{what} ({i + 1}/{self.frame_count})")

    def read_drawn(self) -> dict:
        return {"title": self.title.get_text(),
                "held": [label.get_text() for label in self.labels],
                "moving": [t.get_text() for t in self.moving if t.get_visible()]}


def animate_kv_ring(held: Sequence[Sequence[int]]) -> FuncAnimation:
    """Frames from the run's record: `held[r][s]` = whose K/V block rank r held at step s;
    per step the blocks merged, then (between steps) the blocks in flight."""
    if len(held) < 2 or any(len(h) != len(held) for h in held):
        raise ValueError(f"held must be world_size lists of world_size owners, got {held}")
    drawing = _KVRing(held)
    drawing.draw_frame(0)
    return step_animation(drawing.fig, drawing.frame_count, drawing.draw_frame,
                          drawing.read_drawn)
