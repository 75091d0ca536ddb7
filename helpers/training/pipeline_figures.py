"""Notebook 18's (and 24's) pipeline figures: the measured timelines of every rank and the
bubble against the formula (helpers.training.pipeline measures them)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from helpers.figures.column import COLUMN_IN
from helpers.training.pipeline import (COLOURS, COMPUTE, bubble_fraction, step_time,
                                       theory_bubble)

WIDTH_IN = COLUMN_IN            # the page's column at dpi 100: figures shown unscaled
LABEL_PT, LEGEND_PT = 7.5, 8.5  # 10.4 px and 11.8 px on the page
LEGEND_ROW_IN = 0.24            # one row of a legend under the panels


def plot_timelines(timelines: dict[str, Sequence[Sequence]], title: str):
    """One panel per schedule, one row per rank: coloured spans, idle left blank. A compute
    span wide enough for its micro-batch's number at LABEL_PT carries it; the colours' key
    sits under the panels."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    n_ranks = len(next(iter(timelines.values())))
    handles = [Patch(color=c, label=k) for k, c in COLOURS.items()]
    handles.append(Patch(facecolor="white", edgecolor="grey", label="idle (nothing recorded)"))
    legend_rows = -(-len(handles) // 3)
    fig, axes = plt.subplots(len(timelines), 1, squeeze=False,
                             figsize=(WIDTH_IN, 1.3 + 0.55 * len(timelines) * n_ranks
                                      + legend_rows * LEGEND_ROW_IN))
    axes_in = 0.78 * WIDTH_IN                    # the panels' width, less the rank labels
    for ax, (name, events_by_rank) in zip(axes[:, 0], timelines.items()):
        total = step_time(events_by_rank)
        for r, events in enumerate(events_by_rank):
            ax.broken_barh([(begin * 1e3, (end - begin) * 1e3) for _, _, begin, end in events],
                           (r - 0.4, 0.8), color=[COLOURS[kind] for kind, *_ in events])
            for kind, mb, begin, end in events:
                if (kind in COMPUTE and mb is not None
                        and _fits(str(mb), (end - begin) / total * axes_in)):
                    ax.text((begin + end) / 2 * 1e3, r, str(mb), ha="center", va="center",
                            fontsize=LABEL_PT, color="white")
        bubbles = bubble_fraction(events_by_rank)
        ax.set_yticks(range(len(events_by_rank)),
                      [f"rank {r} · bubble {b:.0%}" for r, b in enumerate(bubbles)])
        ax.invert_yaxis()
        ax.set_title(f"{name}: step {total * 1e3:.1f} ms", fontsize=10)
    axes[-1, 0].set_xlabel("ms since the common start (white space: idle)")
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=LEGEND_PT, frameon=False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    fig.tight_layout(rect=(0, (legend_rows * LEGEND_ROW_IN + 0.1) / fig.get_figheight(), 1, 1))
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def _fits(label: str, span_in: float) -> bool:
    """Whether `label` at LABEL_PT fits in a span `span_in` inches wide (digits ≈ 0.6 em)."""
    return len(label) * 0.6 * LABEL_PT / 72 + 0.03 <= span_in


def bubble_panels(tables: dict[str, Sequence[dict]] | Sequence[dict], panel_width: float,
                  extra_width: float):
    """A row of bubble panels, one per table ({panel title: rows with "m"}; a plain list of
    rows is one panel): the figure and [(axis, rows)], each axis over m (log 2, the rows'
    m as ticks) and the bubble fraction (0 to 1, shared)."""
    import matplotlib.pyplot as plt

    if not isinstance(tables, dict):
        tables = {"": tables}
    fig, axes = plt.subplots(1, len(tables), figsize=(panel_width * len(tables) + extra_width, 4),
                             squeeze=False, sharey=True)
    for ax, (panel, table) in zip(axes[0], tables.items()):
        ms = sorted({row["m"] for row in table})
        ax.set_xscale("log", base=2)
        ax.set_xticks(ms, [str(m) for m in ms])
        ax.minorticks_off()
        ax.set_xlabel("micro-batches m")
        ax.set_ylim(0, 1)
        ax.set_title(panel, fontsize=10)
    axes[0, 0].set_ylabel("bubble fraction")
    return fig, list(zip(axes[0], tables.values()))


def plot_bubbles(tables: dict[str, Sequence[dict]] | Sequence[dict], n_stages: int,
                 title: str):
    """Measured bubble (mean over ranks) per schedule against (p − 1)/(m + p − 1): one
    panel per table ({panel title: rows}; a plain list of rows is one panel), the key
    under the panels."""
    import matplotlib.pyplot as plt

    count = len(tables) if isinstance(tables, dict) else 1
    fig, panels = bubble_panels(tables, min(4.6, (WIDTH_IN - 0.6) / count), 0.6)
    for ax, table in panels:
        ms = sorted({row["m"] for row in table})
        dense = np.linspace(min(ms), max(ms), 200).tolist()
        ax.plot(dense, [theory_bubble(n_stages, m) for m in dense], "k--",
                label=f"(p − 1)/(m + p − 1), p = {n_stages}")
        for schedule, marker in (("GPipe", "o"), ("1F1B", "s")):
            rows = sorted((r for r in table if r["schedule"] == schedule), key=lambda r: r["m"])
            ax.plot([r["m"] for r in rows], [r["measured"] for r in rows], marker=marker,
                    label=f"{schedule}, measured")
    handles, labels = panels[-1][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=LEGEND_PT, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.set_figheight(fig.get_figheight() + LEGEND_ROW_IN)
    fig.tight_layout(rect=(0, (LEGEND_ROW_IN + 0.1) / fig.get_figheight(), 1, 1))
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
