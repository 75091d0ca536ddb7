"""Notebook 09's timing figure: how long each rank of a pair spent in an exchange, the
deadlock (both ranks send first, stopped by the group's timeout) beside the three ways out.

The seconds are what the ranks measured (`time.monotonic()` around the calls); nothing
here is a model.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from matplotlib.patches import Rectangle

from helpers.figures.column import COLUMN_IN

DEADLOCK, FIXED = "#c0392b", "#2e8b57"
BAR_IN = 0.2                  # one rank's bar
TEXT_PT = 8                   # 11 px on the page
DEADLOCKED = "both send first"    # the way `waited` timed
LARGE = 1024                  # elements: from here on a message counts as large


def exchange_rows(pulled: Sequence[Mapping[str, Any]], waited: str = "waited",
                  took: str = "took") -> list[tuple[str, int, dict[int, float]]]:
    """(way, elements, {rank: seconds}) in the order they ran: the deadlock's sizes from
    `waited` ({elements: s}), then each way out of `took` ({way: {elements: s}})."""
    rows: dict[tuple[str, int], dict[int, float]] = {}
    for state in pulled:
        for numel, seconds in sorted(state.get(waited, {}).items()):
            rows.setdefault((DEADLOCKED, numel), {})[state["rank"]] = seconds
    for state in pulled:
        for way, by_size in state.get(took, {}).items():
            for numel, seconds in sorted(by_size.items()):
                rows.setdefault((way, numel), {})[state["rank"]] = seconds
    return [(way, numel, per_rank) for (way, numel), per_rank in rows.items()]


def plot_exchange_times(rows: Sequence[tuple[str, int, Mapping[int, float]]],
                        timeout_s: float, title: str, wrong: Sequence[str] = (DEADLOCKED,)):
    """One panel per size class (the few elements, the large message), a bar per way and
    rank: the seconds until the exchange returned, log scale, the group's timeout dashed.
    The bars of the `wrong` ways (the order that deadlocks) are red, the others green."""
    import matplotlib.pyplot as plt

    panels = {"few elements": [r for r in rows if r[1] < LARGE],
              "large message": [r for r in rows if r[1] >= LARGE]}
    panels = {k: v for k, v in panels.items() if v}
    ways = list(dict.fromkeys(way for way, _, _ in rows))
    ranks = sorted({r for _, _, per_rank in rows for r in per_rank})
    n_bars = len(ways) * len(ranks)
    fig, axes = plt.subplots(1, len(panels), sharey=True, squeeze=False,
                             figsize=(COLUMN_IN, 1.1 + BAR_IN * 1.25 * n_bars))
    labels = [f"{way} · rank {r}" for way in ways for r in ranks]
    longest = max(s for _, _, per_rank in rows for s in per_rank.values())
    for ax, (panel, panel_rows) in zip(axes[0], panels.items()):
        for way, numel, per_rank in panel_rows:
            for r, seconds in per_rank.items():
                y = ways.index(way) * len(ranks) + ranks.index(r)
                ax.barh(y, seconds, height=0.7, color=DEADLOCK if way in wrong else FIXED)
                ax.text(seconds * 1.15, y, f"{seconds:.3f} s", va="center", fontsize=TEXT_PT)
        ax.axvline(timeout_s, color="black", linestyle="--", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlim(min(1e-4, 0.5 * min(s for _, _, p in rows for s in p.values())),
                    longest * 40)
        sizes = sorted({numel for _, numel, _ in panel_rows})
        ax.set_title(f"{panel}: " + " or ".join(f"{n:,}" for n in sizes) + " element(s)",
                     fontsize=10)
        ax.tick_params(labelsize=TEXT_PT)
    axes[0, 0].set_yticks(range(n_bars), labels)
    axes[0, 0].invert_yaxis()
    fig.supxlabel(f"seconds in the exchange, log scale (dashed: the group's {timeout_s:g} s "
                  "timeout)", fontsize=TEXT_PT + 1)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def outcome_text(outcome: Any) -> str:
    """How a disposable rank ended, short enough for one box: the value it returned, or the
    error's type and the last clause of its message ("… Sequence number: 1vs 0")."""
    after = "" if outcome.seconds is None else f" after {outcome.seconds:.2f} s"
    if outcome.error is None:
        return (f"returned {outcome.result!r}{after}" if outcome.returncode == 0
                else outcome.summary())
    kind, _, message = outcome.error.partition(": ")
    tail = message.split("aspects: ")[-1] if "aspects: " in message else message[:40]
    return " ".join(f"raised {kind}{after}: {tail}".split())    # a tab has no glyph


def plot_outcomes(runs: Mapping[str, Sequence[Any]], roles: Mapping[int, str], title: str):
    """A row per rank of each run ({label: [RankOutcome]}), its role on the left, how it
    ended in a box: green when it returned, red when it raised or died."""
    import matplotlib.pyplot as plt

    rows = [(label, o) for label, outcomes in runs.items() for o in outcomes]
    fig, ax = plt.subplots(figsize=(COLUMN_IN, 0.75 + 0.34 * len(rows)))
    for y, (label, o) in enumerate(rows):
        ok = o.error is None and o.returncode == 0
        ax.add_patch(Rectangle((0, y - 0.38), 1, 0.76, facecolor="#e3f1e8" if ok else "#f8e0dd",
                               edgecolor=FIXED if ok else DEADLOCK))
        ax.text(0.02, y, outcome_text(o), va="center", fontsize=TEXT_PT)
    ax.set_yticks(range(len(rows)), [f"{label} · rank {o.rank}: {roles.get(o.rank, 'no part')}"
                                     for label, o in rows], fontsize=TEXT_PT)
    ax.set_xlim(0, 1)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
