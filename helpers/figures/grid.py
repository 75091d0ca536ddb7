"""A grid with one column per rank and one row per event, as notebooks 13 and 28 draw
theirs: rank names on top, the rows' labels on the left, no frame, the legend below."""
from __future__ import annotations

from typing import Any, Sequence


def rank_grid(ax: Any, world_size: int, row_labels: Sequence[str],
              label_size: float = 11) -> None:
    """Lay out `ax` for rows of boxes at (rank, row) of unit size, row 0 on top."""
    ax.set_xlim(0, world_size)
    ax.set_ylim(len(row_labels), 0)
    ax.set_xticks([r + 0.5 for r in range(world_size)],
                  [f"rank {r}" for r in range(world_size)], fontsize=11)
    ax.set_yticks([i + 0.5 for i in range(len(row_labels))], list(row_labels),
                  fontsize=label_size)
    ax.tick_params(length=0)
    ax.xaxis.tick_top()
    for side in ax.spines.values():
        side.set_visible(False)


def legend_below(ax: Any, kinds: Sequence[tuple[str, str]], fontsize: float = 10,
                 edge: str | None = None) -> None:
    """One patch per (colour, label), in a row under the grid."""
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=c, edgecolor=edge or c, label=t) for c, t in kinds]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02),
              ncol=len(kinds), fontsize=fontsize, frameon=False)
