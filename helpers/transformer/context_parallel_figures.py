"""Notebook 21's figures of what each rank holds: its tokens under both splits, the K/V
bytes it keeps (ring against all-gather, the model), and what torch's context_parallel
raised on it, kernel by kernel.

Every artist that carries a fact has a gid ("token:zigzag:1:18" = rank 1 holds token 18
under the zig-zag split), so that tests read the drawing back.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from helpers.figures.animation import CONTENT_WIDTH_IN
from helpers.training.schemes import INK, rank_colour

ERROR = "#f4c7c3"
NAMES = {"contiguous": "contiguous split", "zigzag": "zig-zag split"}


def plot_tokens(positions: Mapping[str, Sequence[Sequence[int]]], seq: int,
                title: str) -> Figure:
    """One panel per split (`positions[layout][r]`: the tokens rank r holds), one row per
    rank, one square per token of the sequence, filled where that rank holds it."""
    import matplotlib.pyplot as plt

    n = len(next(iter(positions.values())))
    fig, axes = plt.subplots(1, len(positions), figsize=(CONTENT_WIDTH_IN, 0.85 + 0.3 * n),
                             dpi=100, squeeze=False)
    for ax, (layout, per_rank) in zip(axes[0], positions.items()):
        for r, mine in enumerate(per_rank):
            for t in range(seq):
                held = t in mine
                ax.add_patch(Rectangle((t + 0.06, r + 0.1), 0.88, 0.8,
                                       facecolor=rank_colour(r) if held else "#f2f2f2",
                                       edgecolor="none", gid=f"token:{layout}:{r}:{t}"
                                       if held else None))
        ax.set_xlim(0, seq)
        ax.set_ylim(n, 0)
        ax.set_xticks([t + 0.5 for t in range(0, seq, max(1, seq // 4))],
                      [str(t) for t in range(0, seq, max(1, seq // 4))], fontsize=9)
        ax.set_yticks([r + 0.5 for r in range(n)], [f"rank {r}" for r in range(n)],
                      fontsize=9)
        ax.tick_params(length=0)
        ax.spines[:].set_visible(False)
        ax.set_xlabel("token", fontsize=9)
        ax.set_title(NAMES.get(layout, layout), loc="left", fontsize=10)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    plt.close(fig)
    return fig


def plot_errors(errors: Sequence[Mapping[str, str | None]], title: str) -> Figure:
    """One row per rank, one column per kernel (`errors[r][kernel]`: "Type: message", or
    None where the call ran): the exception's type, red where it raised."""
    import matplotlib.pyplot as plt

    kernels = list(errors[0])
    n = len(errors)
    fig, ax = plt.subplots(figsize=(CONTENT_WIDTH_IN, 0.75 + 0.3 * n), dpi=100)
    for r, mine in enumerate(errors):
        for j, kernel in enumerate(kernels):
            error = mine.get(kernel)
            ax.add_patch(Rectangle((j + 0.03, r + 0.08), 0.94, 0.84, gid=f"error:{r}:{kernel}",
                                   facecolor=ERROR if error else rank_colour(r, True),
                                   edgecolor="#d9534f" if error else rank_colour(r)))
            ax.text(j + 0.5, r + 0.5, error.split(":")[0] if error else "ran", ha="center",
                    va="center", fontsize=9, color=INK)
    ax.set_xlim(0, len(kernels))
    ax.set_ylim(n, 0)
    ax.set_xticks([j + 0.5 for j in range(len(kernels))],
                  [f"kernel: {k}" for k in kernels], fontsize=9)
    ax.xaxis.tick_top()
    ax.set_yticks([r + 0.5 for r in range(n)], [f"rank {r}" for r in range(n)], fontsize=9)
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.set_title(title, loc="left", fontsize=10.5, pad=22)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_memory(kv_bytes: int, world_sizes: Sequence[int], world_size: int,
                title: str) -> Figure:
    """The model of the K and V one rank keeps at once, per world size: the ring two blocks
    (the one it merges, the one arriving: 2 × kv_bytes / n), an all-gather all of them
    (kv_bytes, the whole sequence's K and V); this run's world size outlined."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(CONTENT_WIDTH_IN, 2.4), dpi=100)
    for i, n in enumerate(world_sizes):
        ring, gathered = 2 * kv_bytes / n / 1024, kv_bytes / 1024      # KiB
        bold = 2.2 if n == world_size else 0.8
        ax.bar(i - 0.2, ring, width=0.38, color="#9ecae1", edgecolor=INK, lw=bold,
               gid=f"ring:{n}")
        ax.bar(i + 0.2, gathered, width=0.38, color="#dddddd", edgecolor=INK, lw=bold,
               hatch="//", gid=f"gathered:{n}")
        ax.text(i - 0.2, ring * 1.03, f"{ring:.1f}", ha="center", va="bottom", fontsize=9)
        ax.text(i + 0.2, gathered * 1.03, f"{gathered:.1f}", ha="center", va="bottom",
                fontsize=9)
    ax.set_xticks(range(len(world_sizes)),
                  [f"{n} ranks" + (" (this run)" if n == world_size else "")
                   for n in world_sizes], fontsize=9)
    ax.set_ylim(0, kv_bytes / 1024 * 1.6)
    ax.set_ylabel("KiB of K and V a rank holds", fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(handles=[Patch(facecolor="#9ecae1", edgecolor=INK,
                             label="ring: two blocks, 2 × S / n"),
                       Patch(facecolor="#dddddd", edgecolor=INK, hatch="//",
                             label="all-gather: all n blocks, S")],
              loc="upper right", ncol=2, frameon=False, fontsize=9)
    ax.set_title(title, loc="left", fontsize=10.5)
    fig.tight_layout()
    plt.close(fig)
    return fig
