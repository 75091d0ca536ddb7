"""Notebook 22's pictures: the scheme, the load per rank and expert, and the tokens' trip.

    draw_moe(world_size)                  # router → all_to_all → experts → all_to_all back
    plot_load(states, world_size)         # what each rank sent to each expert, two capacities
    animate_trip(states, world_size)      # every kept row to its expert and back (a player)

Everything is drawn from the notebook's parameters or from what the ranks pulled; each
rank in its colour of the series (`helpers.training.schemes.rank_colour`).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import MaxNLocator

from helpers.figures.animation import CONTENT_WIDTH_IN, MIN_FONT_PT, ease, step_animation
from helpers.training.schemes import INK, MUTED, SMALL, Canvas, rank_colour
from helpers.transformer.experts import EXPERTS_PER_RANK, TOKENS, TOP_K


# ------------------------------------------------------------------ the scheme
def draw_moe(world_size: int, per_rank: int = EXPERTS_PER_RANK, k: int = TOP_K) -> Figure:
    """Each rank's tokens → its router (top-k) → all_to_all → the experts, `per_rank` on each
    rank → all_to_all back → combined with the gates, in the tokens' own order."""
    n, E = world_size, world_size * per_rank
    pitch, bh = 1.15, 0.8
    xs = {"tokens": 0.3, "router": 3.0, "experts": 8.3, "combine": 13.6}
    width, height = 16.6, n * pitch + 1.4
    c = Canvas(width, height, f"mixture of experts over {n} ranks: {E} experts, top-{k}",
               f"{TOKENS // n} tokens and {per_rank} experts per rank; both "
               "all_to_all_single calls carry uneven pieces")
    top = 0.95
    for x, label in ((xs["tokens"] + 1.0, "tokens"), (xs["router"] + 1.2, "router, top-k"),
                     ((xs["router"] + 2.4 + xs["experts"]) / 2, "all_to_all"),
                     (xs["experts"] + 1.5, "experts"),
                     ((xs["experts"] + 3.0 + xs["combine"]) / 2, "all_to_all back"),
                     (xs["combine"] + 1.4, "combine")):
        c.text(x, 0.45, label, size=SMALL, bold=True)
    for r in range(n):
        y = top + r * pitch
        face, edge = rank_colour(r, True), rank_colour(r)
        c.box(xs["tokens"], y, 2.0, bh, f"rank {r}", face=face, edge=edge, gid=f"tokens:{r}")
        c.box(xs["router"], y, 2.4, bh, "softmax, top-k", face="white", edge=edge,
              gid=f"router:{r}", size=SMALL)
        c.arrow((xs["tokens"] + 2.0, y + bh / 2), (xs["router"], y + bh / 2))
        ew = 3.0 / per_rank
        for j in range(per_rank):
            e = r * per_rank + j
            c.box(xs["experts"] + j * ew + 0.05, y, ew - 0.1, bh, f"E{e}", face=face, edge=edge,
                  gid=f"expert:{e}", size=SMALL)
        c.box(xs["combine"], y, 2.8, bh, "x + Σ gate · out", face=face, edge=edge,
              gid=f"combine:{r}", size=SMALL)
    for r in range(n):            # every rank to every rank: the two exchanges
        for s in range(n):
            y0, y1 = top + r * pitch + bh / 2, top + s * pitch + bh / 2
            c.arrow((xs["router"] + 2.4, y0), (xs["experts"], y1), colour=rank_colour(r),
                    lw=1.0, gid=f"dispatch:{r}>{s}")
            c.arrow((xs["experts"] + 3.0, y1), (xs["combine"], y0), colour=rank_colour(r),
                    lw=1.0, dashed=True, gid=f"combine:{s}>{r}")
    c.text(0.3, top + n * pitch + 0.05, "first an all_to_all of the counts (rows for each "
           "expert), then the rows; the results return by the reverse splits",
           size=SMALL, colour=MUTED, ha="left")
    return c.fig


