"""Card pictures of the collective notebooks (01–10, 12), drawn from their saved records.

Cells take the colours of the page's own figure (helpers.figures.panels.record_colors), so a
value has the same colour on the card as in the notebook.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.patches import FancyBboxPatch, Rectangle

from helpers.collectives.registry import IO_ARGS, OUTPUT, ROLES, ROOT
from helpers.figures import panels
from helpers.formatting import format_value
from tools.thumbnails import (BAD, HEIGHT_PX, MIN_FONT, OK, WARN, WIDTH_PX, canvas, legend,
                              title)

CHAR_PX = 11.5          # a MIN_FONT character, about
MAX_RANKS = 8           # more ranks than this: the first MAX_RANKS drawn, the title says so


def first_record(data: Any) -> dict | None:
    from tools.compare import records

    return next((record for _where, record in records(data)), None)


def record_thumbnail(record: Mapping[str, Any]) -> Any:
    if record.get("ring_states"):
        return ring_figure(record)
    if record["collective"] == "all_to_all":
        return exchange_figure(record)
    return record_figure(record)


# --------------------------------------------------------------------------- 01-07, 09
def io_args(collective: str) -> tuple[str, str]:
    """(the argument drawn before, the one drawn after), as our drawings choose them."""
    if collective in IO_ARGS:
        return IO_ARGS[collective]
    inputs = [a for a, role in ROLES.get(collective, {}).items() if role.startswith("input")]
    out = OUTPUT.get(collective, "tensor")
    return (inputs[0] if inputs else out), out


def _chunk_text(value: Any) -> str:
    flat = panels.flatten(value)
    texts = [format_value(v) for v in flat]
    if not texts:
        return "[]"
    return texts[0] if len(set(texts)) == 1 else texts[0] + "…"


def cells(value: Any, is_list: bool) -> list[str] | None:
    """A buffer's cells: one per tensor of a list, else one per element (one when all equal)."""
    if value is None:
        return None
    if is_list and isinstance(value, list):
        return [_chunk_text(v) for v in value]
    texts = [format_value(v) for v in panels.flatten(value)]
    return texts[:1] if len(set(texts)) == 1 else texts


