"""Notebook 24's figures: the plans as grids of slots, the measured timelines, the bubble
over m. The colours of forward and backward are notebook 18's (helpers.training.pipeline)."""
from __future__ import annotations

from typing import Sequence

from helpers.fitting.schedules import COMPUTE, formula_bubble, measured_bubble, plan, simulate
from helpers.fitting.schedules import step_time
from helpers.training.pipeline import COLOURS as PP_COLOURS, bubble_panels

COLOURS = {"F": PP_COLOURS["forward"], "B": PP_COLOURS["backward"], "I": "#7fc97f",
           "W": "#e6ab02", "wait": PP_COLOURS["recv"]}
NAMES = {"F": "F forward", "B": "B full backward", "I": "I input gradient",
         "W": "W weight gradient", "wait": "wait for a transfer"}


def _legend(fig, kinds: Sequence[str]) -> None:
    from matplotlib.patches import Patch
    handles = [Patch(color=COLOURS[k], label=NAMES[k]) for k in kinds]
    handles.append(Patch(facecolor="white", edgecolor="grey", label="idle"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8)


def draw_plans(p: int, m: int, v: int = 2):
    """1F1B, interleaved 1F1B (v chunks) and ZB-H1 at p ranks, m micro-batches: each
    action one slot, transfers free (`simulate`); the label is stage.micro-batch."""
    import matplotlib.pyplot as plt

    runs = {"1F1B": plan("1F1B", p, m), f"interleaved 1F1B, v = {v}": plan("interleaved",
                                                                           p, m, v),
            "ZB-H1 (I and W split)": plan("ZB-H1", p, m)}
    grids = {name: simulate(order) for name, order in runs.items()}
    width = max(len(g[0]) / (v if name.startswith("interleaved") else 1)
                for name, g in grids.items())
    fig, axes = plt.subplots(len(grids), 1, figsize=(11, 1.2 + 0.42 * p * len(grids)),
                             squeeze=False)
    for ax, (name, grid) in zip(axes[:, 0], grids.items()):
        short = v if name.startswith("interleaved") else 1     # a chunk is 1/v of a stage
        for r, row in enumerate(grid):
            slots = [(t, action) for t, action in enumerate(row) if action is not None]
            ax.broken_barh([(t / short, 1 / short) for t, _ in slots], (r - 0.4, 0.8),
                           facecolor=[COLOURS[kind] for _, (kind, _, _) in slots],
                           edgecolor="white", linewidth=0.5)      # one call a row: fast
            for t, (kind, s, i) in slots:
                ax.text((t + 0.5) / short, r, f"{s}.{i}" if short > 1 else str(i),
                        ha="center", va="center", fontsize=6 if short > 1 else 7)
        idle = sum(a is None for row in grid for a in row) / sum(len(row) for row in grid)
        ax.set_yticks(range(p), [f"rank {r}" for r in range(p)])
        ax.invert_yaxis()
        ax.set_xlim(0, width)
        ax.set_title(f"{name}: {idle:.0%} of the slots idle", fontsize=10)
    axes[-1, 0].set_xlabel("time, in units of one stage's forward (interleaved: a chunk "
                           "is half a stage)" if v == 2 else "time, one stage's forward = 1")
    _legend(fig, ("F", "B", "I", "W"))
    fig.suptitle(f"the plans at p = {p}, m = {m}", x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    plt.close(fig)
    return fig


def plot_timelines(timelines: dict[str, Sequence[Sequence]], title: str):
    """One panel per schedule, one row per rank: the measured spans (Spans events)."""
    import matplotlib.pyplot as plt

    n_ranks = len(next(iter(timelines.values())))
    fig, axes = plt.subplots(len(timelines), 1, squeeze=False,
                             figsize=(11, 1.2 + 0.45 * n_ranks * len(timelines)))
    for ax, (name, events_by_rank) in zip(axes[:, 0], timelines.items()):
        total = step_time(events_by_rank)
        for r, events in enumerate(events_by_rank):     # one call a rank: fast
            ax.broken_barh([(begin * 1e3, (end - begin) * 1e3) for _, _, begin, end in events],
                           (r - 0.4, 0.8), color=[COLOURS[kind] for kind, *_ in events])
        bubbles = measured_bubble(events_by_rank)
        ax.set_yticks(range(n_ranks), [f"rank {r} · bubble {b:.0%}"
                                       for r, b in enumerate(bubbles)])
        ax.invert_yaxis()
        ax.set_title(f"{name}: step {total * 1e3:.1f} ms", fontsize=10)
    axes[-1, 0].set_xlabel("ms since the common start (white: idle)")
    kinds = [k for k in (*COMPUTE, "wait") if any(e[0] == k for tl in timelines.values()
                                                   for ev in tl for e in ev)]
    _legend(fig, kinds)
    fig.suptitle(title, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    plt.close(fig)
    return fig


def plot_bubbles(tables: dict[str, Sequence[dict]] | Sequence[dict], p: int, title: str):
    """The measured bubble (mean over ranks) per schedule and m, the formula dashed: one
    panel per table ({panel title: rows}; a plain list of rows is one panel)."""
    import matplotlib.pyplot as plt

    fig, panels = bubble_panels(tables, 4.6, 2.6)
    for ax, table in panels:
        for k, schedule in enumerate(dict.fromkeys(row["schedule"] for row in table)):
            rows = sorted((r for r in table if r["schedule"] == schedule),
                          key=lambda r: r["m"])
            ms = [r["m"] for r in rows]
            ax.plot(ms, [r["measured"] for r in rows], "o-", color=f"C{k}",
                    label=f"{schedule}, measured")
            ax.plot(ms, [formula_bubble(rows[0]["key"], p, m, rows[0]["v"]) for m in ms],
                    "--", color=f"C{k}", label=f"{schedule}, formula")
    panels[-1][0].legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig
