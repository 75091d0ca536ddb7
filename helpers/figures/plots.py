"""Per-rank before/after figures for one collective call.

`plot_record(record)` draws one panel per rank.  Each panel lists the rank's
arguments (torch parameter names, one row per list element) with the values
*before* the call on the left and *after* it on the right.  Cells are coloured
by value across the whole record, so a piece of data keeps its colour wherever
it travels and a reduced result gets a colour of its own.

What each panel shows is computed in helpers.figures.panels.

The module never selects a matplotlib backend; figures are created through
pyplot and closed again, so a notebook shows the returned figure exactly once.
"""
from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers.figures.audit import COLUMN_PX
from helpers.figures.panels import (MAX_CELLS, MUTED, ROOT_COLOR, ROOT_FACE, UNDEFINED_EDGE,
                                    UNDEFINED_FACE, ArgRow, Panel, Side, ValueColors, build_panels,
                                    call_signature, record_colors, text_color_for)


DPI = 100
MIN_UNIT = 0.28     # inches per cell: the smallest text (fs_label × 0.9) reads 9.3 px
CAPTION_PT = 8.0


def _clip(cells: list[str]) -> list[str]:
    if len(cells) <= MAX_CELLS:
        return cells
    half = (MAX_CELLS - 1) // 2
    return cells[:half] + ["…"] + cells[-half:]


@dataclass
class _Geometry:
    label_w: float
    cell_w: float
    n_before: int
    n_after: int
    gap: float
    note_w: float
    pitch: float = 1.32
    header: float = 1.25
    group_gap: float = 0.3
    stacked: bool = False       # "after" under "before": a row too long to sit beside it

    @property
    def before_x(self) -> float:
        return self.label_w

    @property
    def after_x(self) -> float:
        return self.label_w + (0 if self.stacked else self.n_before * self.cell_w + self.gap)

    @property
    def width(self) -> float:
        cells = max(self.n_before, self.n_after) if self.stacked else self.n_after
        return self.after_x + cells * self.cell_w + self.note_w + 0.3

    def row_pitch(self, row: ArgRow) -> float:
        return self.pitch * (0.75 if row.plain is not None else 1.0)

    def height(self, panel: Panel) -> float:
        groups = sum(1 for r in panel.rows if r.group_start)
        block = (self.header + sum(self.row_pitch(r) for r in panel.rows)
                 + max(groups - 1, 0) * self.group_gap)
        return block * (2 if self.stacked else 1) + 0.35


def _geometry(panels: Sequence[Panel], stacked: bool = False) -> _Geometry:
    rows = [r for p in panels for r in p.rows]
    longest_label = max((len(r.label) for r in rows), default=6)
    texts = [t for r in rows for s in (r.before, r.after) if s.cells for t in s.cells]
    longest_value = max((len(t) for t in texts), default=1)
    n_before = max([len(_clip(r.before.cells)) for r in rows if r.before.cells] + [2])
    n_after = max([len(_clip(r.after.cells)) for r in rows if r.after.cells] + [2])
    any_undefined = any(r.after.undefined for r in rows)
    return _Geometry(
        label_w=0.235 * longest_label + 0.6,
        cell_w=max(1.0, 0.17 * longest_value + 0.35),
        n_before=n_before, n_after=n_after, gap=1.3,
        note_w=2.3 if any_undefined else 0.0, stacked=stacked)


def _draw_cells(ax, x0: float, y: float, side: Side, geo: _Geometry, colors: ValueColors,
                fs: float, tag: str) -> None:
    for i, text in enumerate(_clip(side.cells or [])):
        x = x0 + i * geo.cell_w
        if side.undefined:
            face, edge, tcolor, hatch = UNDEFINED_FACE, UNDEFINED_EDGE, "#6b6b6b", "////"
        elif text == "…":
            face, edge, tcolor, hatch = "white", "#bbbbbb", MUTED, None
        else:
            face = colors(text)
            edge, tcolor, hatch = "#3a3a3a", text_color_for(face), None
        rect = Rectangle((x, y), geo.cell_w, 1.0, facecolor=face, edgecolor=edge,
                         linewidth=0.8, hatch=hatch, gid=f"{tag}[{i}]={text}")
        ax.add_patch(rect)
        ax.text(x + geo.cell_w / 2, y + 0.5, text, ha="center", va="center", fontsize=fs,
                color=tcolor, gid=f"value:{tag}[{i}]",
                bbox=dict(boxstyle="square,pad=0.05", fc=UNDEFINED_FACE, ec="none")
                if side.undefined else None)


