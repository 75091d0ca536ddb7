"""How a figure reads on the page at 1280 px: its smallest text in displayed px, the labels
that spill out of the shape they sit on, the legends drawn over data.

A notebook shows a Figure as IPython's inline backend prints it (a PNG, bbox_inches="tight",
at the figure's dpi); the page shows that PNG at its own width up to the column, so a wider
figure is scaled down by COLUMN_PX / its width. `audit(fig)` measures what the reader gets:
- min_text_px: every text drawn (tick labels and legends included) at fontsize pt ×
  dpi / 72 × the displayed scale; the smallest;
- spills: a text whose anchor lies (2 px) inside a drawn Rectangle, Circle/Ellipse or boxed patch
  (the smallest one holding it) whose extent leaves that patch (1 px of slack);
- legend_over_data: a legend whose box meets a line, a bar or patch, a collection or an
  image of the axes it describes (all axes for a figure legend), where that data is drawn.

`install()` makes every Figure a notebook displays carry its audit in the PNG output's
metadata ({"figure-audit": {...}}); the PNG itself is what the inline backend makes.
"""
from __future__ import annotations

import base64
import struct
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.collections import Collection, LineCollection, PathCollection
from matplotlib.figure import Figure
from matplotlib.patches import Ellipse, FancyBboxPatch, Patch, Rectangle
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from helpers.figures.column import COLUMN_PX

MIN_TEXT_PX = 9.0           # the floor: the smallest text a figure may show
SLACK_PX = 1.0              # anti-aliasing: a text may touch its shape's edge
METADATA_KEY = "figure-audit"


@dataclass
class FigureAudit:
    """What one figure shows the reader; `problems()` lists what breaks the rules."""

    png_width_px: int
    scale: float                        # displayed px per PNG px
    min_text_px: float
    smallest_text: str
    spills: list[str] = field(default_factory=list)
    legend_over_data: list[str] = field(default_factory=list)

    def problems(self, min_text_px: float = MIN_TEXT_PX) -> list[str]:
        """Each rule the figure breaks, in words (empty when it reads well)."""
        found = []
        if self.min_text_px < min_text_px:
            found.append(f"smallest text {self.min_text_px:.1f} px < {min_text_px} px "
                         f"({self.smallest_text!r}; PNG {self.png_width_px} px wide, "
                         f"shown at {self.scale:.2f})")
        found += [f"spills out of its shape: {s}" for s in self.spills]
        found += [f"legend over data: {s}" for s in self.legend_over_data]
        return found

    def as_metadata(self) -> dict[str, Any]:
        """The audit as JSON-able output metadata."""
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(self).items()}


class _Recorder(RendererAgg):
    """Agg that also notes every text it draws: (size in points, string, the Text or None)."""

    def __init__(self, width: float, height: float, dpi: float):
        super().__init__(width, height, dpi)
        self.drawn: list[tuple[float, str, Text | None]] = []

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if s.strip():
            self.drawn.append((prop.get_size_in_points(), s, mtext))
        super().draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)


def png_width(png: bytes | str) -> int:
    """The width in pixels of a PNG (bytes, or base64 text as IPython's formatter gives)."""
    data = base64.b64decode(png[:64]) if isinstance(png, str) else png
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return struct.unpack(">I", data[16:20])[0]


def _drawn_texts(fig: Figure, recorder: _Recorder) -> list[Text]:
    """The Text artists drawn: one-line ones name themselves; a multi-line one is found by
    its lines, all drawn."""
    texts = [t for _, _, t in recorder.drawn if t is not None]
    lines = {s for _, s, _ in recorder.drawn}
    texts += [t for t in fig.findobj(Text) if t.get_visible() and "\n" in t.get_text()
              and all(line in lines for line in t.get_text().split("\n") if line.strip())]
    return list(dict.fromkeys(texts))


def _shows(patch: Patch) -> bool:
    """A patch that is drawn and can be seen: a fill or an edge."""
    if not patch.get_visible() or (patch.axes is not None and not patch.axes.get_visible()):
        return False
    face, edge = patch.get_facecolor(), patch.get_edgecolor()
    return (patch.get_fill() and face[3] > 0) or (patch.get_linewidth() > 0 and edge[3] > 0)


