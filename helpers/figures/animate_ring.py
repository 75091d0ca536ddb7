"""The hand-built ring all-reduce, step by step, from the states the ranks kept.

Frame 0 is every rank's tensor before the first step; then, per ring step, one frame with
the chunks in flight (each rank's sent chunk on its way to its right neighbour) and one
with the state every rank kept after that step. Values are the measured ones; colours say
how many ranks' data a chunk holds (the model's count, as in helpers.collectives.ring.plot_ring).
"""
from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.animation import FuncAnimation
from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

from helpers.figures.animation import CONTENT_WIDTH_IN, MIN_FONT_PT, step_animation
from helpers.figures.panels import text_color_for
from helpers.collectives.ring import RingTrace, chunk_text, chunk_face

BAND_PITCH = 1.6
IN_FLIGHT_UP_TO = 4   # ranks: beyond, one frame per step only (the page stays light)


def _states(trace: RingTrace, measured: Any) -> tuple[np.ndarray, list, str]:
    """The states shown (measured, else the model's), the steps to show and a note for
    the title: every step, or (an unfinished exercise) those whose states were kept."""
    expected = trace.tensors()
    shown = expected if measured is None else np.asarray(measured, dtype=np.float64)
    steps = trace.steps
    partial = shown.ndim == 3 and shown.shape[1:] == expected.shape[1:]
    if partial and 1 < len(shown) < len(steps):
        return shown, steps[:len(shown)], f" · only {len(shown)} of {len(steps)} states kept"
    if shown.shape != expected.shape:
        raise ValueError(f"the measured states have shape {shown.shape} (steps, ranks, "
                         f"elements), the ring needs {expected.shape}: every step kept?")
    return shown, steps, ""


