"""One collective call, animated from its record: pieces fly from the rank that sent them
to the rank that received them, reductions are combined, the last frame is the recorded
`after`. Used by notebooks 01-09 (animate_record).
"""
from __future__ import annotations

from typing import Any, Mapping

from matplotlib.animation import FuncAnimation
from matplotlib.patches import Rectangle

from helpers.figures.animation import ease, step_animation
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
COMBINE_FACE = "#fff3c4"


def _texts(value: Any) -> list[str] | None:
    return None if value is None else [format_value(v) for v in flatten(value)]


def _combined(texts: list[str], op: str) -> str:
    """How contributions combine, as text: 11+21+31, or max(11,21,31); long ones shortened."""
    if len(texts) > 4:
        return f"{INFIX.get(op, op.lower())} of {len(texts)}"
    return (INFIX[op].join(texts) if op in INFIX else f"{op.lower()}({','.join(texts)})")


def animate_record(record: Mapping[str, Any], travel_frames: int = TRAVEL_FRAMES,
                   dpi: int = 60) -> FuncAnimation:
    """Frames: the recorded `before`; the pieces in flight; (reductions) the contributions
    combined; the recorded `after`. Values shown come from the record only."""
    collective, n, _, params, ranks = parse_record(dict(record))
    if travel_frames < 1:
        raise ValueError(f"travel_frames must be at least 1, got {travel_frames}")
    sent_arg, written_arg = SENT[collective], WRITTEN[collective]
    befores = [r.get("before") or {} for r in ranks]
    afters = [r.get("after") or {} for r in ranks]
    sent = [_texts(b.get(sent_arg)) for b in befores]
    written_before = [_texts(b.get(written_arg)) for b in befores]
    written_after = [_texts(a.get(written_arg)) for a in afters]
    for r in range(n):
        for what, texts in (("sent", sent[r]), ("written", written_after[r])):
            if texts is not None and len(texts) > MAX_CELLS:
                raise ValueError(f"rank {r}'s {what} argument has {len(texts)} elements; the "
                                 f"animation draws at most {MAX_CELLS}: use a smaller tensor")
    def cut(arg: str, r: int) -> list:
        return pieces(collective, arg, befores[r].get(arg), r, n, befores[r], params)

    paths = routes(collective, n, params, [cut(sent_arg, r) for r in range(n)],
                   [cut(written_arg, r) for r in range(n)])
    op = str(params.get("op") or "SUM").rsplit(".", 1)[-1].upper()
    reducing = collective in REDUCING

    colors = ValueColors()
    for group in (sent, written_before, written_after):
        for texts in group:
            for text in texts or []:
                colors.add(text)

    import matplotlib.pyplot as plt

    same = sent_arg == written_arg
    headers = (f"{sent_arg} (sent{', before' if same else ''})", f"{written_arg} (written)")
    root = root_of(collective, params) if collective != "send_recv" else None
    names = [f"rank {r}" + (" (root)" if r == root else "") for r in range(n)]
    signature = call_signature(collective, params)
    longest_title = (f"{signature} · world size {n} · frame 10/10: "
                     "after the call, as recorded")
    n_left = max([len(t) for t in sent if t] + [1])
    n_right = max([len(t) for t in written_before + written_after if t] + [1])
    right_x = max(n_left + GAP, CHAR * len(headers[0]) + 0.6)
    left_margin = CHAR * max(map(len, names)) + 0.5
    undefined = [undefined_after(collective, r, params, written_arg) for r in range(n)]
    note = 2.6 if any(undefined) else 0.0       # room for "undefined" after the cells
    right_end = right_x + max(n_right + note, CHAR * len(headers[1])) + 0.3
    width_units = max(left_margin + right_end, 1.25 * CHAR * len(longest_title))
    right_end = width_units - left_margin
    height_units = n * BAND_PITCH + 1.2
    unit = min(0.42, 9.5 / width_units)
    fig = plt.figure(figsize=(width_units * unit, height_units * unit + 0.5), dpi=dpi)
    ax = fig.add_axes([0, 0, 1, (height_units * unit) / (height_units * unit + 0.5)])
    ax.set_xlim(-left_margin, right_end)
    ax.set_ylim(n * BAND_PITCH, -1.2)
    ax.set_axis_off()
    font = 26 * unit
    for x, header in zip((0, right_x), headers):
        ax.text(x, -0.6, header, ha="left", fontsize=font, family="monospace")
    title = fig.text(0.01, 0.97, "", fontsize=font * 1.15, fontweight="bold", va="top")

    def cell(x: float, y: float, gid: str) -> tuple[Rectangle, Any]:
        box = ax.add_patch(Rectangle((x + 0.04, y), 0.92, 1.0, facecolor="white",
                                     edgecolor="#3a3a3a", linewidth=0.8, gid=gid))
        return box, ax.text(x + 0.5, y + 0.5, "", ha="center", va="center", fontsize=font,
                            gid=gid)

    def paint(box: Rectangle, label: Any, text: str, face: str | None = None,
              hatch: str | None = None) -> None:
        face = face or colors(text)
        box.set_facecolor(face)
        box.set_hatch(hatch)
        box.set_edgecolor(UNDEFINED_EDGE if hatch else "#3a3a3a")
        label.set_text(text)
        label.set_color(text_color_for(face) if not hatch else "#555555")

    left_cells, right_cells, notes = [], [], []
    for r in range(n):
        y = r * BAND_PITCH
        ax.text(-0.3, y + 0.5, names[r], ha="right", va="center", fontsize=font,
                fontweight="bold" if r == root else "normal")
        left_cells.append([cell(k, y, f"sent:rank{r}:{k}") for k in range(len(sent[r] or []))])
        size = len(written_after[r] or written_before[r] or [])
        right_cells.append([cell(right_x + k, y, f"written:rank{r}:{k}") for k in range(size)])
        if undefined[r] and right_cells[r]:
            notes.append(ax.text(right_x + len(right_cells[r]) + 0.2, y + 0.5, "undefined",
                                 va="center", fontsize=font * 0.9, color="#6b6b6b",
                                 fontstyle="italic", visible=False))
        for x, texts in ((0, sent[r]), (right_x, written_after[r] or written_before[r])):
            if texts is None:
                ax.text(x + 0.1, y + 0.5, "None (not passed)", va="center",
                        fontsize=font * 0.9, color="#999999", fontstyle="italic")
        for (box, label), text in zip(left_cells[r], sent[r] or []):
            paint(box, label, text)

    flights = []            # (token, (x0, y0), (x1, y1)) per element in flight
    for path in paths:
        for q, src in path.sources:
            for offset in range(path.dst.stop - path.dst.start):
                text = sent[q][src.start + offset]
                token = ax.text(0, 0, text, ha="center", va="center", fontsize=font,
                                color=text_color_for(colors(text)), visible=False, zorder=5,
                                gid="token", bbox=dict(boxstyle="round,pad=0.25",
                                                       fc=colors(text), ec="#222222", lw=0.8))
                start = (src.start + offset + 0.5, q * BAND_PITCH + 0.5)
                end = (right_x + path.dst.start + offset + 0.5,
                       path.dst_rank * BAND_PITCH + 0.5)
                flights.append((token, start, end))

    combine_frame = 1 + travel_frames if reducing else None
    frame_count = 2 + travel_frames + (1 if reducing else 0)

    def draw_frame(i: int) -> None:
        last = i == frame_count - 1
        for r in range(n):
            texts = written_after[r] if last else written_before[r]
            for k, (box, label) in enumerate(right_cells[r]):
                text = texts[k] if texts and k < len(texts) else ""
                hatch = "////" if last and undefined[r] else None
                paint(box, label, text, UNDEFINED_FACE if hatch else None, hatch)
        for note_text in notes:
            note_text.set_visible(last)
        flying = 1 <= i <= travel_frames
        for token, (x0, y0), (x1, y1) in flights:
            token.set_visible(flying)
            if flying:
                f = ease(i / travel_frames)
                token.set_position((x0 + f * (x1 - x0), y0 + f * (y1 - y0)))
        if i == combine_frame:
            for path in paths:
                for offset in range(path.dst.stop - path.dst.start):
                    parts = [sent[q][s.start + offset] for q, s in path.sources]
                    box, label = right_cells[path.dst_rank][path.dst.start + offset]
                    paint(box, label, _combined(parts, op), COMBINE_FACE)
                    label.set_fontsize(font * (0.75 if len(parts) > 2 else 0.9))
        else:
            for cells in right_cells:
                for _, label in cells:
                    label.set_fontsize(font)
        phase = ("before the call" if i == 0 else "after the call, as recorded" if last
                 else f"combining with {op}" if i == combine_frame
                 else f"in flight, {i}/{travel_frames}")
        title.set_text(f"{signature} · world size {n} · "
                       f"frame {i + 1}/{frame_count}: {phase}")

    def read_drawn() -> dict:
        return {"title": title.get_text(),
                "ranks": [{"rank": r, "sent": [lbl.get_text() for _, lbl in left_cells[r]],
                           "written": [lbl.get_text() for _, lbl in right_cells[r]]}
                          for r in range(n)],
                "moving": [[round(t.get_position()[0], 3), round(t.get_position()[1], 3),
                            t.get_text()] for t, _, _ in flights if t.get_visible()]}

    draw_frame(0)
    return step_animation(fig, frame_count, draw_frame, read_drawn)
