"""Figures of notebook 17 (tensor parallelism by hand) drawn from the values the ranks
return: the bytes each block of calls sent (the ring model beside gloo's measure, split
into the model's bytes and gloo's headers), the input gradient without Megatron's *f*,
and the bias added before the sum. Each returns a closed Figure, shown once as the value
of the notebook cell that calls it.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from helpers.figures.column import COLUMN_IN
from helpers.training.schemes import rank_colour


def plot_sent_bytes(groups: Sequence[str], model: Sequence[float],
                    measured: Sequence[Sequence[float | None]], title: str) -> Any:
    """Per group (a layer and phase): the ring model's bytes (hatched), then each rank's
    measured bytes, its lower part the model's bytes and its upper part what gloo wrote on
    top of them (its headers). A group without a call is labelled "no call". measured:
    per group, per rank (None: not measured, e.g. on NCCL)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    n = max(len(m) for m in measured)
    width = 0.8 / (n + 1)
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 3.9))
    top = max([*model, *(v or 0 for m in measured for v in m)]) or 1.0
    for g, (want, got) in enumerate(zip(model, measured)):
        ax.bar(g, want, width, color="none", edgecolor="k", hatch="//", gid="model")
        for r, value in enumerate(got):
            if value is None:
                continue
            x = g + (r + 1) * width
            base = min(want, value)
            ax.bar(x, base, width, color=rank_colour(r), gid=f"rank:{r}")
            ax.bar(x, value - base, width, bottom=base, color=rank_colour(r, light=True),
                   gid=f"headers:{r}")
        if not want and not any(got):
            ax.text(g + 0.4 - width / 2, 0.02 * top, "no call:\n0 B", ha="center",
                    va="bottom", fontsize=9)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, groups, fontsize=9)
    ax.set_ylabel("bytes this rank sent")
    ax.set_ylim(0, 1.12 * top)
    ax.set_title(title, fontsize=10)
    key = [Patch(facecolor="none", edgecolor="k", hatch="//", label="model: ring")]
    key += [Patch(color=rank_colour(r), label=f"rank {r}, measured") for r in range(n)]
    key += [Patch(color=rank_colour(0, light=True), label="lighter: + gloo's headers")]
    ax.legend(handles=key, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2),
              ncol=3, frameon=False)                 # below the axes: off the bars
    fig.tight_layout()
    plt.close(fig)
    return fig


def layer_groups(blocks_by_rank: Sequence[Sequence[dict]]) -> tuple[list, list, list]:
    """(labels, model, measured per group and rank) for `plot_sent_bytes`, from each rank's
    rows of `count_per_layer` (and any more `log_row`s): one group per layer and phase."""
    first = blocks_by_rank[0]
    labels = [row["layer"].replace("-parallel", "").replace(" + gather", "\n+ all_gather")
              + "\n" + row["phase"] for row in first]
    measured = [[rows[i]["measured"] for rows in blocks_by_rank] for i in range(len(first))]
    return labels, [row["model"] for row in first], measured


def phase_groups(hand_by_rank: Sequence[Sequence[dict]],
                 torch_by_rank: Sequence[Sequence[dict]]) -> tuple[list, list, list]:
    """(labels, model, measured) for `plot_sent_bytes`: per phase, the hand-built MLP's
    bytes and then torch's, both against the hand-built calls' model."""
    labels, model, measured = [], [], []
    for i, row in enumerate(hand_by_rank[0]):
        for who, by_rank in (("by hand", hand_by_rank), ("parallelize_module", torch_by_rank)):
            labels.append(f"{who}\n{row['phase']}")
            model.append(row["model"])
            measured.append([rows[i]["measured"] for rows in by_rank])
    return labels, model, measured


def _heatmap(ax: Any, values: np.ndarray, limit: float, title: str, colour: str) -> None:
    ax.imshow(values, aspect="auto", cmap="coolwarm", vmin=-limit, vmax=limit)
    ax.set_title(title, fontsize=10, color=colour)
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_edgecolor(colour)
        spine.set_linewidth(2.0)


