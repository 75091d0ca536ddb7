"""Process groups and device meshes (notebook 14): the mesh shape for a world size, the
reference of the hierarchical all_reduce phase by phase, its bytes (the ring model's
formulas, and where the measured bytes went: within a row or across rows), and the drawings.

The taught calls (`dist.new_group`, `init_device_mesh`, the three phases) stay in the
notebook's `%%px` cells; this module only plans, checks and draws.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from helpers.bench.wire import peer_matrix
from helpers.figures.column import COLUMN_IN

CELL_PT = 8.0       # a value in a cell: 11 px on the page
PHASES = ("input", "reduce_scatter in rows", "all_reduce across rows", "all_gather in rows")


def mesh_shape(world_size: int) -> tuple[int, int]:
    """(rows, cols) with rows·cols = world_size, rows ≤ cols, as square as possible: the
    (dp, tp) mesh of notebooks 14 and 19, rows the data-parallel replicas.

    A prime world size has no other factors: 1 × world_size, a single row.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    rows = max(a for a in range(1, int(world_size ** 0.5) + 1) if world_size % a == 0)
    return rows, world_size // rows


def coordinate(rank: int, shape: tuple[int, int]) -> tuple[int, int]:
    """(row, col) of `rank` in a row-major mesh of `shape` (init_device_mesh's layout)."""
    return divmod(rank, shape[1])


def hierarchical_reference(inputs: Sequence[Sequence[float]], shape: tuple[int, int]
                           ) -> list[dict[str, list[float]]]:
    """What each rank holds after each phase, computed with NumPy from the inputs.

    Rank (row, col) keeps chunk `col` after the reduce_scatter in its row (its row's
    sum), then the sum over all rows of that chunk, then the whole sum after the gather.
    """
    rows, cols = shape
    x = np.asarray(inputs, dtype=float)
    if x.shape[0] != rows * cols or x.shape[1] % cols:
        raise ValueError(f"{x.shape[0]} inputs of {x.shape[1]} elements do not fit a "
                         f"{rows} × {cols} mesh (the length must divide by {cols})")
    chunk = x.shape[1] // cols
    grid = x.reshape(rows, cols, x.shape[1])
    row_sums, total = grid.sum(axis=1), x.sum(axis=0)
    out = []
    for rank in range(rows * cols):
        row, col = coordinate(rank, shape)
        part = slice(col * chunk, (col + 1) * chunk)
        out.append({"input": x[rank].tolist(),
                    "reduce_scatter in rows": row_sums[row, part].tolist(),
                    "all_reduce across rows": total[part].tolist(),
                    "all_gather in rows": total.tolist()})
    return out


