"""Notebook 14's measured figures: the bytes each rank wrote in each phase of the
hierarchical all_reduce beside the ring model, and how long each rank took to fail when
one rank skipped a `new_group` (helpers.training.mesh draws the mesh and the phases)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from helpers.figures.column import COLUMN_IN

TEXT_PT = 8                    # 11 px on the page
RANK_COLOURS = ("#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#64b5cd",
                "#937860", "#da8bc3")
SUM = "phases 1–3, summed"


def phase_bytes(traffic: Sequence[Mapping[str, Mapping[str, Any]]],
                phases: Sequence[str]) -> dict[str, tuple[list[float | None], float]]:
    """{group: ([measured bytes of each rank, None where not measured], model bytes of a
    rank)} for each phase, the phases' sum and the flat all_reduce (the last key of a rank's
    traffic that is not a phase)."""
    flat = [k for k in traffic[0] if k not in phases]
    groups: dict[str, tuple[list[float | None], float]] = {}
    for name in list(phases) + flat:
        groups[name] = ([t[name]["measured"] for t in traffic], traffic[0][name]["model"])
        if name == phases[-1]:
            measured = [None if any(t[p]["measured"] is None for p in phases)
                        else sum(t[p]["measured"] for p in phases) for t in traffic]
            groups[SUM] = (measured, sum(traffic[0][p]["model"] for p in phases))
    return groups


def plot_phase_bytes(groups: Mapping[str, tuple[Sequence[float | None], float]], title: str):
    """A bar per rank (measured, KiB) in each group, the ring model a black line across the
    group; a group not measured (NCCL) shows the model alone."""
    import matplotlib.pyplot as plt

    n_ranks = max(len(measured) for measured, _ in groups.values())
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 3.3))
    width = 0.8 / n_ranks
    for g, (name, (measured, model)) in enumerate(groups.items()):
        for r, value in enumerate(measured):
            if value is not None:
                ax.bar(g - 0.4 + (r + 0.5) * width, value / 1024, width * 0.9,
                       color=RANK_COLOURS[r % len(RANK_COLOURS)],
                       label=f"rank {r}, measured" if g == 0 else None)
        ax.hlines(model / 1024, g - 0.45, g + 0.45, color="black", linewidth=2,
                  label="ring model, per rank" if g == 0 else None)
        known = [value for value in measured if value is not None]
        if known and model:
            ax.text(g, max(known + [model]) / 1024, f"{max(known) / model:.2f}× model",
                    ha="center", va="bottom", fontsize=TEXT_PT)
    ax.set_xticks(range(len(groups)), [name.replace(" ", "\n", 1) + f"\nmodel {model / 1024:,.0f}"
                                       for name, (_, model) in groups.items()],
                  fontsize=TEXT_PT)
    ax.set_ylabel("KiB written per rank", fontsize=TEXT_PT + 1)
    tallest = max([m for m, _ in groups.values() for m in m if m is not None]
                  + [model for _, model in groups.values()])
    ax.set_ylim(0, tallest / 1024 * 1.2)
    ax.tick_params(axis="y", labelsize=TEXT_PT)
    ax.legend(fontsize=TEXT_PT, ncol=min(n_ranks + 1, 5), loc="lower center",
              bbox_to_anchor=(0.5, 1.0), frameon=False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def plot_failures(outcomes: Sequence[Mapping[str, Any]], timeout_s: float, skipper: int,
                  title: str):
    """A bar per rank: the seconds until its new_group or all_reduce raised
    (`elapsed`), labelled with the exception; dashed: the group's timeout and gloo's
    connection timeout, 5 times it."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(COLUMN_IN, 0.9 + 0.32 * len(outcomes)))
    kinds = list(dict.fromkeys(o["outcome"].split(" ")[0] for o in outcomes))
    for o in outcomes:
        kind = o["outcome"].split(" ")[0]
        ax.barh(o["rank"], o["elapsed"], height=0.7,
                color=RANK_COLOURS[kinds.index(kind) % len(RANK_COLOURS)])
        ax.text(o["elapsed"] + 0.08, o["rank"], kind, va="center", fontsize=TEXT_PT)
    for limit, name in ((timeout_s, "timeout"), (5 * timeout_s, "5 × timeout")):
        ax.axvline(limit, color="black", linestyle="--", linewidth=1)
        ax.text(limit + 0.05, -0.68, name, ha="left", va="center", fontsize=TEXT_PT)
    ax.set_yticks([o["rank"] for o in outcomes],
                  [f"rank {o['rank']}" + (" (skipped)" if o["rank"] == skipper else "")
                   for o in outcomes], fontsize=TEXT_PT)
    ax.set_ylim(len(outcomes) - 0.5, -0.9)
    longest = max(o["elapsed"] for o in outcomes)
    ax.set_xlim(0, max(longest, 5 * timeout_s) * 1.35)
    ax.set_xlabel("seconds until the call raised", fontsize=TEXT_PT + 1)
    ax.tick_params(axis="x", labelsize=TEXT_PT)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