def _shapes(fig: Figure) -> list[Patch]:
    """The patches a label can sit on: not an Axes' or the figure's background, not a
    legend's parts, not a text's box."""
    skip = {id(fig.patch)} | {id(ax.patch) for ax in fig.axes}
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes)]:
        if legend is not None:
            skip |= {id(a) for a in legend.findobj()}
    for text in fig.findobj(Text):
        if text.get_bbox_patch() is not None:
            skip.add(id(text.get_bbox_patch()))
    return [p for p in fig.findobj(lambda a: isinstance(a, (Rectangle, Ellipse, FancyBboxPatch)))
            if id(p) not in skip and _shows(p)]


def _spill(text: Text, shapes: list[Patch], extents: np.ndarray, renderer) -> str | None:
    """Where `text` leaves the smallest shape its anchor lies in, or None. `extents`: the
    shapes' window extents, one row (x0, y0, x1, y1) each."""
    box = text.get_window_extent(renderer)
    anchor = ({"left": box.x0, "right": box.x1}.get(text.get_horizontalalignment(),
                                                    (box.x0 + box.x1) / 2),
              {"top": box.y1, "center": (box.y0 + box.y1) / 2,
               "center_baseline": (box.y0 + box.y1) / 2}.get(
                  text.get_verticalalignment(), box.y0))
    # on a shape: the anchor 2 px inside its extent (a value on top of a bar, anchored on
    # its edge, is beside it)
    edge = 2 * SLACK_PX
    near = np.flatnonzero((extents[:, 0] + edge < anchor[0]) & (anchor[0] < extents[:, 2] - edge)
                          & (extents[:, 1] + edge < anchor[1]) & (anchor[1] < extents[:, 3] - edge))
    holding = [k for k in near if shapes[k].contains_point(anchor)]
    if not holding:
        return None
    areas = (extents[:, 2] - extents[:, 0]) * (extents[:, 3] - extents[:, 1])
    k = min(holding, key=lambda k: areas[k])
    shape = shapes[k]
    inner = Bbox.from_extents(box.x0 + SLACK_PX, box.y0 + SLACK_PX,
                              box.x1 - SLACK_PX, box.y1 - SLACK_PX)
    if isinstance(shape, Ellipse):
        path = shape.get_path().transformed(shape.get_transform())
        inside = path.contains_points(inner.corners()).all()
    else:
        x0, y0, x1, y1 = extents[k]
        inside = inner.x0 >= x0 and inner.x1 <= x1 and inner.y0 >= y0 and inner.y1 <= y1
    if inside:
        return None
    return f"{text.get_text()!r} leaves its {type(shape).__name__}"


def _meets(artist, box: Bbox, renderer) -> bool:
    """Whether a data artist is drawn somewhere inside `box` (display coordinates)."""
    if not artist.get_visible():
        return False
    if artist.get_clip_on() and artist.get_clip_box() is not None:
        box = Bbox.intersection(box, artist.get_clip_box())
        if box is None:
            return False
    if hasattr(artist, "get_xydata"):                         # a Line2D
        path = artist.get_transform().transform_path(artist.get_path())
        marker = artist.get_marker() not in (None, "", "None", " ", "none")
        line = artist.get_linestyle() not in ("None", "", " ", "none")
        return bool((line and path.intersects_bbox(box, filled=False))
                    or (marker and box.count_contains(path.vertices) > 0))
    if isinstance(artist, Patch):
        path = artist.get_transform().transform_path(artist.get_path())
        return bool(path.intersects_bbox(box, filled=artist.get_fill()))
    if isinstance(artist, PathCollection):                     # scatter: its points
        points = artist.get_offset_transform().transform(artist.get_offsets())
        return bool(box.count_contains(points) > 0)
    if isinstance(artist, Collection):                         # fills, segments
        transform, filled = artist.get_transform(), not isinstance(artist, LineCollection)
        return any(transform.transform_path(p).intersects_bbox(box, filled=filled)
                   for p in artist.get_paths())
    return artist.get_window_extent(renderer).overlaps(box)   # an image


