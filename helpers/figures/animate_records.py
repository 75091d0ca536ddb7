"""One collective call, animated from its record: pieces fly from the rank that sent them
to the rank that received them, reductions are combined, the last frame is the recorded
`after`.
"""
from __future__ import annotations

from typing import Any, Mapping

from matplotlib.animation import FuncAnimation
from matplotlib.patches import Rectangle

from helpers.figures.animation import CONTENT_WIDTH_IN, ease, step_animation
from helpers.figures.animate_routes import SENT, WRITTEN, pieces, routes
from helpers.collectives.arrays import parse_record
from helpers.collectives.registry import REDUCING, root_of
from helpers.formatting import format_value
from helpers.figures.panels import (UNDEFINED_EDGE, UNDEFINED_FACE, ValueColors, call_signature,
                                    flatten, text_color_for, undefined_after)

MAX_CELLS = 48            # elements per argument and rank the animation can draw legibly
TRAVEL_FRAMES = 4         # frames while the pieces are in flight
INFIX = {"SUM": "+", "PRODUCT": "×", "BAND": "&", "BOR": "|", "BXOR": "^"}
BAND_PITCH, GAP = 1.5, 3.0    # rows of ranks; room between the two columns for the flight
CHAR = 0.22                   # a character's width, in cells, at the cells' font size
SMALL = 0.9                   # notes and reductions' contributions, relative to the cells' font
SMALL_CHAR = 0.26             # a character's width, in cells, at the SMALL size (digits, +)
MAX_UNIT = 0.5                # inches per cell at most: fonts of 13 pt
COMBINE_FACE = "#fff3c4"


def _texts(value: Any) -> list[str] | None:
    return None if value is None else [format_value(v) for v in flatten(value)]


def _combined(texts: list[str], op: str) -> str:
    """How contributions combine, as text: 11+21+31, or max(11,21,31); long ones shortened."""
    if len(texts) > 4:
        return f"{INFIX.get(op, op.lower())} of {len(texts)}"
    return (INFIX[op].join(texts) if op in INFIX else f"{op.lower()}({','.join(texts)})")