# ------------------------------------------------------------------ the load
def _heat(ax, counts: np.ndarray, cap: int, title: str, per_rank: int, font: float) -> None:
    n, E = counts.shape
    ax.imshow(counts, cmap="Blues", vmin=0, vmax=max(cap, 1), aspect="auto")
    for r in range(n):
        for e in range(E):
            full = counts[r, e] >= cap
            ax.text(e, r, str(int(counts[r, e])), ha="center", va="center", fontsize=font,
                    color="white" if counts[r, e] > 0.6 * cap else INK,
                    fontweight="bold" if full else "normal")
    ax.set_xticks(range(E), [f"E{e}" for e in range(E)], fontsize=font)
    ax.set_yticks(range(n), [f"rank {r}" for r in range(n)], fontsize=font)
    for tick, r in zip(ax.get_yticklabels(), range(n)):
        tick.set_color(rank_colour(r))
    for tick, e in zip(ax.get_xticklabels(), range(E)):   # the colour of the expert's rank
        tick.set_color(rank_colour(e // per_rank))
        tick.set_fontweight("bold")
    for owner in range(1, n):     # a line between two ranks' experts
        ax.axvline(owner * per_rank - 0.5, color="white", linewidth=3)
    ax.set_xlabel("expert (in the colour of the rank that holds it)", fontsize=font)
    ax.set_ylabel("sent by", fontsize=font)
    ax.set_title(title, fontsize=font + 1)


def plot_load(states: Sequence[Mapping[str, Any]], world_size: int,
              per_rank: int = EXPERTS_PER_RANK) -> Figure:
    """For each capacity factor run: rows each rank sent to each expert (bold: the expert
    was full, the capacity reached), and beside it the assignments each rank dropped."""
    import matplotlib.pyplot as plt

    runs = states[0]["load_runs"]
    n = world_size
    font = 9.5
    height = 0.9 + len(runs) * (1.3 + 0.5 * n)
    fig = plt.figure(figsize=(CONTENT_WIDTH_IN, height), dpi=100)
    grid = fig.add_gridspec(len(runs), 2, width_ratios=[4, 1.2], hspace=0.9 / (0.5 * n),
                            wspace=0.35, left=0.11, right=0.97, top=1 - 0.75 / height,
                            bottom=0.55 / height)
    for i, run in enumerate(runs):
        counts = np.array([s["load_runs"][i]["send_counts"] for s in states])
        dropped = [len(s["load_runs"][i]["dropped"]) for s in states]
        cf, cap = run["cf"], run["capacity"]
        _heat(fig.add_subplot(grid[i, 0]), counts, cap,
              f"cf {cf}: capacity {cap} rows per expert from each rank; "
              f"{int(counts.sum())} rows sent", per_rank, font)
        ax = fig.add_subplot(grid[i, 1])
        ax.barh(range(n), dropped, color=[rank_colour(r) for r in range(n)])
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_yticks(range(n), [f"rank {r}" for r in range(n)], fontsize=font)
        for r, d in enumerate(dropped):
            ax.text(d, r, f" {d}", va="center", fontsize=font)
        ax.set_xlim(0, max(max(dropped), 1) * 1.5)
        ax.set_xlabel("dropped", fontsize=font)
        ax.tick_params(labelsize=font)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=3))
        ax.set_title(f"{sum(dropped)} of {TOKENS * TOP_K} dropped", fontsize=font + 1)
    fig.suptitle(f"tokens routed: rows each rank sent to each expert · world size {n}",
                 fontsize=11.5, fontweight="bold", x=0.01, ha="left")
    plt.close(fig)
    return fig