def plot_input_grads(partials: Sequence[Any], with_f: Any, title: str) -> Any:
    """Without *f*: each rank's dL/dX (batch × features), what flowed through its own
    hidden features; their sum; and dL/dX with *f*, whose all_reduce computes that sum."""
    import matplotlib.pyplot as plt

    parts = [np.asarray(p, dtype=float) for p in partials]
    whole = np.asarray(with_f, dtype=float)
    n = len(parts)
    limit = float(max(abs(v).max() for v in [*parts, whole])) or 1.0
    fig, axes = plt.subplots(1, n + 2, figsize=(COLUMN_IN, 2.7))
    for r, values in enumerate(parts):
        sign = "+" if r < n - 1 else "="
        _heatmap(axes[r], values, limit, f"rank {r}\nwithout f  {sign}", rank_colour(r))
    _heatmap(axes[n], sum(parts), limit, "their sum", "#444444")
    _heatmap(axes[n + 1], whole, limit, "with f\n(all_reduce)", "k")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_bias_gap(gaps: Sequence[Any], bias: Any, title: str) -> Any:
    """The bias added before the all_reduce: per output feature, (world_size − 1) × b2
    (hatched) and, per rank, how far its wrong output is from Y2 (wrong − Y2: the least
    and the most over the batch's rows, one bar each when they agree)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    b = np.asarray(bias, dtype=float)
    n = len(gaps)
    width = 0.8 / (n + 1)
    x = np.arange(len(b))
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 3.0))
    ax.bar(x, (n - 1) * b, width, color="none", edgecolor="k", hatch="//", gid="model")
    for r, gap in enumerate(gaps):
        g = np.asarray(gap, dtype=float).reshape(-1, len(b))
        lo, hi = g.min(axis=0), g.max(axis=0)
        ax.bar(x + (r + 1) * width, hi, width, color=rank_colour(r), gid=f"rank:{r}")
        ax.vlines(x + (r + 1) * width, lo, hi, color="k", linewidth=1)
    ax.axhline(0, color="#888888", linewidth=0.8)
    ax.set_xticks(x + 0.4 - width / 2, [f"output feature {j}" for j in range(len(b))],
                  fontsize=9)
    ax.set_ylabel("wrong − Y2")
    ax.set_title(title, fontsize=10)
    key = [Patch(facecolor="none", edgecolor="k", hatch="//",
                 label="(world_size − 1) × b2")]
    key += [Patch(color=rank_colour(r), label=f"rank {r}: wrong − Y2") for r in range(n)]
    ax.legend(handles=key, fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_errors(diffs_by_rank: Sequence[dict[str, float]], tolerance: float,
                title: str) -> Any:
    """Per quantity (`shard_diffs`'s keys), each rank's largest |got − unsharded| on a log
    axis, beside the check's tolerance and float64's ε; an exact 0 is drawn at the floor
    and labelled "0"."""
    import matplotlib.pyplot as plt

    names = list(diffs_by_rank[0])
    n = len(diffs_by_rank)
    width = 0.8 / n
    floor = 1e-20
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 3.4))
    for r, diffs in enumerate(diffs_by_rank):
        at = np.arange(len(names)) + r * width
        values = [diffs[k] for k in names]
        ax.bar(at, [max(v, floor) - floor for v in values], width, bottom=floor,
               color=rank_colour(r), label=f"rank {r}", gid=f"rank:{r}")  # log: from the floor
        for x, v in zip(at, values):
            if v == 0:
                ax.text(x, floor * 3, "0", ha="center", va="bottom", fontsize=9)
    ax.set_yscale("log")
    ax.set_ylim(floor, tolerance * 1e3)
    ax.axhline(tolerance, color="k", linestyle="--", linewidth=1,
               label=f"the check's tolerance, {tolerance:.0e}")
    ax.axhline(np.finfo(np.float64).eps, color="#666666", linestyle=":", linewidth=1.2,
               label="float64 ε, 2.2e-16")
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, fontsize=9)
    ax.set_ylabel("largest |got − unsharded|")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3,
              frameon=False)                  # below the axes: off the bars
    fig.tight_layout()
    plt.close(fig)
    return fig