def _draw_panel(ax, panel: Panel, geo: _Geometry, colors: ValueColors, scale: float,
                height: float) -> None:
    fs_cell, fs_label = 9.5 * scale, 9 * scale
    ax.set_xlim(0, geo.width)
    ax.set_ylim(height, 0)                      # y grows downwards: rows read top to bottom
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_gid(f"rank{panel.rank}")
    frame, face, lw = (ROOT_COLOR, ROOT_FACE, 2.4) if panel.is_root else ("#b5b5b5", "white", 1.0)
    ax.set_facecolor(face)
    for spine in ax.spines.values():
        spine.set_edgecolor(frame)
        spine.set_linewidth(lw)
    title = f"rank {panel.rank}" + (f" · {panel.device}" if panel.device else "")
    if panel.is_root:
        title += f" · {panel.role}"
    ax.set_title(title, fontsize=11.5 * scale, fontweight="bold",
                 color=ROOT_COLOR if panel.is_root else "#222222", pad=4 * scale)

    y = 0.0
    for shown in ((("before", "after"),) if not geo.stacked else (("before",), ("after",))):
        y = _draw_rows(ax, panel, geo, colors, fs_cell, fs_label, y, shown)


def _draw_rows(ax, panel: Panel, geo: _Geometry, colors: ValueColors, fs_cell: float,
               fs_label: float, y: float, shown: tuple[str, ...]) -> float:
    """The headers of the sides `shown` and every row's cells of those sides, from `y`
    down; returns the y below them. Beside each other, an arrow joins before and after."""
    both = len(shown) == 2
    hy = y + geo.header / 2 + 0.05
    ends = {"before": geo.before_x + geo.n_before * geo.cell_w / 2,
            "after": geo.after_x + geo.n_after * geo.cell_w / 2}
    for name in shown:
        ax.text(ends[name], hy, name, ha="center", va="center", fontsize=fs_label,
                color="#444444", fontstyle="italic")
    mid = geo.before_x + geo.n_before * geo.cell_w + geo.gap / 2
    if both:
        ax.text(mid, hy, "→", ha="center", va="center", fontsize=fs_label * 1.3,
                color="#444444")

    y += geo.header
    for idx, row in enumerate(panel.rows):
        if row.group_start and idx > 0:
            y += geo.group_gap
        cy = y + 0.5
        ax.text(geo.label_w - 0.25, cy, row.label, ha="right", va="center", fontsize=fs_label,
                family="monospace", color=MUTED if row.not_passed else "#222222")
        sides = {"before": (geo.before_x, row.before), "after": (geo.after_x, row.after)}
        if row.plain is not None:
            for name, text in zip(("before", "after"), row.plain):
                if name in shown:
                    ax.text(sides[name][0] + 0.1, cy, text, ha="left", va="center",
                            fontsize=fs_label, family="monospace", color="#444444")
            y += geo.row_pitch(row)
            continue
        if row.not_passed:
            ax.text(geo.before_x + 0.1, cy, "not passed (None)", ha="left", va="center",
                    fontsize=fs_label * 0.95, color="#a0a0a0", fontstyle="italic")
            y += geo.pitch
            continue
        for name in shown:
            x0, side = sides[name]
            if side.cells is None:
                ax.text(x0 + 0.1, cy, "None", ha="left", va="center", fontsize=fs_label * 0.95,
                        color="#a0a0a0", fontstyle="italic")
            else:
                _draw_cells(ax, x0, y, side, geo, colors, fs_cell, f"{name}:{row.label}")
        if both and row.before.cells is not None and row.after.cells is not None:
            ax.text(mid, cy, "→", ha="center", va="center", fontsize=fs_label * 1.1,
                    color="#9a9a9a")
        if row.after.undefined and "after" in shown:
            end = geo.after_x + len(_clip(row.after.cells or [])) * geo.cell_w
            ax.text(end + 0.2, cy, "undefined", ha="left", va="center", fontsize=fs_label * 0.9,
                    color="#6b6b6b", fontstyle="italic")
        y += geo.pitch
    return y


def _read_png(png: bytes):
    import matplotlib.image as mimage
    return mimage.imread(io.BytesIO(png), format="png")