def row_crossings(sockets: Sequence[Mapping[str, int]], shape: tuple[int, int]
                  ) -> dict[str, Any]:
    """Every rank's `wire.sockets` of one phase → where each rank's bytes went.

    "matrix": bytes rank i wrote to rank j; "between rows" / "in rows": per rank, the
    bytes written to ranks of other rows / of its own row; "other": to no rank (0).
    """
    matrix, other = peer_matrix(sockets)
    cols = shape[1]

    def to(rank: int, same_row: bool) -> int:
        return sum(b for peer, b in enumerate(matrix[rank])
                   if (peer // cols == rank // cols) == same_row)

    return {"matrix": matrix, "other": other,
            "between rows": [to(r, False) for r in range(len(matrix))],
            "in rows": [to(r, True) for r in range(len(matrix))]}


def traffic_rows(traffic: Sequence[Mapping[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per rank: each phase's bytes as "measured / model" (measured: gloo; None on NCCL)."""
    rows = []
    for rank, phases in enumerate(traffic):
        row: dict[str, Any] = {"rank": rank}
        for phase, t in phases.items():
            measured = "not measured" if t["measured"] is None else f"{t['measured']:,}"
            row[phase] = f"{measured} / {t['model']:,.0f}"
        rows.append(row)
    return rows


def plot_mesh(shape: tuple[int, int], coordinates: Sequence[Sequence[int]],
              row_groups: Sequence[Sequence[int]], col_groups: Sequence[Sequence[int]],
              title: str = ""):
    """The mesh as a grid: each rank at the coordinate it reported, its row and column."""
    import matplotlib.pyplot as plt

    rows, cols = shape
    fig, ax = plt.subplots(figsize=(1.9 * cols + 2.2, 1.5 * rows + 1.2))
    for rank, (row, col) in enumerate(coordinates):
        ax.add_patch(plt.Rectangle((col - 0.42, row - 0.38), 0.84, 0.76, facecolor="#dbe9f6",
                                   edgecolor="#1f4e79"))
        ax.text(col, row - 0.08, f"rank {rank}", ha="center", va="center", fontsize=11,
                weight="bold")
        ax.text(col, row + 0.2, f"({row}, {col})", ha="center", va="center", fontsize=9)
    for row in range(rows):
        members = sorted(r for r, c in enumerate(coordinates) if c[0] == row)
        ax.text(cols - 0.45, row, f"  tp group {list(row_groups[members[0]])}", va="center",
                fontsize=9, color="#9c2f2f")
    for col in range(cols):
        members = sorted(r for r, c in enumerate(coordinates) if c[1] == col)
        ax.text(col, rows - 0.5, f"dp group\n{list(col_groups[members[0]])}", ha="center",
                va="top", fontsize=9, color="#2f6f3f")
    ax.set_xlim(-0.6, cols + 0.9)
    ax.set_ylim(rows + 0.2, -0.6)
    ax.set_xticks(range(cols), [f"tp {c}" for c in range(cols)])
    ax.set_yticks(range(rows), [f"dp {r}" for r in range(rows)])
    ax.set_title(title or f"device mesh {rows} × {cols}: (dp, tp) coordinate of each rank")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def plot_phases(states: Sequence[dict[str, Sequence[float]]], shape: tuple[int, int],
                title: str = ""):
    """One panel per phase, two a row: a rank per row, the tensor's positions across
    (shards in place)."""
    import matplotlib.pyplot as plt

    rows, cols = shape
    n = rows * cols
    length = len(states[0]["input"])
    chunk = length // cols
    grid_rows = -(-len(PHASES) // 2)
    fig, axes = plt.subplots(grid_rows, 2, squeeze=False,
                             figsize=(COLUMN_IN, grid_rows * (0.32 * n + 1.0) + 0.5))
    for ax, phase in zip(axes.flat, PHASES):
        grid = np.full((n, length), np.nan)
        for rank, state in enumerate(states):
            values = np.asarray(state[phase], dtype=float)
            start = 0 if len(values) == length else (rank % cols) * chunk
            grid[rank, start:start + len(values)] = values
        image = ax.imshow(grid, cmap="viridis", aspect="auto")
        for (r, i), v in np.ndenumerate(grid):
            if not np.isnan(v):                  # dark text on viridis' light end
                light = image.norm(v) > 0.6
                ax.text(i, r, f"{v:g}", ha="center", va="center", fontsize=CELL_PT,
                        color="black" if light else "white")
        ax.set_title(phase, fontsize=10)
        ax.set_yticks(range(n), [f"rank {r}" for r in range(n)])
        ax.set_xticks(range(length))
        ax.set_xlabel("element")
    for ax in axes.flat[len(PHASES):]:
        ax.set_visible(False)
    fig.suptitle(title or "hierarchical all_reduce: what every rank holds after each phase",
                 fontsize=11)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def plot_crossings(crossings: Mapping[str, Mapping[str, Any]], shape: tuple[int, int],
                   title: str = ""):
    """One panel per phase: bytes rank i wrote to rank j, measured; the rows boxed."""
    import matplotlib.pyplot as plt

    rows, cols = shape
    n = rows * cols
    fig, axes = plt.subplots(1, len(crossings), figsize=(COLUMN_IN, 0.5 * n + 2.2),
                             squeeze=False)
    for ax, (phase, seen) in zip(axes[0], crossings.items()):
        grid = np.asarray(seen["matrix"], dtype=float)
        ax.imshow(grid, cmap="Blues", vmin=0)
        for (i, j), value in np.ndenumerate(grid):
            ax.text(j, i, f"{value / 1024:.0f}K" if value >= 1024 else f"{value:.0f}",
                    ha="center", va="center", fontsize=CELL_PT,
                    color="white" if value > grid.max() / 2 else "black")
        for row in range(rows):   # each mesh row's block: bytes inside it stay in the row
            ax.add_patch(plt.Rectangle((row * cols - 0.5, row * cols - 0.5), cols, cols,
                                       fill=False, edgecolor="#c2410c", lw=2))
        ax.set_title(f"{phase}\nacross rows, all ranks:\n{sum(seen['between rows']):,} B",
                     fontsize=9)
        ax.set_xticks(range(n), [str(r) for r in range(n)])
        ax.set_yticks(range(n), [f"rank {r}" for r in range(n)] if ax is axes[0, 0] else [])
        ax.set_xlabel("to rank")
    fig.suptitle(title or "bytes written from rank to rank, per phase (boxes: a mesh row)",
                 fontsize=11)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
