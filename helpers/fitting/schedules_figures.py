"""Notebook 24's figures: the plans as grids of slots, the measured timelines, the bubble
over m. The colours of forward and backward are notebook 18's (helpers.training.pipeline)."""
from __future__ import annotations

from typing import Sequence

from helpers.figures.audit import COLUMN_PX
from helpers.fitting.schedules import COMPUTE, formula_bubble, measured_bubble, plan, simulate
from helpers.fitting.schedules import step_time
from helpers.training.pipeline import COLOURS as PP_COLOURS
from helpers.training.pipeline_figures import bubble_panels

COLOURS = {"F": PP_COLOURS["forward"], "B": PP_COLOURS["backward"], "I": "#7fc97f",
           "W": "#e6ab02", "wait": PP_COLOURS["recv"]}
NAMES = {"F": "F forward", "B": "B full backward", "I": "I input gradient",
         "W": "W weight gradient", "wait": "wait for a transfer"}
WIDTH_IN = COLUMN_PX / 100      # the page's column at dpi 100: shown unscaled
LABEL_PT, LEGEND_PT = 7.5, 8.5  # 10.4 px and 11.8 px on the page
LEGEND_ROW_IN = 0.24            # one row of the legend under the panels
KEY_IN = 1.4                    # draw_plans: the key at the right of the panels


def _legend(fig, kinds: Sequence[str], extra: Sequence = ()) -> None:
    """The colours' key under the panels, three entries a row (below the x label)."""
    from matplotlib.patches import Patch
    handles = [Patch(color=COLOURS[k], label=NAMES[k]) for k in kinds]
    handles.append(Patch(facecolor="white", edgecolor="grey", label="idle"))
    handles += list(extra)
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=LEGEND_PT,
               frameon=False)