def _legend_over_data(fig: Figure, renderer) -> list[str]:
    found = []
    legends = [(leg, [leg.axes]) for leg in (ax.get_legend() for ax in fig.axes) if leg]
    legends += [(leg, fig.axes) for leg in fig.legends]
    for legend, axes in legends:
        if not legend.get_visible():
            continue
        frame = legend.get_window_extent(renderer)
        box = Bbox.from_extents(frame.x0 + SLACK_PX, frame.y0 + SLACK_PX,
                                frame.x1 - SLACK_PX, frame.y1 - SLACK_PX)
        mine = {id(a) for a in legend.findobj()}
        for ax in axes:
            if not ax.get_visible():
                continue
            data = [*ax.lines, *ax.collections, *ax.images,
                    *(p for p in ax.patches if _shows(p))]
            hits = [a for a in data if id(a) not in mine and _meets(a, box, renderer)]
            if hits:
                labels = [t.get_text() for t in legend.get_texts()][:3]
                found.append(f"legend {labels} over {len(hits)} artists "
                             f"({type(hits[0]).__name__} first)")
    return found


def audit(fig: Figure, column_px: float | None = None, png: bytes | str | None = None,
          dpi: float | None = None) -> FigureAudit:
    """The figure as the page shows it: `png` is what the notebook displays (default: what
    IPython's inline backend prints, bbox_inches="tight"), printed at `dpi` (default the
    figure's); `column_px` the column it is shown in (default COLUMN_PX)."""
    column_px = COLUMN_PX if column_px is None else column_px
    dpi = fig.dpi if dpi is None else dpi
    if png is None:
        from IPython.core.pylabtools import print_figure

        png = print_figure(fig, "png", bbox_inches="tight", dpi=dpi)
    width = png_width(png)
    scale = min(1.0, column_px / width)
    return audit_at(fig, scale * dpi / fig.dpi, png_width_px=width, scale=scale)


def audit_at(fig: Figure, shown_per_px: float, png_width_px: int = 0,
             scale: float = 1.0) -> FigureAudit:
    """The audit of a figure whose pixels at its own dpi are shown `shown_per_px` CSS px
    each (an animation's frames: helpers.figures.animation)."""
    width, height = fig.get_size_inches() * fig.dpi
    recorder = _Recorder(width, height, fig.dpi)
    fig.draw(recorder)
    px_per_pt = fig.dpi / 72 * shown_per_px
    size, smallest = min(((pt, s) for pt, s, _ in recorder.drawn), default=(float("inf"), ""))
    shapes = _shapes(fig)
    extents = np.array([p.get_window_extent(recorder).extents for p in shapes]).reshape(-1, 4)
    spills = [s for t in _drawn_texts(fig, recorder)
              if (s := _spill(t, shapes, extents, recorder)) is not None]
    return FigureAudit(png_width_px=png_width_px, scale=scale, min_text_px=size * px_per_pt,
                       smallest_text=smallest[:60], spills=spills,
                       legend_over_data=_legend_over_data(fig, recorder))


def install(shell=None) -> bool:
    """In an IPython kernel with the inline backend: every Figure displayed as PNG carries
    its audit in the output's metadata. The PNG is made by the formatter the inline backend
    registered (so its bytes are unchanged). False where there is no such kernel (an
    engine, a script); True once installed, however often it is called."""
    import sys

    if shell is None:
        if "IPython" not in sys.modules:          # no IPython, no kernel: not imported here
            return False
        shell = sys.modules["IPython"].get_ipython()
    import matplotlib

    backend = matplotlib.get_backend(auto_select=False) or ""
    if shell is None or "inline" not in backend:
        return False
    # Its import registers the inline formatter (the kernel's first figure would do it, and
    # replace ours): imported first, ours wraps it.
    from matplotlib_inline.backend_inline import configure_inline_support

    formatter = shell.display_formatter.formatters["image/png"]
    try:
        inline = formatter.lookup_by_type(Figure)
    except KeyError:               # imported before this kernel was there (a fork server)
        configure_inline_support(shell, backend)
        inline = formatter.lookup_by_type(Figure)
    if getattr(inline, "audited", False):
        return True

    def audited(fig: Figure):
        png = inline(fig)
        if png is None:            # IPython prints no figure without Axes
            return None
        dpi = getattr(inline, "keywords", {}).get("dpi")
        return png, {METADATA_KEY: audit(fig, png=png, dpi=dpi).as_metadata()}

    audited.audited = True
    formatter.for_type(Figure, audited)
    return True
