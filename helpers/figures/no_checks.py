"""Notebook 13's mismatches without torch's checks, by rank: how each disposable rank of each
case ended (helpers.runtime.disposable's RankOutcome), one row per case, a cell per rank."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

KILLED, RAISED, TIMED_OUT, WRONG, RIGHT = "#d92d20", "#f79009", "#98a2b3", "#fde272", "#a6dba0"
KINDS = {KILLED: "killed by a signal", RAISED: "raised an error", TIMED_OUT: "timed out",
         WRONG: "returned a wrong sum", RIGHT: "returned the right sum"}


def ending(outcome: Any, right: Sequence[float]) -> tuple[str, str]:
    """(colour, words) of how one rank ended: killed, timed out, raised, or returned."""
    if outcome.returncode is None:
        return KILLED, "still running"
    if outcome.killed:
        return KILLED, outcome.signal
    if outcome.error is not None:
        kind = TIMED_OUT if "Timed out" in outcome.error else RAISED
        return kind, f"{'timed out' if kind == TIMED_OUT else 'raised'} {outcome.seconds:.2f} s"
    if outcome.returncode == 0:
        values = ", ".join(f"{v:g}" for v in outcome.result)
        return (RIGHT if list(outcome.result) == list(right) else WRONG), f"[{values}]"
    return RAISED, f"exit code {outcome.returncode}"


def no_checks_text(outcomes: Mapping[tuple[str, int], Sequence[Any]]) -> str:
    """Every rank's ending in words (RankOutcome.summary), case by case."""
    return "\n".join(f"{what} differs, {n} ranks, no checks:\n"
                     + "\n".join(o.summary() for o in ranks)
                     for (what, n), ranks in outcomes.items())


def plot_no_checks(outcomes: Mapping[tuple[str, int], Sequence[Any]],
                   right: Callable[[int], Sequence[float]]):
    """A row per case ("shape · 3 ranks"), a cell per rank, coloured by how it ended and
    saying it (the signal, the seconds before it raised, what it returned); `right(n)` is
    the sum a right all_reduce gives at n ranks."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    width = max(n for _, n in outcomes)
    fig = plt.figure(figsize=(7.9, 0.42 * len(outcomes) + 1.3), dpi=100)
    plt.close(fig)                       # made through pyplot so Jupyter shows it, once
    ax = fig.add_subplot()
    seen = []
    for row, ((what, n), ranks) in enumerate(outcomes.items()):
        for outcome in ranks:
            colour, words = ending(outcome, right(n))
            seen += [colour] if colour not in seen else []
            ax.add_patch(Rectangle((outcome.rank + 0.03, row + 0.06), 0.94, 0.88,
                                   facecolor=colour, edgecolor="white"))
            ax.text(outcome.rank + 0.5, row + 0.5, words, ha="center", va="center", fontsize=9,
                    color="white" if colour == KILLED else "black")
    ax.set_xlim(0, width)
    ax.set_ylim(len(outcomes), 0)
    ax.set_xticks([r + 0.5 for r in range(width)], [f"rank {r}" for r in range(width)],
                  fontsize=10)
    ax.set_yticks([i + 0.5 for i in range(len(outcomes))],
                  [f"{what} differs · {n} ranks" for what, n in outcomes], fontsize=10)
    ax.tick_params(length=0)
    ax.xaxis.tick_top()
    for side in ax.spines.values():
        side.set_visible(False)
    ax.legend(handles=[Patch(facecolor=c, label=KINDS[c]) for c in KINDS if c in seen],
              loc="upper center", bbox_to_anchor=(0.45, -0.02), ncol=3, fontsize=9,
              frameon=False)
    ax.set_title("One rank's tensor differs, no checks: how each rank ended (this run)",
                 fontsize=11, pad=24)
    return fig


def plot_check_cost(per_call: Mapping[bool, Sequence[float]]):
    """µs per call on each rank, without (False) and with (True) torch's DETAIL checks: a
    pair of bars per rank, each labelled with its value."""
    import matplotlib.pyplot as plt

    ranks = len(per_call[False])
    fig = plt.figure(figsize=(7.9, 0.55 * ranks + 1.3), dpi=100)
    plt.close(fig)                       # made through pyplot so Jupyter shows it, once
    ax = fig.add_subplot()
    top = max(max(us) for us in per_call.values())
    for detail, colour, shift in ((False, TIMED_OUT, -0.2), (True, RAISED, 0.2)):
        y = [r + shift for r in range(ranks)]
        ax.barh(y, per_call[detail], height=0.38, color=colour,
                label="with the checks (DETAIL)" if detail else "without the checks")
        for yi, us in zip(y, per_call[detail]):
            ax.text(us + top * 0.01, yi, f"{us:,.0f} µs", va="center", fontsize=9)
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)], fontsize=10)
    ax.set_ylim(ranks - 0.5, -0.5)
    ax.set_xlim(0, top * 1.18)
    ax.set_xlabel("µs per 1-element all_reduce (mean of 200 calls, this run)", fontsize=10)
    ax.tick_params(labelsize=9)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 1.16), ncol=2, fontsize=9,
              frameon=False)
    return fig