# ------------------------------------------------------------------ the trip
class _Trip:
    """Every kept row as a square in its rank's colour: home (its rank's band, one column
    per token, one row per slot), in flight, at its expert, back home. Dropped: a grey ✗."""

    MOVES = 3      # frames in flight, each way

    def __init__(self, states: Sequence[Mapping[str, Any]], world_size: int, per_rank: int):
        import matplotlib.pyplot as plt

        self.n, self.per_rank = n, per_rank = world_size, per_rank
        E, share = n * per_rank, TOKENS // n
        self.E = E
        band = 1.3
        height = 1.3 + 1.05 * n
        self.fig = plt.figure(figsize=(CONTENT_WIDTH_IN, height))
        ax = self.fig.add_axes([0.01, 0.02, 0.98, 1 - 0.95 / height])
        home_w, gap, box_w = share * 0.3, 1.6, 3.4
        ax.set_xlim(-1.6, home_w + gap + per_rank * (box_w + 0.2) + 0.3)
        ax.set_ylim(n * band + 0.1, -0.45)
        ax.set_axis_off()
        font = max(MIN_FONT_PT, 9.0)
        self.title = self.fig.text(0.01, 1 - 0.1 / height, "", fontsize=10.5,
                                   fontweight="bold", va="top")
        home, away, colour, drop = [], [], [], []
        self.boxes, self.labels = [], []
        x_exp = home_w + gap
        for r in range(n):
            y = r * band
            ax.text(-0.2, y + 0.3, f"rank {r}", ha="right", va="center", fontsize=font,
                    color=rank_colour(r), fontweight="bold")
            for j in range(per_rank):
                e = r * per_rank + j
                x0 = x_exp + j * (box_w + 0.2)
                ax.add_patch(Rectangle((x0, y - 0.1), box_w, 0.95, facecolor=rank_colour(r, True),
                                       edgecolor=rank_colour(r), linewidth=1.2, alpha=0.5))
                self.labels.append(ax.text(x0 + box_w / 2, y - 0.14, f"E{e}", ha="center",
                                           fontsize=font * 0.9, va="bottom", color=INK))
                self.boxes.append((x0, x0 + box_w, y - 0.1, y + 0.85))
            ax.add_patch(Rectangle((0, y - 0.02), share * 0.3, 2 * 0.32 + 0.02,
                                   facecolor="none", edgecolor=rank_colour(r), linewidth=0.8,
                                   linestyle=(0, (3, 2))))
        fill = [0] * E              # rows arrive at an expert rank by rank, in send order
        most = max([sum(1 for x in s["sent_expert"] if x == e) for e in range(E)
                    for s in states] + [1]) * n
        cols = max(10, -(-most // 3))
        for s in states:
            r = s["rank"]
            for t, slot, e in zip(s["sent_token"], s["sent_slot"], s["sent_expert"]):
                home.append((t * 0.3 + 0.15, r * band + slot * 0.32 + 0.15))
                x0, _, y0, _ = self.boxes[e]
                place = fill[e]
                fill[e] += 1
                away.append((x0 + 0.5 + (place % cols) * 2.8 / cols,
                             y0 + 0.3 + (place // cols) * 0.25))
                colour.append(rank_colour(r))
            for t, slot in s["dropped"]:
                drop.append((t * 0.3 + 0.15, r * band + slot * 0.32 + 0.15))
        self.home, self.away, self.fill = np.array(home), np.array(away), fill
        self.squares = ax.scatter(self.home[:, 0], self.home[:, 1], s=26, marker="s",
                                  c=colour, edgecolors="white", linewidths=0.3, zorder=4)
        if drop:
            d = np.array(drop)
            ax.scatter(d[:, 0], d[:, 1], s=26, marker="x", c="#888888", zorder=4)
        self.dropped = len(drop)
        handles = [Patch(color=rank_colour(r), label=f"from rank {r}") for r in range(n)]
        handles.append(Patch(color="#888888", label="✗ dropped (over capacity)"))
        self.fig.legend(handles=handles, loc="upper left", ncol=min(n + 1, 5), frameon=False,
                        fontsize=font * 0.9, bbox_to_anchor=(0.0, 1 - 0.4 / height))
        self.frame_count = 2 * (self.MOVES + 1) + 1
        self.names = ["routed: each kept row waits on its rank"]
        self.names += ["all_to_all: to the experts"] * self.MOVES
        self.names += ["at the experts: every rank's rows, applied"]
        self.names += ["all_to_all back: the reverse splits"] * self.MOVES
        self.names += ["back home: combined with the gates"]

    def draw_frame(self, i: int) -> None:
        m = self.MOVES
        if i <= m + 1:
            f = ease(i / (m + 1))
        else:
            f = 1 - ease((i - m - 1) / (m + 1))
        self.squares.set_offsets(self.home + f * (self.away - self.home))
        arrived = i >= m + 1
        for e, label in enumerate(self.labels):
            label.set_text(f"E{e} · {self.fill[e]} rows" if arrived else f"E{e}")
        self.title.set_text(f"{self.names[i]} ({i + 1}/{self.frame_count})")

    def read_drawn(self) -> dict:
        at = np.asarray(self.squares.get_offsets())
        per_expert = [int(((at[:, 0] >= x0) & (at[:, 0] <= x1) & (at[:, 1] >= y0)
                           & (at[:, 1] <= y1)).sum()) for x0, x1, y0, y1 in self.boxes]
        home = int((np.abs(at - self.home).max(axis=1) < 1e-9).sum()) if len(at) else 0
        return {"title": self.title.get_text(), "at_experts": per_expert, "home": home,
                "dropped": self.dropped, "labels": [t.get_text() for t in self.labels]}


def animate_trip(states: Sequence[Mapping[str, Any]], world_size: int,
                 per_rank: int = EXPERTS_PER_RANK):
    """The run's own rows (each rank's `sent_token`, `sent_slot`, `sent_expert` in send
    order, and `dropped`) to their experts and back: a FuncAnimation for show_animation."""
    trip = _Trip(states, world_size, per_rank)
    trip.draw_frame(trip.frame_count - 1)
    return step_animation(trip.fig, trip.frame_count, trip.draw_frame, trip.read_drawn)