def plot_record(record: Mapping[str, Any], diagram: Any = None,
                diagram_caption: str | None = None, *, title: str | None = None,
                max_width_in: float = COLUMN_PX / DPI) -> Figure:
    """One panel per rank with its arguments before → after the call.

    `diagram` (PNG bytes, or a helpers.figures.diagrams.Diagram) is drawn above the panels
    with `diagram_caption` (default: the Diagram's caption) beside it. The figure is at most
    `max_width_in` wide (the page's column), so the page shows it unscaled: panels wrap onto
    more rows rather than shrink below MIN_UNIT. Rank Axes carry gid "rank<r>", the diagram
    Axes gid "diagram".
    """
    import matplotlib.pyplot as plt

    if diagram is not None and hasattr(diagram, "png"):     # a helpers.figures.diagrams.Diagram
        if diagram_caption is None:
            diagram_caption = diagram.caption
        diagram = diagram.png
    if not record.get("ranks"):
        raise ValueError("record has no 'ranks' to draw")
    collective = record["collective"]
    params = record.get("params") or {}
    panels = build_panels(record)
    colors = record_colors(panels)
    geo = _geometry(panels)
    n = len(panels)

    unit = 0.34                                   # inches per cell at full scale
    margin, hgap, title_h, ptitle = 0.3, 0.35, 0.95, 0.38
    image = _read_png(diagram) if diagram is not None else None

    def width_for(cols: int, u: float) -> float:
        return 2 * margin + cols * geo.width * u + (cols - 1) * hgap

    def unit_to_fit(cols: int) -> float:
        fixed = width_for(cols, 0)
        return min(unit, (max_width_in - fixed) / (width_for(cols, 1) - fixed))

    if unit_to_fit(1) < MIN_UNIT:       # before beside after is too wide even alone
        geo = _geometry(panels, stacked=True)
    # Up to 4 panels a row; fewer where the cells' text would read below 9 px.
    ncols = math.ceil(n / math.ceil(n / 4))
    while ncols > 1 and unit_to_fit(ncols) < MIN_UNIT:
        ncols -= 1
    nrows = math.ceil(n / ncols)
    ncols = math.ceil(n / nrows)
    unit = max(MIN_UNIT, unit_to_fit(ncols))
    scale = unit / 0.34

    grid_rows = [panels[i * ncols:(i + 1) * ncols] for i in range(nrows)]
    row_heights = [max(geo.height(p) for p in grow) for grow in grid_rows]
    panels_h = sum(h * unit + ptitle * scale for h in row_heights) + (nrows - 1) * 0.3

    heading = title or (f"{call_signature(collective, params)} · {record.get('backend', '?')}"
                        f" · world size {record.get('world_size', n)}")
    legend = "cells coloured by value: the same colour is the same data on every rank"
    if record.get("dtype"):
        legend = f"dtype {record['dtype']} · " + legend
    if any(r.after.undefined for p in panels for r in p.rows):
        legend += "\ngrey hatched: undefined after the call (the value shown is what this run left there)"
        title_h += 0.2
    legend_w = max(0.075 * len(x) for x in legend.splitlines()) + 2 * margin
    fig_w = max(width_for(ncols, unit), min(max_width_in, legend_w))
    # the heading on one line, in 15 pt where it fits, down to 10 pt
    heading_pt = max(10.0, min(15.0, 15 * (fig_w - 2 * margin) / (0.14 * len(heading))))

    # the diagram above the panels, its caption beside it (below where too narrow)
    diag_w = diag_h = block_h = 0.0
    caption_lines: list[str] = []
    beside = False
    if image is not None:
        diag_w = min(5.2, max(3.6, 0.007 * image.shape[1]), fig_w - 2 * margin)
        diag_h = diag_w * image.shape[0] / image.shape[1]
        caption_w = fig_w - 2 * margin - diag_w - 0.3
        beside = caption_w >= 2.2
        caption_w = caption_w if beside else diag_w
        for para in (diagram_caption or "").splitlines():
            chars = int(caption_w * 72 / (CAPTION_PT * 0.52))
            caption_lines += textwrap.wrap(para, width=chars) or [""]
        caption_h = 0.17 * len(caption_lines) + (0.1 if caption_lines else 0)
        block_h = max(diag_h, caption_h) if beside else diag_h + caption_h
        block_h += 0.3
    fig_h = title_h + block_h + panels_h + ptitle + margin
    fig = plt.figure(figsize=(fig_w, fig_h), dpi=DPI)
    fig.patch.set_facecolor("white")

    def box(x: float, top: float, w: float, h: float) -> list[float]:
        return [x / fig_w, 1 - (top + h) / fig_h, w / fig_w, h / fig_h]

    fig.text(margin / fig_w, 1 - 0.32 / fig_h, heading, fontsize=heading_pt, fontweight="bold",
             ha="left", va="center")
    fig.text(margin / fig_w, 1 - 0.56 / fig_h, legend, fontsize=9.5, color="#555555",
             ha="left", va="top", linespacing=1.4)

    if image is not None:
        dax = fig.add_axes(box(margin, title_h, diag_w, diag_h))
        dax.imshow(image, interpolation="antialiased")
        dax.set_axis_off()
        dax.set_gid("diagram")
        if caption_lines:
            x, y, va = (1 + 0.3 / diag_w, 0.5, "center") if beside else (0, -0.04, "top")
            dax.text(x, y, "\n".join(caption_lines), transform=dax.transAxes, ha="left",
                     va=va, fontsize=CAPTION_PT, color="#555555", linespacing=1.25)

    x_start = margin
    top = title_h + block_h
    for grow, h in zip(grid_rows, row_heights):
        top += ptitle * scale
        for j, panel in enumerate(grow):
            x = x_start + j * (geo.width * unit + hgap)
            ax = fig.add_axes(box(x, top, geo.width * unit, h * unit))
            _draw_panel(ax, panel, geo, colors, scale, h)
        top += h * unit + 0.3
    plt.close(fig)
    return fig
