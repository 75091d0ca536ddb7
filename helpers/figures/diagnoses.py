"""Notebook 13's picture: every failed cell's diagnosis (helpers.runtime.diagnose), by rank."""
from __future__ import annotations

from typing import Sequence

from helpers.figures.grid import legend_below, rank_grid
from helpers.runtime.diagnose import SECONDARY

FAILED_LOST, FAILED_USABLE, NEVER, FINE = "#d92d20", "#f79009", "#98a2b3", "#12b76a"


def verdict(diagnosis: dict, rank: int) -> tuple[str, str]:
    """(colour, mark) of one rank in one diagnosis."""
    failed = {f["rank"]: f for f in diagnosis.get("failed", [])}
    if rank in failed:
        return (FAILED_USABLE, "✗") if failed[rank].get("survives") else (FAILED_LOST, "✗")
    if rank in set(diagnosis.get("skipped", [])) | set(diagnosis.get("absent", [])):
        return NEVER, "–"
    return FINE, "✓"


def label(number: int, diagnosis: dict, width: int = 44) -> str:
    """"3 · src/dst must be a rank of the group": the row's number and what the first
    rank that did more than wait was told (helpers.runtime.diagnose's meaning)."""
    failed = diagnosis.get("failed", [])
    meanings = [f["meaning"] for f in failed if f["meaning"] not in SECONDARY] or \
        [f["meaning"] for f in failed] or ["no rank failed"]
    text = meanings[0].split(" (")[0]
    return f"{number} · {text if len(text) <= width else text[:width - 1] + '…'}"


def plot_diagnoses(diagnoses: Sequence[dict], world_size: int):
    """One row per failed cell, oldest on top (`label`), one column per rank, coloured by
    what happened to that rank; the legend below the grid."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if not diagnoses:
        raise ValueError("no diagnosis to draw: no %%px cell has failed in this kernel")
    labels = [label(i + 1, d) for i, d in enumerate(diagnoses)]
    fig = plt.figure(figsize=(8, 0.5 * len(diagnoses) + 1.6), dpi=100)
    plt.close(fig)                       # made through pyplot so Jupyter shows it, once
    ax = fig.add_subplot()
    for row, diagnosis in enumerate(diagnoses):
        for rank in range(world_size):
            colour, mark = verdict(diagnosis, rank)
            ax.add_patch(Rectangle((rank + 0.05, row + 0.08), 0.9, 0.84, facecolor=colour,
                                   edgecolor="white"))
            ax.text(rank + 0.5, row + 0.5, mark, ha="center", va="center", fontsize=12,
                    color="white", fontweight="bold")
    rank_grid(ax, world_size, labels)
    legend_below(ax, [(FAILED_LOST, "✗ raised: group lost"),
                      (FAILED_USABLE, "✗ raised: group usable"),
                      (NEVER, "– never reached it"), (FINE, "✓ fine")])
    ax.set_title("Every failed cell of this notebook, by rank", fontsize=12, pad=28)
    return fig