class _RecordAnimation:
    """The texts of one record, the figure's cells and tokens, and how each frame looks."""

    def __init__(self, record: Mapping[str, Any], travel_frames: int):
        collective, n, _, params, ranks = parse_record(dict(record))
        if travel_frames < 1:
            raise ValueError(f"travel_frames must be at least 1, got {travel_frames}")
        self.n, self.travel_frames = n, travel_frames
        sent_arg, written_arg = SENT[collective], WRITTEN[collective]
        befores = [r.get("before") or {} for r in ranks]
        afters = [r.get("after") or {} for r in ranks]
        self.sent = [_texts(b.get(sent_arg)) for b in befores]
        self.written_before = [_texts(b.get(written_arg)) for b in befores]
        self.written_after = [_texts(a.get(written_arg)) for a in afters]
        for r in range(n):
            for what, texts in (("sent", self.sent[r]), ("written", self.written_after[r])):
                if texts is not None and len(texts) > MAX_CELLS:
                    raise ValueError(f"rank {r}'s {what} argument has {len(texts)} elements; "
                                     f"the animation draws at most {MAX_CELLS}: use a "
                                     "smaller tensor")

        def cut(arg: str, r: int) -> list:
            return pieces(collective, arg, befores[r].get(arg), r, n, befores[r], params)

        self.paths = routes(collective, n, params, [cut(sent_arg, r) for r in range(n)],
                            [cut(written_arg, r) for r in range(n)])
        self.op = str(params.get("op") or "SUM").rsplit(".", 1)[-1].upper()
        self.colors = ValueColors()
        for group in (self.sent, self.written_before, self.written_after):
            for texts in group:
                for text in texts or []:
                    self.colors.add(text)
        same = sent_arg == written_arg
        self.headers = (f"{sent_arg} (sent{', before' if same else ''})",
                        f"{written_arg} (written)")
        self.root = root_of(collective, params) if collective != "send_recv" else None
        self.names = [f"rank {r}" + (" (root)" if r == self.root else "") for r in range(n)]
        self.signature = call_signature(collective, params)
        self.undefined = [undefined_after(collective, r, params, written_arg) for r in range(n)]
        self.combine_frame = 1 + travel_frames if collective in REDUCING else None
        self.frame_count = 2 + travel_frames + (1 if collective in REDUCING else 0)
        # a reduction's written cells are wide enough for "11+21+31" at the SMALL size
        longest = max([len(self._contributions(path, k)) for path in self.paths
                       for k in range(path.dst.stop - path.dst.start)]
                      if self.combine_frame else [0])
        self.cell_w = max(1.0, SMALL_CHAR * longest + 0.35)
        self._figure()
        self._rank_rows()
        self._tokens()

    def _figure(self) -> None:
        import matplotlib.pyplot as plt

        n = self.n
        # the title's two lines: the call, then the frame and its phase
        longest_title = max(len(f"{self.signature} · world size {n}"),
                            len("frame 10/10: after the call, as recorded"))
        n_left = max([len(t) for t in self.sent if t] + [1])
        n_right = max([len(t) for t in self.written_before + self.written_after if t] + [1])
        self.right_x = max(n_left + GAP, CHAR * len(self.headers[0]) + 0.6)
        left_margin = CHAR * max(map(len, self.names)) + 0.5
        note = 2.6 if any(self.undefined) else 0.0       # room for "undefined" after the cells
        right_end = self.right_x + max(n_right * self.cell_w + note,
                                       CHAR * len(self.headers[1])) + 0.3
        width_units = max(left_margin + right_end, 1.25 * CHAR * longest_title)
        unit = min(MAX_UNIT, CONTENT_WIDTH_IN / width_units)
        # the reading column's width; a narrower drawing keeps its left edge, air on the right
        width_units = CONTENT_WIDTH_IN / unit
        right_end = width_units - left_margin
        height_units = n * BAND_PITCH + 1.2
        title_in = 0.75
        height_in = height_units * unit + title_in
        self.fig = plt.figure(figsize=(CONTENT_WIDTH_IN, height_in))
        self.ax = self.fig.add_axes([0, 0, 1, height_units * unit / height_in])
        self.ax.set_xlim(-left_margin, right_end)
        self.ax.set_ylim(n * BAND_PITCH, -1.2)
        self.ax.set_axis_off()
        self.font = 26 * unit
        for x, header in zip((0, self.right_x), self.headers):
            self.ax.text(x, -0.6, header, ha="left", fontsize=self.font, family="monospace")
        self.title = self.fig.text(0.1 / CONTENT_WIDTH_IN, 1 - 0.1 / height_in, "",
                                   fontsize=self.font * 1.15, fontweight="bold", va="top",
                                   linespacing=1.4)

    def _cell(self, x: float, y: float, gid: str, w: float = 1.0) -> tuple[Rectangle, Any]:
        box = self.ax.add_patch(Rectangle((x + 0.04, y), w - 0.08, 1.0, facecolor="white",
                                          edgecolor="#3a3a3a", linewidth=0.8, gid=gid))
        return box, self.ax.text(x + w / 2, y + 0.5, "", ha="center", va="center",
                                 fontsize=self.font, gid=gid)

    def _paint(self, box: Rectangle, label: Any, text: str, face: str | None = None,
               hatch: str | None = None) -> None:
        face = face or self.colors(text)
        box.set_facecolor(face)
        box.set_hatch(hatch)
        box.set_edgecolor(UNDEFINED_EDGE if hatch else "#3a3a3a")
        label.set_text(text)
        label.set_color(text_color_for(face) if not hatch else "#555555")

    def _rank_rows(self) -> None:
        """Per rank: its name, the sent cells (filled), the written cells (filled per frame)."""
        ax, font, right_x = self.ax, self.font, self.right_x
        self.left_cells, self.right_cells, self.notes = [], [], []
        for r in range(self.n):
            y = r * BAND_PITCH
            ax.text(-0.3, y + 0.5, self.names[r], ha="right", va="center", fontsize=font,
                    fontweight="bold" if r == self.root else "normal")
            self.left_cells.append([self._cell(k, y, f"sent:rank{r}:{k}")
                                    for k in range(len(self.sent[r] or []))])
            written = self.written_after[r] or self.written_before[r]
            self.right_cells.append([self._cell(right_x + k * self.cell_w, y,
                                                f"written:rank{r}:{k}", self.cell_w)
                                     for k in range(len(written or []))])
            if self.undefined[r] and self.right_cells[r]:
                end = right_x + len(self.right_cells[r]) * self.cell_w
                self.notes.append(ax.text(end + 0.2, y + 0.5, "undefined", va="center",
                                          fontsize=font * SMALL,
                                          color="#6b6b6b", fontstyle="italic", visible=False))
            for x, texts in ((0, self.sent[r]), (right_x, written)):
                if texts is None:
                    ax.text(x + 0.1, y + 0.5, "None (not passed)", va="center",
                            fontsize=font * SMALL, color="#999999", fontstyle="italic")
            for (box, label), text in zip(self.left_cells[r], self.sent[r] or []):
                self._paint(box, label, text)

    def _tokens(self) -> None:
        """One token per element in flight: (token, (x0, y0), (x1, y1))."""
        self.flights = []
        for path in self.paths:
            for q, src in path.sources:
                for offset in range(path.dst.stop - path.dst.start):
                    text = self.sent[q][src.start + offset]
                    face = self.colors(text)
                    token = self.ax.text(0, 0, text, ha="center", va="center",
                                         fontsize=self.font, color=text_color_for(face),
                                         visible=False, zorder=5, gid="token",
                                         bbox=dict(boxstyle="round,pad=0.25", fc=face,
                                                   ec="#222222", lw=0.8))
                    start = (src.start + offset + 0.5, q * BAND_PITCH + 0.5)
                    end = (self.right_x + (path.dst.start + offset + 0.5) * self.cell_w,
                           path.dst_rank * BAND_PITCH + 0.5)
                    self.flights.append((token, start, end))

    def draw_frame(self, i: int) -> None:
        last, travel = i == self.frame_count - 1, self.travel_frames
        for r in range(self.n):
            texts = self.written_after[r] if last else self.written_before[r]
            for k, (box, label) in enumerate(self.right_cells[r]):
                text = texts[k] if texts and k < len(texts) else ""
                hatch = "////" if last and self.undefined[r] else None
                self._paint(box, label, text, UNDEFINED_FACE if hatch else None, hatch)
        for note_text in self.notes:
            note_text.set_visible(last)
        flying = 1 <= i <= travel
        for token, (x0, y0), (x1, y1) in self.flights:
            token.set_visible(flying)
            if flying:
                f = ease(i / travel)
                token.set_position((x0 + f * (x1 - x0), y0 + f * (y1 - y0)))
        if i == self.combine_frame:
            self._combine()
        else:
            for cells in self.right_cells:
                for _, label in cells:
                    label.set_fontsize(self.font)
        phase = ("before the call" if i == 0 else "after the call, as recorded" if last
                 else f"combining with {self.op}" if i == self.combine_frame
                 else f"in flight, {i}/{travel}")
        self.title.set_text(f"{self.signature} · world size {self.n}\n"
                            f"frame {i + 1}/{self.frame_count}: {phase}")

    def _contributions(self, path, offset: int) -> str:
        return _combined([self.sent[q][s.start + offset] for q, s in path.sources], self.op)

    def _combine(self) -> None:
        """The reduction's frame: each written cell shows how its contributions combine."""
        for path in self.paths:
            for offset in range(path.dst.stop - path.dst.start):
                box, label = self.right_cells[path.dst_rank][path.dst.start + offset]
                self._paint(box, label, self._contributions(path, offset), COMBINE_FACE)
                label.set_fontsize(self.font * SMALL)

    def read_drawn(self) -> dict:
        return {"title": self.title.get_text(),
                "ranks": [{"rank": r, "sent": [lbl.get_text() for _, lbl in self.left_cells[r]],
                           "written": [lbl.get_text() for _, lbl in self.right_cells[r]]}
                          for r in range(self.n)],
                "moving": [[round(t.get_position()[0], 3), round(t.get_position()[1], 3),
                            t.get_text()] for t, _, _ in self.flights if t.get_visible()]}


def animate_record(record: Mapping[str, Any], travel_frames: int = TRAVEL_FRAMES
                   ) -> FuncAnimation:
    """Frames: the recorded `before`; the pieces in flight; (reductions) the contributions
    combined; the recorded `after`. Values shown come from the record only."""
    drawing = _RecordAnimation(record, travel_frames)
    drawing.draw_frame(0)
    return step_animation(drawing.fig, drawing.frame_count, drawing.draw_frame,
                          drawing.read_drawn)