def _legend_rect(fig, entries: int) -> tuple[float, float, float, float]:
    """tight_layout's rect: the panels above the legend's rows."""
    rows = -(-entries // 3)
    return (0, (rows * LEGEND_ROW_IN + 0.1) / fig.get_figheight(), 1, 1)


def _fits(label: str, slot_in: float) -> bool:
    """Whether `label` at LABEL_PT fits in a slot `slot_in` inches wide (digits ≈ 0.6 em)."""
    return len(label) * 0.6 * LABEL_PT / 72 + 0.03 <= slot_in


def draw_plans(p: int, m: int, v: int = 2):
    """1F1B, interleaved 1F1B (v chunks) and ZB-H1 at p ranks, m micro-batches: each
    action one slot, transfers free (`simulate`). The label is the micro-batch; in the
    interleaved plan a rank's chunks k > 0 (stage r + k·p) are hatched. Where a slot is
    too narrow for its label at LABEL_PT, the panel's title says so and shows none. The
    panels share the time axis; the colours' key stands at their right."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    runs = {"1F1B": plan("1F1B", p, m), f"interleaved 1F1B, v = {v}": plan("interleaved",
                                                                           p, m, v),
            "ZB-H1 (I and W split)": plan("ZB-H1", p, m)}
    grids = {name: simulate(order) for name, order in runs.items()}
    width = max(len(g[0]) / (v if name.startswith("interleaved") else 1)
                for name, g in grids.items())
    fig, axes = plt.subplots(len(grids), 1, figsize=(WIDTH_IN, 0.95 + (0.3 + 0.15 * p)
                                                     * len(grids)),
                             squeeze=False, sharex=True)
    axes_in = WIDTH_IN - KEY_IN - 0.75        # the panels' width, less the labels and key
    for ax, (name, grid) in zip(axes[:, 0], grids.items()):
        short = v if name.startswith("interleaved") else 1     # a chunk is 1/v of a stage
        labelled = _fits(str(m - 1), axes_in / width / short)
        for r, row in enumerate(grid):
            slots = [(t, action) for t, action in enumerate(row) if action is not None]
            for later in (False, True):            # one call a chunk kind and row: fast
                mine = [(t, kind) for t, (kind, s, _) in slots if (s >= p) is later]
                ax.broken_barh([(t / short, 1 / short) for t, _ in mine], (r - 0.43, 0.86),
                               facecolor=[COLOURS[kind] for _, kind in mine],
                               hatch="////" if later else None, hatchcolors="#555555",
                               edgecolor="white", linewidth=0.5)
            for t, (kind, s, i) in slots if labelled else ():
                ax.text((t + 0.5) / short, r, str(i), ha="center", va="center",
                        fontsize=LABEL_PT, gid=f"slot:{s}.{i}")
        idle = sum(a is None for row in grid for a in row) / sum(len(row) for row in grid)
        ax.set_yticks(range(p), [f"rank {r}" for r in range(p)], fontsize=LEGEND_PT)
        ax.set_ylim(p - 0.5, -0.5)
        ax.set_xlim(0, width)
        ax.set_title(f"{name}: {idle:.0%} of the slots idle"
                     + ("" if labelled else " (slots too narrow to label)"), fontsize=10,
                     pad=3)
    axes[-1, 0].set_xlabel("time, in units of one stage's forward (interleaved: a chunk "
                           "is half a stage)" if v == 2 else "time, one stage's forward = 1")
    chunk = Patch(facecolor="white", edgecolor="grey", hatch="////",
                  label=f"interleaved:\nchunk 2+\n(stage r + {p}·k)")
    handles = [Patch(color=COLOURS[k], label=NAMES[k].replace(" gradient", "\ngradient")
                     .replace("full ", "full\n")) for k in ("F", "B", "I", "W")]
    handles += [Patch(facecolor="white", edgecolor="grey", label="idle"), chunk]
    fig.legend(handles=handles, loc="center right", fontsize=LEGEND_PT, frameon=False,
               handlelength=1.2)
    fig.suptitle(f"the plans at p = {p}, m = {m}: each label is the micro-batch", x=0.01,
                 ha="left")
    fig.tight_layout(rect=(0, 0, 1 - KEY_IN / WIDTH_IN, 1), h_pad=0.4)
    plt.close(fig)
    return fig


def plot_timelines(timelines: dict[str, Sequence[Sequence]], title: str):
    """One panel per schedule, one row per rank: the measured spans (Spans events)."""
    import matplotlib.pyplot as plt

    n_ranks = len(next(iter(timelines.values())))
    fig, axes = plt.subplots(len(timelines), 1, squeeze=False,
                             figsize=(WIDTH_IN, 1.5 + 0.45 * n_ranks * len(timelines)))
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
    fig.tight_layout(rect=_legend_rect(fig, len(kinds) + 1))
    plt.close(fig)
    return fig


def plot_bubbles(tables: dict[str, Sequence[dict]] | Sequence[dict], p: int, title: str):
    """The measured bubble (mean over ranks) per schedule and m, the formula dashed: one
    panel per table ({panel title: rows}; a plain list of rows is one panel)."""
    import matplotlib.pyplot as plt

    count = len(tables) if isinstance(tables, dict) else 1
    fig, panels = bubble_panels(tables, min(4.6, (WIDTH_IN - 0.6) / count), 0.6)
    for ax, table in panels:
        for k, schedule in enumerate(dict.fromkeys(row["schedule"] for row in table)):
            rows = sorted((r for r in table if r["schedule"] == schedule),
                          key=lambda r: r["m"])
            ms = [r["m"] for r in rows]
            ax.plot(ms, [r["measured"] for r in rows], "o-", color=f"C{k}",
                    label=f"{schedule}, measured")
            ax.plot(ms, [formula_bubble(rows[0]["key"], p, m, rows[0]["v"]) for m in ms],
                    "--", color=f"C{k}", label=f"{schedule}, formula")
    handles, labels = panels[-1][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=LEGEND_PT, frameon=False)
    fig.suptitle(title, fontsize=10)
    rows = -(-len(labels) // 2)
    fig.set_figheight(fig.get_figheight() + rows * LEGEND_ROW_IN)
    fig.tight_layout(rect=(0, (rows * LEGEND_ROW_IN + 0.1) / fig.get_figheight(), 1, 1))
    plt.close(fig)
    return fig