def _fit(texts: list[str], room: float, cell_w: float) -> list[str]:
    keep = max(int(room // cell_w), 2)
    return texts if len(texts) <= keep else texts[:keep - 1] + ["…"]


def record_figure(record: Mapping[str, Any]) -> Any:
    """Every rank's input before → its output after, one row per rank, one cell per chunk."""
    collective = record["collective"]
    params = record.get("params") or {}
    in_arg, out_arg = io_args(collective)
    ranks = sorted(record["ranks"], key=lambda r: r["rank"])
    colors = panels.record_colors(panels.build_panels(record))
    befores = [cells((r.get("before") or {}).get(in_arg), in_arg.endswith("_list"))
               for r in ranks]
    afters = [cells((r.get("after") or {}).get(out_arg), out_arg.endswith("_list"))
              for r in ranks]
    texts = [t for side in befores + afters if side for t in side]
    cell_w = max(46.0, CHAR_PX * max(map(len, texts), default=1) + 12)
    marked = {params.get(k): k for k in ("src", "dst", ROOT.get(collective)) if k in params}
    labels = [f"rank {r['rank']}" + (f" · {marked[r['rank']]}" if r["rank"] in marked else "")
              for r in ranks]
    label_w = CHAR_PX * max(map(len, labels)) + 14
    room = (WIDTH_PX - 24 - label_w - 56) / 2
    used = [len(_fit(s, room, cell_w)) * cell_w for side in (befores, afters)
            for s in [max((s or [] for s in side), key=len)]]
    used = [max(u, cell_w * 1.6) for u in used]             # a "None" box is 1.6 cells
    shift = max((2 * room - sum(used)) / 2, 0)
    shown = ranks[:MAX_RANKS]
    fig, ax = canvas()
    more = f" · ranks 0–{len(shown) - 1} of {len(ranks)}" if len(ranks) > len(shown) else ""
    name = ("send → recv" if collective == "send_recv"
            else panels.call_signature(collective, params))
    title(fig, name + more)
    top, bottom = 76, HEIGHT_PX - (40 if _any_undefined(record, shown, out_arg) else 12)
    pitch = min(64.0, (bottom - top) / len(shown))
    x_before = 12 + label_w + shift / 2
    x_after = x_before + used[0] + 56 + shift / 2
    for x, word, width in ((x_before, f"before · {in_arg}", x_after - x_before - 16),
                           (x_after, f"after · {out_arg}", WIDTH_PX - 8 - x_after)):
        ax.text(x, top - 18, word if len(word) * CHAR_PX * 0.95 < width else word.split(" ")[0],
                fontsize=MIN_FONT, fontstyle="italic", color="#444444", va="center")
    for i, info in enumerate(shown):
        rank, y = info["rank"], top + i * pitch
        mid = y + pitch / 2
        ax.text(12, mid, labels[i], fontsize=MIN_FONT, fontweight="bold", va="center",
                color=panels.ROOT_COLOR if rank in marked else "#222222")
        undefined = panels.undefined_after(collective, rank, params, out_arg)
        _row(ax, x_before, y, pitch, befores[i], room, cell_w, colors, False, f"before{rank}")
        ax.text(x_after - 28, mid, "→", fontsize=MIN_FONT + 3, ha="center", va="center",
                color="#666666")
        _row(ax, x_after, y, pitch, afters[i], room, cell_w, colors, undefined, f"after{rank}")
    if bottom < HEIGHT_PX - 12:
        legend(ax, [(panels.UNDEFINED_FACE, "undefined after the call")], HEIGHT_PX - 20)
    return fig


def _any_undefined(record: Mapping[str, Any], ranks: Sequence[Mapping], out_arg: str) -> bool:
    return any(panels.undefined_after(record["collective"], r["rank"],
                                      record.get("params") or {}, out_arg) for r in ranks)


def _row(ax: Any, x: float, y: float, pitch: float, texts: list[str] | None, room: float,
         cell_w: float, colors: panels.ValueColors, undefined: bool, tag: str) -> None:
    h = min(pitch - 8, 48)
    y0 = y + (pitch - h) / 2
    if texts is None:                            # not passed on this rank
        ax.add_patch(FancyBboxPatch((x, y0), cell_w * 1.6, h, boxstyle="round,pad=0",
                                    facecolor="white", edgecolor="#a0a0a0",
                                    linestyle=(0, (3, 3)), gid=f"{tag}=None"))
        ax.text(x + cell_w * 0.8, y0 + h / 2, "None", fontsize=MIN_FONT, fontstyle="italic",
                color="#777777", ha="center", va="center")
        return
    for k, text in enumerate(_fit(texts, room, cell_w)):
        face = (panels.UNDEFINED_FACE if undefined else "white" if text == "…"
                else colors(text))
        ax.add_patch(Rectangle((x + k * cell_w, y0), cell_w, h, facecolor=face,
                               edgecolor=panels.UNDEFINED_EDGE if undefined else "#3a3a3a",
                               lw=0.8, hatch="///" if undefined else None,
                               gid=f"{tag}[{k}]={text}"))
        ax.text(x + (k + 0.5) * cell_w, y0 + h / 2, text, fontsize=MIN_FONT, ha="center",
                va="center", color="#444444" if undefined else panels.text_color_for(face),
                bbox=dict(boxstyle="square,pad=0.1", fc=face, ec="none") if undefined else None)


# --------------------------------------------------------------------------- 08
def _grid(ax: Any, matrix: list, x: float, y: float, cell: float, colors: panels.ValueColors,
          head: str, tag: str) -> None:
    from helpers.collectives.all_to_all import chunk_text

    n = len(matrix)
    ax.text(x + n * cell / 2, y - 44, head, fontsize=MIN_FONT, fontweight="bold",
            ha="center", va="center")
    for j in range(n):
        ax.text(x + (j + 0.5) * cell, y - 16, str(j), fontsize=MIN_FONT, ha="center",
                va="center", color="#555555")
    for i, row in enumerate(matrix):
        ax.text(x - 10, y + (i + 0.5) * cell, str(i), fontsize=MIN_FONT, ha="right",
                va="center", color="#555555")
        for j, chunk in enumerate(row):
            text = chunk_text(chunk, count=False)
            same = bool(chunk) and len({format_value(v) for v in chunk}) == 1
            face = colors(format_value(chunk[0])) if same else "white"
            ax.add_patch(Rectangle((x + j * cell, y + i * cell), cell, cell, facecolor=face,
                                   edgecolor="#3a3a3a", lw=0.8, gid=f"{tag}[{i}][{j}]={text}"))
            if len(text) * CHAR_PX < cell - 4:
                ax.text(x + (j + 0.5) * cell, y + (i + 0.5) * cell, text, fontsize=MIN_FONT,
                        ha="center", va="center", color=panels.text_color_for(face))


def exchange_figure(record: Mapping[str, Any]) -> Any:
    """08: the matrix of chunks sent (row: from rank i) and received (row: at rank j)."""
    from helpers.collectives.all_to_all import received_matrix, sent_matrix, transpose

    sent, received = sent_matrix(record), received_matrix(record)
    n = len(sent)
    colors = panels.record_colors(panels.build_panels(record))
    fig, ax = canvas()
    ok = received == transpose(sent)
    title(fig, "all_to_all: received = sent, transposed" + (" ✓" if ok else " ✗"))
    cell = min(58.0, 250 / n)
    y = 110 + (250 - n * cell) / 2
    _grid(ax, sent, 50, y, cell, colors, "sent, by rank", "sent")
    _grid(ax, received, WIDTH_PX - 30 - n * cell, y, cell, colors, "received, by rank",
          "received")
    ax.text(WIDTH_PX / 2 + 10, y + n * cell / 2, "→", fontsize=34, ha="center", va="center",
            color="#777777")
    return fig


# --------------------------------------------------------------------------- 10
def ring_figure(record: Mapping[str, Any]) -> Any:
    """10: each rank's chunks after every ring step, coloured by how many ranks they sum."""
    from helpers.collectives.ring import FULL_FACE, OWN_FACE, chunk_face, chunk_text, ring_model

    ranks = sorted(record["ranks"], key=lambda r: r["rank"])
    trace = ring_model([panels.flatten(r["before"]["tensor"]) for r in ranks])
    n, steps = trace.world_size, trace.steps
    measured = np.asarray(record["ring_states"], dtype=np.float64)
    measured = measured.reshape(len(steps), n, n, -1) if measured.size else trace.values
    fig, ax = canvas()
    title(fig, f"ring all_reduce by hand · {n} ranks · {len(steps) - 1} steps")
    left, top, bottom, gap = 74, 78, HEIGHT_PX - 40, 12
    cell = min((WIDTH_PX - 12 - left - (n - 1) * gap) / (n * n), 48.0)
    pitch = min((bottom - top) / len(steps), 48.0)
    for r in range(n):
        ax.text(left + r * (n * cell + gap) + n * cell / 2, top - 14, f"rank {r}",
                fontsize=MIN_FONT, fontweight="bold", ha="center", va="center")
    for i, step in enumerate(steps):
        y = top + i * pitch
        ax.text(left - 10, y + pitch / 2, step.short, fontsize=MIN_FONT, ha="right",
                va="center", color="#333333")
        for r in range(n):
            for c in range(n):
                x = left + r * (n * cell + gap) + c * cell
                wrong = not np.allclose(measured[i, r, c], trace.values[i, r, c], rtol=1e-5)
                face = "white" if wrong else chunk_face(int(trace.counts[i, r, c]), n)
                received = bool(step.recv) and step.recv[r] == c
                edge, lw = (BAD, 2.6) if wrong else ("#111111", 2.2) if received else (
                    "#8a8a8a", 0.7)
                text = chunk_text(measured[i, r, c])
                ax.add_patch(Rectangle((x + 1.5, y + 1.5), cell - 3, pitch - 3, facecolor=face,
                                       edgecolor=edge, lw=lw, gid=f"step{i}:rank{r}:chunk{c}"))
                if len(text) * CHAR_PX < cell - 2:
                    ax.text(x + cell / 2, y + pitch / 2, text, fontsize=MIN_FONT, ha="center",
                            va="center", color=panels.text_color_for(face))
    legend(ax, [(OWN_FACE, "own"), (chunk_face(2, n), "partial sum"),
                (FULL_FACE, "all ranks")], HEIGHT_PX - 20)
    return fig


# --------------------------------------------------------------------------- 12
def _short(dtype: str) -> str:
    return {"bfloat16": "bf16", "bool": "bool"}.get(dtype, dtype.replace("float", "f")
                                                     .replace("uint", "u").replace("int", "i"))


def support_cells(survey: Mapping[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(op, dtype) → the statuses the reducing collectives got for it."""
    out: dict[tuple[str, str], set[str]] = {}
    reducing = set(survey.get("reducing", ()))
    for case in survey["cases"]:
        if case["collective"] in reducing and case.get("op"):
            out.setdefault((case["op"], case["dtype"]), set()).add(case["status"])
    return out


SUPPORT_FACES = {"accepted": OK, "refused": BAD, "WRONG": "#7a271a", "differs": WARN}


def support_face(statuses: set[str]) -> str:
    if statuses == {"ok"}:
        return "accepted"
    if statuses == {"refused"}:
        return "refused"
    return "WRONG" if "wrong" in statuses else "differs"


def support_figure(survey: Mapping[str, Any]) -> Any:
    """12: the probe table: one cell per (op, dtype), the reducing collectives' answer."""
    grid = support_cells(survey)
    ops = [op for op in survey.get("ops", []) if any(k[0] == op for k in grid)]
    dtypes = [d for d in survey.get("dtypes", []) if any(k[1] == d for k in grid)]
    fig, ax = canvas()
    title(fig, f"{survey.get('backend', '?')} · reduce op × dtype, probed")
    left, top = 126, 80
    cell_w = (WIDTH_PX - 12 - left) / max(len(dtypes), 1)
    pitch = (HEIGHT_PX - 40 - top) / max(len(ops), 1)
    for j, dtype in enumerate(dtypes):
        ax.text(left + (j + 0.5) * cell_w, top - 14, _short(dtype), fontsize=MIN_FONT,
                ha="center", va="center", color="#333333")
    seen = []
    for i, op in enumerate(ops):
        ax.text(left - 10, top + (i + 0.5) * pitch, op, fontsize=MIN_FONT, ha="right",
                va="center")
        for j, dtype in enumerate(dtypes):
            if (op, dtype) not in grid:
                continue
            kind = support_face(grid[(op, dtype)])
            seen.append(kind)
            ax.add_patch(Rectangle((left + j * cell_w + 1.5, top + i * pitch + 1.5),
                                   cell_w - 3, pitch - 3, facecolor=SUPPORT_FACES[kind],
                                   edgecolor="white", gid=f"{op}:{dtype}={kind}"))
    legend(ax, [(face, kind) for kind, face in SUPPORT_FACES.items() if kind in seen],
           HEIGHT_PX - 20)
    return fig
