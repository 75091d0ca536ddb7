"""The bytes each rank sent, as bars: the ring model's beside what every rank measured.

One drawing for the byte tables of notebooks 19 and 20: a group of bars per call, phase or
process group; in each, the model's bar (hatched, labelled with its bytes) then one bar per
rank, in the rank's colour, for what that rank's process wrote (gloo; none on NCCL, where
nothing is measured). Where every rank measured the same, the group says so once.
"""
from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure

from helpers.figures.column import COLUMN_IN

MODEL_EDGE = "#222222"
LABEL_PT = 8.0          # 11 px on the page: the figure is shown unscaled


def _kb(value: float) -> str:
    """Bytes as the tables print them: 1,344 B, 58.8 kB."""
    return f"{value:,.0f} B" if value < 10_000 else f"{value / 1000:,.1f} kB"


def plot_sent(groups: Sequence[str], model: Sequence[float],
              measured: Sequence[Sequence[float | None]], title: str,
              model_label: str = "model: ring", measured_label: str = "measured (gloo)",
              height_in: float = 3.4) -> Figure:
    """Bars per group: `model[g]` and each rank's `measured[rank][g]` (None: not measured,
    no bar). Every bar carries a gid, "model:g" or "measured:g:rank", for the tests."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    from helpers.training.schemes import rank_colour

    if len(model) != len(groups) or any(len(m) != len(groups) for m in measured):
        raise ValueError("one model value and one measured value per rank for every group")
    n = len(measured)
    fig, ax = plt.subplots(figsize=(COLUMN_IN, height_in), dpi=100)
    width = 0.8 / (n + 1)
    top = max([*model, *(v for m in measured for v in m if v is not None), 1])
    for g, name in enumerate(groups):
        left = g - 0.4 + width / 2
        ax.bar(left, model[g], width * 0.92, color="white", edgecolor=MODEL_EDGE,
               hatch="///", linewidth=1.0, gid=f"model:{g}")
        ax.text(left, model[g] + top * 0.02, _kb(model[g]), rotation=90, ha="center",
                va="bottom", fontsize=LABEL_PT)
        values = [m[g] for m in measured]
        for r, value in enumerate(values):
            if value is not None:
                ax.bar(left + (r + 1) * width, value, width * 0.92, color=rank_colour(r),
                       gid=f"measured:{g}:{r}")
        if None not in values and len(set(values)) == 1:
            ax.text(g + width / 2, values[0] + top * 0.02, _kb(values[0]), ha="center",
                    va="bottom", fontsize=LABEL_PT, color=MODEL_EDGE)
    ax.set_xticks(range(len(groups)), groups, fontsize=LABEL_PT)
    ax.set_xlim(-0.55, len(groups) - 0.45)
    ax.set_ylim(0, top * 1.45)
    ax.yaxis.set_major_formatter("{x:,.0f}")
    ax.set_ylabel("bytes this rank sent", fontsize=9)
    ax.tick_params(axis="y", labelsize=LABEL_PT)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, loc="left", fontsize=10)
    handles = [Patch(facecolor="white", edgecolor=MODEL_EDGE, hatch="///", label=model_label)]
    if any(v is not None for m in measured for v in m):
        handles += [Patch(color=rank_colour(r), label=f"rank {r}") for r in range(n)]
        handles[1].set_label(f"{measured_label}: rank 0")
    ax.legend(handles=handles, loc="upper left", ncol=len(handles), fontsize=LABEL_PT,
              frameon=False, bbox_to_anchor=(0, 1.0), handlelength=1.4, columnspacing=1.0)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
