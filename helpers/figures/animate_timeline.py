"""Measured per-rank timelines filling in over time: the pipeline schedules (notebook 18)
and the barrier (notebook 00).

An event is (kind, label, begin, end), seconds since the ranks' common start, as
helpers.training.pipeline.Timeline records them. All panels share one clock, so a
faster schedule finishes earlier in the animation too.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from matplotlib.animation import FuncAnimation
from matplotlib.patches import Patch, Rectangle

from helpers.figures.animation import CONTENT_WIDTH_IN, step_animation

FRAMES = 10            # a 4-stage pipeline's two panels: ~240 KB at 10 frames
LABEL_PT, LEGEND_PT, TITLE_PT = 8.5, 9.5, 11     # ≥ MIN_FONT_PT: ≥ 10 px in the column
HEADER_IN = 0.6        # the heading's line and the legend's, above the panels
# The colours of helpers.figures.display.plot_barrier, so the two barrier figures read alike.
BARRIER_COLOURS = {"working": "#9ecae1", "waiting in dist.barrier()": "#fdd0a2"}
FALLBACK = ("#4c8bf5", "#2e9e5b", "#f0a030", "#d9534f", "#9b59b6", "#8c564b")


def animate_timeline(timelines: Mapping[str, Sequence[Sequence]],
                     colours: Mapping[str, str] | None = None, title: str = "",
                     frames: int = FRAMES,
                     labelled: Sequence[str] | None = None) -> FuncAnimation:
    """One panel per schedule, one row per rank; frame k draws what happened before
    k/(frames − 1) of the longest step: frame 0 nothing, the last frame every span.
    Spans of the kinds in `labelled` (default: all) show their label once complete."""
    if not timelines:
        raise ValueError("no timeline to animate")
    if frames < 2:
        raise ValueError(f"frames must be at least 2, got {frames}")
    events = {name: [[(str(k), mb, float(b), float(e)) for k, mb, b, e in rank_events]
                     for rank_events in by_rank] for name, by_rank in timelines.items()}
    for name, by_rank in events.items():
        for r, rank_events in enumerate(by_rank):
            for kind, _, begin, end in rank_events:
                if not 0 <= begin <= end:
                    raise ValueError(f"{name}, rank {r}: a {kind} span from {begin} to {end} "
                                     "s; spans must start at or after 0 and not end before")
    kinds = list(dict.fromkeys(k for by_rank in events.values() for evs in by_rank
                               for k, *_ in evs))
    colours = dict(colours or {})
    for i, kind in enumerate(k for k in kinds if k not in colours):
        colours[kind] = FALLBACK[i % len(FALLBACK)]
    total = max([e for by_rank in events.values() for evs in by_rank for *_, e in evs] + [0])
    if total <= 0:
        raise ValueError("the timelines hold no span that lasts any time")

    import matplotlib.pyplot as plt

    n_rows = sum(len(by_rank) for by_rank in events.values())
    height = HEADER_IN + 0.6 + 0.36 * n_rows + 0.45 * len(events)
    fig, axes = plt.subplots(len(events), 1, squeeze=False, sharex=True,
                             figsize=(CONTENT_WIDTH_IN, height))
    bars, labels, now_lines = [], [], []
    for ax, (name, by_rank) in zip(axes[:, 0], events.items()):
        for r, rank_events in enumerate(by_rank):
            for j, (kind, mb, begin, end) in enumerate(rank_events):
                box = ax.add_patch(Rectangle((begin * 1e3, r - 0.4), 0, 0.8,
                                             facecolor=colours[kind], edgecolor="none",
                                             gid=f"{name}:rank{r}:{j}:{kind}"))
                bars.append((name, r, kind, begin, end, box))
                shows_label = labelled is None or kind in labelled
                if shows_label and mb is not None and (end - begin) > 0.02 * total:
                    labels.append((end, ax.text((begin + end) / 2 * 1e3, r, str(mb),
                                                ha="center", va="center", fontsize=LABEL_PT,
                                                color="white", visible=False)))
        ax.set_ylim(len(by_rank) - 0.5, -0.5)
        ax.set_yticks(range(len(by_rank)), [f"rank {r}" for r in range(len(by_rank))])
        ax.set_xlim(0, total * 1e3 * 1.02)
        ax.set_title(name, fontsize=10, loc="left", pad=3)
        now_lines.append(ax.axvline(0, color="#c2410c", lw=1.2, ls="--"))
    axes[-1, 0].set_xlabel("ms since the common start (white: idle)")
    heading = fig.text(0.1 / CONTENT_WIDTH_IN, 1 - 0.08 / height, "", ha="left", va="top",
                       fontsize=TITLE_PT, fontweight="bold")
    fig.legend(handles=[Patch(color=colours[k], label=k) for k in kinds], loc="upper left",
               bbox_to_anchor=(0.1 / CONTENT_WIDTH_IN, 1 - 0.34 / height),
               ncol=min(len(kinds), 5), fontsize=LEGEND_PT, frameon=False,
               handlelength=1.4, columnspacing=1.4, borderaxespad=0, borderpad=0)
    fig.tight_layout(rect=(0, 0, 1, 1 - HEADER_IN / height))

    def draw_frame(i: int) -> None:
        now = total * i / (frames - 1) if i < frames - 1 else total
        for *_, begin, end, box in bars:
            box.set_width(max(0.0, min(end, now) - begin) * 1e3)
        for end, label in labels:
            label.set_visible(end <= now)
        for line in now_lines:
            line.set_xdata([now * 1e3, now * 1e3])
        heading.set_text(f"{title + ' · ' if title else ''}{now * 1e3:.1f} of "
                         f"{total * 1e3:.1f} ms · frame {i + 1}/{frames}")

    def read_drawn() -> dict:
        spans: dict[str, list[list]] = {name: [[] for _ in by_rank]
                                        for name, by_rank in events.items()}
        for name, r, kind, _, _, box in bars:
            if box.get_width() > 0:
                x = box.get_x()
                spans[name][r].append([kind, x / 1e3, (x + box.get_width()) / 1e3])
        return {"title": heading.get_text(), "spans": spans}

    draw_frame(0)
    return step_animation(fig, frames, draw_frame, read_drawn)


def barrier_events(timings: Sequence[Mapping[str, Any]]) -> list[list[tuple]]:
    """Notebook 00's pulled {"rank", "arrived", "left"} → per rank: working, then waiting."""
    rows = sorted(timings, key=lambda t: t["rank"])
    return [[("working", None, 0.0, float(t["arrived"])),
             ("waiting in dist.barrier()", None, float(t["arrived"]), float(t["left"]))]
            for t in rows]


def animate_barrier(timings: Sequence[Mapping[str, Any]], frames: int = FRAMES
                    ) -> FuncAnimation:
    """The barrier of notebook 00 as it happened: each rank working, then waiting."""
    return animate_timeline({"dist.barrier()": barrier_events(timings)}, BARRIER_COLOURS,
                            "nobody leaves before the last rank arrives", frames)