class _RingAnimation:
    """The grid of chunks (rank × chunk), the tokens in flight, and each frame."""

    def __init__(self, trace: RingTrace, measured: Any):
        self.trace, n = trace, trace.world_size
        shown, self.steps, self.missing = _states(trace, measured)
        chunks = shown.reshape(len(self.steps), n, n, -1)
        self.texts = [[[chunk_text(chunks[s, r, c]) for c in range(n)] for r in range(n)]
                      for s in range(len(self.steps))]
        self.per_step = 2 if n <= IN_FLIGHT_UP_TO else 1
        self.frame_count = 1 + self.per_step * (len(self.steps) - 1)
        self._figure()

    def _figure(self) -> None:
        """The grid on the left, the colours' key on the right: the reading column's width."""
        import matplotlib.pyplot as plt

        n = self.trace.world_size
        width_units, height_units = n + 3.2, n * BAND_PITCH + 1.0
        unit = min(0.55, 5.0 / width_units, 6.0 / height_units)
        grid_in, height_in = width_units * unit, height_units * unit + 0.45
        self.fig = plt.figure(figsize=(CONTENT_WIDTH_IN, height_in))
        ax = self.fig.add_axes([0, 0, grid_in / CONTENT_WIDTH_IN, height_units * unit / height_in])
        ax.set_xlim(-2.2, n + 1.0)
        ax.set_ylim(n * BAND_PITCH, -1.0)
        ax.set_axis_off()
        font = max(MIN_FONT_PT / 0.8, 22 * unit)
        self.title = self.fig.text(0.1 / CONTENT_WIDTH_IN, 1 - 0.1 / height_in, "",
                                   fontsize=font, fontweight="bold", va="top")
        ax.text(-0.3, -0.3, "chunk", ha="right", va="center", fontsize=font * 0.8,
                color="#555555")
        for c in range(n):
            ax.text(c + 0.5, -0.3, str(c), ha="center", va="center", fontsize=font * 0.8,
                    color="#555555")
        self._key(grid_in, font)
        self.cells = []
        for r in range(n):
            y = r * BAND_PITCH
            ax.text(-0.3, y + 0.5, f"rank {r}", ha="right", va="center", fontsize=font)
            row = []
            for c in range(n):
                box = ax.add_patch(Rectangle((c + 0.04, y), 0.92, 1.0, facecolor="white",
                                             edgecolor="#8a8a8a", linewidth=0.7))
                row.append((box, ax.text(c + 0.5, y + 0.5, "", ha="center", va="center",
                                         fontsize=font)))
            self.cells.append(row)
        self.tokens = [ax.text(0, 0, "", ha="center", va="center", fontsize=font, zorder=6,
                               visible=False, bbox=dict(boxstyle="round,pad=0.25", fc="white",
                                                        ec="#222222", lw=0.8))
                       for _ in range(n)]
        self.arrows = [ax.add_patch(FancyArrowPatch((0, 0), (0, 0), arrowstyle="-|>",
                                                    mutation_scale=10, color="#555555",
                                                    lw=1.0, visible=False, zorder=4))
                       for _ in range(n)]

    def _key(self, grid_in: float, font: float) -> None:
        """What the colours and outlines mean (helpers.collectives.ring.plot_ring's key)."""
        n = self.trace.world_size
        entries = [(chunk_face(1, n), "#8a8a8a", 0.7, "one rank's data")]
        if n > 2:
            entries.append((chunk_face(2, n), "#8a8a8a", 0.7,
                            "partial sums (darker: more ranks)"))
        entries += [(chunk_face(n, n), "#8a8a8a", 0.7, f"summed over all {n} ranks"),
                    ("white", "#111111", 2.4, "received at this step")]
        if self.per_step == 2:
            entries.append(("white", "#222222", 0.8, "a chunk in flight to the next rank"))
        self.fig.legend(handles=[Patch(facecolor=f, edgecolor=e, linewidth=w, label=text)
                                 for f, e, w, text in entries],
                        loc="center left", bbox_to_anchor=((grid_in + 0.2) / CONTENT_WIDTH_IN,
                                                           0.5),
                        fontsize=max(MIN_FONT_PT, font * 0.85), frameon=False,
                        handlelength=1.6, handleheight=1.2, labelspacing=0.9)

    def _show_state(self, s: int, received: tuple[int, ...] = ()) -> None:
        n = self.trace.world_size
        for r in range(n):
            for c, (box, label) in enumerate(self.cells[r]):
                face = chunk_face(int(self.trace.counts[s, r, c]), n)
                box.set_facecolor(face)
                thick = bool(received) and received[r] == c
                box.set_edgecolor("#111111" if thick else "#8a8a8a")
                box.set_linewidth(2.4 if thick else 0.7)
                label.set_text(self.texts[s][r][c])
                label.set_color(text_color_for(face))

    def _in_flight(self, s: int, r: int) -> None:
        """Rank r's token: the chunk its left neighbour sends at step s, on its way."""
        n, step = self.trace.world_size, self.steps[s]
        left = (r - 1) % n
        sent = step.send[left]
        start = (sent + 0.5, left * BAND_PITCH + 0.5)
        end = (step.recv[r] + 0.5, r * BAND_PITCH + 0.5)
        if r == 0 and n > 1:   # the ring closes (last rank → 0): drawn on the right
            start, end = (n + 0.3, start[1]), (n + 0.3, end[1])
        face = chunk_face(int(self.trace.counts[s - 1, left, sent]), n)
        token = self.tokens[r]
        token.set_text(self.texts[s - 1][left][sent])
        token.get_bbox_patch().set_facecolor(face)
        token.set_color(text_color_for(face))
        token.set_position(((start[0] + end[0]) / 2, (start[1] + end[1]) / 2))
        self.arrows[r].set_positions(start, end)

    def draw_frame(self, i: int) -> None:
        if self.per_step == 1:
            s, in_flight = i, False
        else:
            s, in_flight = (i + 1) // 2, i % 2 == 1    # frame 2s − 1: step s in flight
        step = self.steps[s]
        self._show_state(s - 1 if in_flight else s, () if in_flight else step.recv)
        for r in range(self.trace.world_size):
            self.tokens[r].set_visible(in_flight)
            self.arrows[r].set_visible(in_flight)
            if in_flight:
                self._in_flight(s, r)
        what = "start" if s == 0 else step.label + (", in flight" if in_flight else "")
        self.title.set_text(f"ring all-reduce · {what} ({i + 1}/{self.frame_count})"
                            f"{self.missing}")

    def read_drawn(self) -> dict:
        return {"title": self.title.get_text(),
                "ranks": [[label.get_text() for _, label in row] for row in self.cells],
                "moving": [[round(t.get_position()[0], 3), round(t.get_position()[1], 3),
                            t.get_text()] for t in self.tokens if t.get_visible()]}


def animate_ring(trace: RingTrace, measured: Any = None) -> FuncAnimation:
    """Frames: start, then per step (in flight, after the step); `measured` is
    (steps, rank, elements) as helpers.collectives.ring.gathered_states returns (default:
    the model).
    Beyond IN_FLIGHT_UP_TO ranks a step is one frame, the state after it. Fewer states
    than the ring has (an unfinished exercise): those kept, and the title says so."""
    drawing = _RingAnimation(trace, measured)
    drawing.draw_frame(0)
    return step_animation(drawing.fig, drawing.frame_count, drawing.draw_frame,
                          drawing.read_drawn)
