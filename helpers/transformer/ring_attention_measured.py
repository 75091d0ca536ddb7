"""Notebook 21's figures of what the ranks measured: the block each rank held and the scores
it computed at each step, the bytes each rank sent, and the two pitfalls' errors.

Every artist that carries a number has a gid ("step:causal:2:1" = panel "causal", rank 2,
step 1), so that tests read the drawing back.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from helpers.figures.animation import CONTENT_WIDTH_IN
from helpers.training.schemes import INK, MUTED, rank_colour

SKIPPED = "#d9d9d9"


def _step_grid(ax, owners: Sequence[Sequence[int]], work: Sequence[Sequence[int]],
               name: str, labels: Sequence[str]) -> None:
    """One row per rank, one column per step: the block held (its owner's colour) and the
    scores computed with it, grey where nothing was; the rank's total at the row's end."""
    n, steps = len(owners), len(owners[0])
    for r in range(n):
        for s in range(steps):
            owner, done = owners[r][s], work[r][s]
            ax.add_patch(Rectangle((s + 0.04, r + 0.06), 0.92, 0.88, gid=f"step:{name}:{r}:{s}",
                                   facecolor=rank_colour(owner, True) if done else SKIPPED,
                                   edgecolor=rank_colour(owner), lw=1.2))
            ax.text(s + 0.5, r + 0.5, f"KV{owner}: {done}" if done else f"KV{owner}: skip",
                    ha="center", va="center", fontsize=9, color=INK if done else MUTED)
        ax.text(steps + 0.08, r + 0.5, f"= {sum(work[r])}", ha="left", va="center",
                fontsize=9, fontweight="bold", gid=f"total:{name}:{r}")
    ax.set_xlim(0, steps + 0.75)
    ax.set_ylim(n, 0)
    ax.set_xticks([s + 0.5 for s in range(steps)], [f"step {s}" for s in range(steps)],
                  fontsize=9)
    ax.set_yticks([r + 0.5 for r in range(n)], labels, fontsize=9)
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.set_title(name, fontsize=10, loc="left")


def plot_steps(owners: Sequence[Sequence[int]], work: Mapping[str, Sequence[Sequence[int]]],
               title: str, labels: Sequence[str] | None = None) -> Figure:
    """One panel per run (`work[name][r][s]`: the scores rank r computed at step s, per batch
    element and head), each cell the K/V block rank r held at step s (`owners[r][s]`)."""
    import matplotlib.pyplot as plt

    n = len(owners)
    if any(len(w) != n or any(len(row) != len(owners[0]) for row in w) for w in work.values()):
        raise ValueError("work must hold one row per rank and one count per step")
    labels = list(labels) if labels else [f"rank {r}" for r in range(n)]
    fig, axes = plt.subplots(1, len(work), figsize=(CONTENT_WIDTH_IN, 0.95 + 0.36 * n),
                             dpi=100, squeeze=False)
    for ax, (name, counts) in zip(axes[0], work.items()):
        _step_grid(ax, owners, counts, name, labels)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.97), w_pad=1.0)
    plt.close(fig)
    return fig


def plot_bytes(traffic: Sequence[Mapping], title: str) -> Figure:
    """Per rank, the bytes sent by the ring (its isends) and by context_parallel (its
    all_gathers): the model, and on top what gloo measured beyond it (its headers)."""
    import matplotlib.pyplot as plt

    n = len(traffic)
    fig, ax = plt.subplots(figsize=(CONTENT_WIDTH_IN, 2.6), dpi=100)
    rows = (("ring", "ring: isend of K/V blocks", "ring_bytes", "model"),
            ("context_parallel", "context_parallel: all_gather", "torch_bytes", "torch_model"))
    top = 0.0
    for k, (key, _, source, model_key) in enumerate(rows):
        for r, s in enumerate(traffic):
            model = s[source][model_key] if model_key == "model" else s[model_key]
            measured = s[source]["measured"]
            x = r + (k - 0.5) * 0.4
            ax.bar(x, model, width=0.38, color=rank_colour(r, light=k == 1),
                   edgecolor=rank_colour(r), hatch="//" if k else None,
                   gid=f"model:{key}:{r}")
            ax.text(x, model / 2, f"model\n{model:,.0f}", ha="center", va="center",
                    fontsize=9, color=INK)
            if measured is not None:
                ax.bar(x, measured - model, bottom=model, width=0.38, color=INK,
                       gid=f"extra:{key}:{r}")
                ax.text(x, measured * 1.02, f"{measured:,}", ha="center", va="bottom",
                        fontsize=9)
            top = max(top, model, measured or 0)
    ax.set_ylim(0, top * 1.45)
    ax.set_xticks(range(n), [f"rank {r}" for r in range(n)])
    ax.set_ylabel("bytes this rank sent")
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(handles=[Patch(facecolor="#999999", label=rows[0][1] + " (model)"),
                       Patch(facecolor="#dddddd", edgecolor="#999999", hatch="//",
                             label=rows[1][1] + " (model)"),
                       Patch(facecolor=INK, label="measured beyond the model: gloo's headers")],
              loc="upper left", ncol=2, frameon=False, fontsize=9)
    ax.set_title(title, loc="left", fontsize=10.5)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_pitfalls(gaps: Mapping[str, Sequence[float]], scores: Mapping[str, Sequence[int]],
                  tolerance: float, title: str) -> Figure:
    """Left: each rank's largest difference from the right ring's output, per pitfall (log
    scale), beside the self-checks' tolerance; right: the scores each rank computed, per
    variant (`scores`, the right ring first). Keys name the variants."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(CONTENT_WIDTH_IN, 2.6), dpi=100)
    marks = "os^D"
    for k, (name, values) in enumerate(gaps.items()):
        for r, gap in enumerate(values):
            left.plot(r + (k - (len(gaps) - 1) / 2) * 0.25, gap, marks[k % 4], ms=8,
                      color=rank_colour(r), mec=INK, gid=f"gap:{name}:{r}",
                      label=name if r == 0 else None)
    n = len(next(iter(gaps.values())))
    left.axhline(tolerance, color=MUTED, ls="--", lw=1)
    left.text(n - 0.6, tolerance * 3, f"the self-checks' tolerance, {tolerance:.0e}",
              ha="right", va="bottom", fontsize=9, color=MUTED)
    left.set_yscale("log")
    left.set_ylim(tolerance / 100, max(max(v) for v in gaps.values()) * 100)
    left.set_xlim(-0.6, n - 0.4)
    left.set_ylabel("off from the right ring", fontsize=9)
    left.legend(loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False, fontsize=9,
                ncol=2, handletextpad=0.2)
    width = 0.8 / len(scores)
    for k, (name, values) in enumerate(scores.items()):
        for r, value in enumerate(values):
            right.bar(r + (k - (len(scores) - 1) / 2) * width, value, width=width * 0.95,
                      color=rank_colour(r, light=k > 0), edgecolor=rank_colour(r),
                      hatch="//" if k else None, gid=f"scores:{name}:{r}")
    right.set_ylim(0, max(max(v) for v in scores.values()) * 1.1)
    right.set_ylabel("query·key scores", fontsize=9)
    right.legend(handles=[Patch(facecolor="#dddddd" if k else "#999999", edgecolor="#999999",
                                hatch="//" if k else None, label=name)
                          for k, name in enumerate(scores)],
                 loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False, fontsize=9, ncol=2)
    for ax in (left, right):
        ax.set_xticks(range(n), [f"rank {r}" for r in range(n)])
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    plt.close(fig)
    return fig


def plot_softmax(traces: Sequence[Sequence[Sequence[float]]],
                 exact: Sequence[Sequence[float]], title: str) -> Figure:
    """Each rank's one query, block by block: the running max and the running sum after each
    merge (`traces[r][s]` = (max, sum)), and at the end the exact max and sum of a softmax
    over all keys at once (`exact[r]`, hollow)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(CONTENT_WIDTH_IN, 2.5), dpi=100)
    steps = len(traces[0])
    for k, (ax, label) in enumerate(zip(axes, ("running max m", "running sum ℓ"))):
        for r, trace in enumerate(traces):
            ax.plot(range(steps), [t[k] for t in trace], "-o", color=rank_colour(r), ms=5,
                    lw=1.5, gid=f"{label}:{r}", label=f"rank {r}")
            ax.plot(steps, exact[r][k], "o", ms=9, mfc="none", mec=rank_colour(r), mew=1.8,
                    gid=f"exact {label}:{r}")
        ax.set_xticks(range(steps + 1), [f"{s + 1}" for s in range(steps)] + ["exact"],
                      fontsize=9)
        ax.set_xlabel("blocks merged", fontsize=9)
        ax.set_ylabel(label, fontsize=9)
        ax.spines[["top", "right"]].set_visible(False)
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=9)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10.5)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    plt.close(fig)
    return fig
