"""Our drawings of the schemes of 14–16 (groups and meshes, data parallelism, ZeRO): the
picture each page shows where the collective pages show the upstream diagram.

No upstream diagram with a compatible licence exists for these schemes, so they are drawn
here, from the notebook's own parameters (world size, batch, mesh shape): at 2 ranks the
drawing has 2 ranks. Every rank has one colour on every drawing (`rank_colour`). The
artists that carry a fact have a gid (e.g. "shard:2"), so the tests read the drawing.
17 and 18: `helpers.training.schemes_split`; 19: `helpers.training.two_d.plot_mesh`.
"""
from __future__ import annotations

from typing import Any, Sequence

import matplotlib
import matplotlib.colors as mcolors
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

from helpers.training.mesh import coordinate, mesh_shape

INK, MUTED, LINE = "#222222", "#666666", "#9a9a9a"
GROUP = "#c2410c"            # a group's outline (the series' root colour)
ROW, COLUMN = "#b91c1c", "#15803d"     # tp groups (mesh rows), dp groups (mesh columns)
FONT, SMALL, TITLE = 10.5, 9.5, 12.5
MAX_WIDTH_IN = 8.0


def rank_colour(rank: int, light: bool = False) -> str:
    """Rank r's colour on every drawing of 14–19: tab10 without its grey, cycled; `light`
    mixes it with white (the fill of a rank's boxes; the strong one outlines)."""
    tab10 = [c for i, c in enumerate(matplotlib.colormaps["tab10"].colors) if i != 7]
    colour = tab10[rank % len(tab10)]
    if light:
        colour = tuple(0.55 * x + 0.45 for x in colour)
    return mcolors.to_hex(colour)


class Canvas:
    """A figure whose one axes counts in drawing units, y downwards, titled at the top."""

    def __init__(self, width: float, height: float, title: str, subtitle: str = "",
                 unit: float = 0.45):
        import matplotlib.pyplot as plt

        self.unit = min(unit, MAX_WIDTH_IN / width)
        head = 0.75 if subtitle else 0.5                 # inches above the drawing
        fig_h = height * self.unit + head
        self.fig = plt.figure(figsize=(width * self.unit, fig_h), dpi=100)
        self.ax = self.fig.add_axes([0, 0, 1, height * self.unit / fig_h])
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(height, 0)
        self.ax.set_axis_off()
        self.fig.text(0.01, 1 - 0.25 / fig_h, title, fontsize=TITLE, fontweight="bold",
                      va="center")
        if subtitle:
            self.fig.text(0.01, 1 - 0.55 / fig_h, subtitle, fontsize=SMALL, color=MUTED,
                          va="center")
        plt.close(self.fig)   # shown once: as the value of the notebook cell that draws it

    def box(self, x: float, y: float, w: float, h: float, text: str = "", face: str = "white",
            edge: str = LINE, gid: str | None = None, lw: float = 1.0, size: float = FONT,
            bold: bool = False, **kw: Any) -> Any:
        patch = FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=0.12",
                               facecolor=face, edgecolor=edge, linewidth=lw, gid=gid, **kw)
        self.ax.add_patch(patch)
        if text:
            self.text(x + w / 2, y + h / 2, text, size=size, bold=bold)
        return patch

    def text(self, x: float, y: float, text: str, size: float = FONT, colour: str = INK,
             ha: str = "center", bold: bool = False, italic: bool = False, **kw: Any) -> Any:
        return self.ax.text(x, y, text, ha=ha, va="center", fontsize=size, color=colour,
                            fontweight="bold" if bold else "normal",
                            fontstyle="italic" if italic else "normal", **kw)

    def arrow(self, p: tuple[float, float], q: tuple[float, float], colour: str = "#555555",
              dashed: bool = False, gid: str | None = None, lw: float = 1.4,
              both: bool = False) -> Any:
        style = "<|-|>" if both else "-|>"
        patch = FancyArrowPatch(p, q, arrowstyle=f"{style},head_length=5,head_width=2.6",
                                color=colour, linewidth=lw, shrinkA=0, shrinkB=0, zorder=3,
                                linestyle=(0, (4, 3)) if dashed else "-", gid=gid)
        self.ax.add_patch(patch)
        return patch

    def node(self, x: float, y: float, r: float, text: str, gid: str | None = None) -> Any:
        patch = Circle((x, y), r, facecolor="white", edgecolor=INK, linewidth=1.5, zorder=4,
                       gid=gid)
        self.ax.add_patch(patch)
        self.text(x, y, text, size=SMALL, bold=True, zorder=5)
        return patch


# ------------------------------------------------------------------ 14: groups and meshes
def draw_groups(world_size: int) -> Figure:
    """Notebook 14's three ways of grouping the ranks: `new_group` of the even ranks (with
    each rank's group rank), `new_subgroups(cols)`, and the rows × cols device mesh whose rows
    are the tp groups and columns the dp groups (`mesh_shape(world_size)`). The first two
    beside the mesh where that fits the column at full size (4 ranks), above it otherwise."""
    if world_size < 2:
        raise ValueError(f"process groups need 2+ ranks, got {world_size}")
    rows, cols = mesh_shape(world_size)
    pitch, bw, bh = 1.55, 1.25, 0.8
    grid_pitch_x, grid_pitch_y = 2.3, 1.25
    lines_w = max(0.4 + world_size * pitch, 7.3)           # the two lines of ranks
    mesh_w = 0.4 + (cols - 1) * grid_pitch_x + 1.7 + 0.35 + 4.6
    lines_h, mesh_h = 5.95, 1.35 + rows * grid_pitch_y + 0.3
    beside = lines_w + 0.4 + mesh_w <= MAX_WIDTH_IN / 0.45 + 1e-9
    if beside:
        width, height = lines_w + 0.4 + mesh_w, max(lines_h, mesh_h)
        mesh_x, mesh_y = lines_w + 0.4, 0.0
    else:
        width, height = max(lines_w, mesh_w, 13.2) + 0.3, lines_h + 0.45 + mesh_h
        mesh_x, mesh_y = 0.0, lines_h + 0.45
    c = Canvas(width, height, f"{world_size} ranks, grouped three ways",
               f"mesh {rows} × {cols}: the most square shape whose sides multiply to "
               f"{world_size}")

    def line_of_ranks(y: float, tag: str) -> None:
        for r in range(world_size):
            c.box(0.4 + r * pitch, y, bw, bh, f"rank {r}", face=rank_colour(r, True),
                  edge=rank_colour(r), gid=f"{tag}:rank:{r}")

    evens = [r for r in range(world_size) if r % 2 == 0]
    c.text(0.3, 0.45, "dist.new_group(evens):\nevery rank calls it; the members renumber",
           ha="left", italic=True)
    line_of_ranks(1.2, "evens")
    for r in range(world_size):
        x = 0.4 + r * pitch
        if r in evens:
            c.box(x - 0.1, 1.1, bw + 0.2, bh + 0.2, edge=GROUP, lw=2.4, face="none",
                  gid=f"group:evens:{r}")
        c.text(x + bw / 2, 2.6, f"group\nrank {r // 2}" if r in evens else "−1\n(outside)",
               size=SMALL, colour=GROUP if r in evens else MUTED)

    top2 = 4.35
    c.text(0.3, top2 - 0.65, f"dist.new_subgroups(group_size={cols}):\nconsecutive groups",
           ha="left", italic=True)
    line_of_ranks(top2, "sub")
    for g in range(rows):
        x0 = 0.4 + g * cols * pitch
        c.box(x0 - 0.12, top2 - 0.12, (cols - 1) * pitch + bw + 0.24, bh + 0.24, face="none",
              edge=GROUP, lw=2.0, gid=f"subgroup:{g}")
        c.text(x0 + ((cols - 1) * pitch + bw) / 2, top2 + bh + 0.45,
               f"group {g}: ranks {list(range(g * cols, (g + 1) * cols))}", size=SMALL,
               colour=GROUP)

    grid_x = mesh_x + 0.4
    c.text(mesh_x + 0.3, mesh_y + 0.45, f"init_device_mesh(({rows}, {cols})):\nrank r at "
           f"(r // {cols}, r % {cols})", ha="left", italic=True)
    y0 = mesh_y + 1.35
    for r in range(world_size):
        row, col = coordinate(r, (rows, cols))
        c.box(grid_x + col * grid_pitch_x, y0 + row * grid_pitch_y, 1.7, 0.85,
              f"rank {r}\n({row}, {col})", face=rank_colour(r, True), edge=rank_colour(r),
              gid=f"mesh:rank:{r}", size=SMALL)
    span_w = (cols - 1) * grid_pitch_x + 1.7
    for row in range(rows):
        y = y0 + row * grid_pitch_y
        c.box(grid_x - 0.15, y - 0.1, span_w + 0.3, 1.05, face="none", edge=ROW, lw=2.0,
              gid=f"tp:{row}")
        c.text(grid_x + span_w + 0.35, y + 0.42,
               f"tp group {[row * cols + k for k in range(cols)]}", ha="left", colour=ROW,
               size=SMALL)
    for col in range(cols):
        x = grid_x + col * grid_pitch_x
        c.box(x - 0.08, y0 - 0.2, 1.86, (rows - 1) * grid_pitch_y + 1.25, face="none",
              edge=COLUMN, lw=1.6, linestyle=(0, (4, 2)), gid=f"dp:{col}")
    c.text(grid_x + span_w + 0.35, y0 + rows * grid_pitch_y - 0.05,
           "dp groups (dashed columns):\n" + ", ".join(
               str([k * cols + col for k in range(rows)]) for col in range(cols)),
           ha="left", colour=COLUMN, size=SMALL)
    return c.fig


# ------------------------------------------------------------------ 15: data parallelism
def draw_data_parallel(world_size: int, n_samples: int = 48) -> Figure:
    """The batch cut into one shard per rank (`toy.shard`'s contiguous slices), the same
    model on every rank, each rank's gradient, the all_reduce and the division that make
    them one, and the same step everywhere."""
    if n_samples % world_size:
        raise ValueError(f"{n_samples} samples do not split over {world_size} ranks")
    per = n_samples // world_size
    pitch, bh, top = 1.15, 0.8, 1.5
    height = top + world_size * pitch + 0.2
    c = Canvas(17.7, height, f"data parallel over {world_size} ranks: one step",
               "shard the batch, the same model, each rank's gradient, all_reduce (sum), "
               f"÷ {world_size}, the same step")
    mid = [top + r * pitch + bh / 2 for r in range(world_size)]
    xs = {"shard": 0.3, "model": 3.55, "grad": 6.2, "mean": 10.9, "step": 14.9}
    heads = {"shard": f"batch: {n_samples} samples", "model": "the same model",
             "grad": "its gradient", "mean": f"sum ÷ {world_size}", "step": "optimizer step"}
    for key, x in xs.items():
        c.text(x, top - 0.55, heads[key], size=SMALL, italic=True, colour=MUTED, ha="left")
    node = (8.95, top + (world_size - 1) * pitch / 2 + bh / 2)
    terms = "+".join(f"g{r}" for r in range(world_size)) if world_size <= 4 else "g0+…"
    for r in range(world_size):
        y = top + r * pitch
        c.box(xs["shard"], y - (pitch - bh) / 2, 2.4, pitch,
              f"rank {r}: {r * per}–{(r + 1) * per - 1}", face=rank_colour(r, True),
              edge=rank_colour(r), gid=f"shard:{r}", size=SMALL)
        c.arrow((xs["shard"] + 2.45, mid[r]), (xs["model"] - 0.05, mid[r]))
        c.box(xs["model"], y, 2.0, bh, "same W", face="#eeeeee", gid=f"model:{r}")
        c.arrow((xs["model"] + 2.05, mid[r]), (xs["grad"] - 0.05, mid[r]))
        c.box(xs["grad"], y, 1.4, bh, f"g{r}", face=rank_colour(r, True),
              edge=rank_colour(r), gid=f"grad:{r}", bold=True)
        c.arrow((xs["grad"] + 1.45, mid[r]), (node[0] - 0.95, node[1] + 0.12 * (r - (
            world_size - 1) / 2)), colour=rank_colour(r))
        c.arrow((node[0] + 0.95, node[1] + 0.12 * (r - (world_size - 1) / 2)),
                (xs["mean"] - 0.05, mid[r]))
        for k in range(world_size):           # the mean holds every rank's gradient
            c.ax.add_patch(Rectangle((xs["mean"] + k * 3.4 / world_size, y),
                                     3.4 / world_size, bh, facecolor=rank_colour(k, True),
                                     edgecolor="none", gid=f"mean:{r}:{k}"))
        c.box(xs["mean"], y, 3.4, bh, f"({terms})/{world_size}", face="none", edge=INK,
              size=SMALL)
        c.arrow((xs["mean"] + 3.45, mid[r]), (xs["step"] - 0.05, mid[r]))
        c.box(xs["step"], y, 2.5, bh, "W − lr·ḡ", face="#eeeeee", gid=f"step:{r}")
    c.node(*node, 0.9, "all_\nreduce", gid="all_reduce")
    return c.fig


# ------------------------------------------------------------------ 16: ZeRO and FSDP
ZERO_PARTS = ("parameters", "gradients", "optimizer state")
ZERO_SHARDED = {"DP": (), "ZeRO-1": ("optimizer state",),
                "ZeRO-2": ("gradients", "optimizer state"), "ZeRO-3": ZERO_PARTS}
ZERO_CALLS = {"DP": "all_reduce(grads)", "ZeRO-1": "all_reduce(grads)\nall_gather(params)",
              "ZeRO-2": "reduce_scatter(grads)\nall_gather(params)",
              "ZeRO-3": "all_gather(params) ×2\nreduce_scatter(grads)"}


def draw_zero(world_size: int, part_bytes: Sequence[float] = (8, 8, 16)) -> Figure:
    """What each rank holds at each stage: per rank a bar of parameters | gradients |
    optimizer state (widths ∝ `part_bytes` per element: float64 Adam), cut into one slice
    per rank; a slice in rank j's colour is rank j's rows, held; an empty slice is not
    held. Below: ZeRO-3 / FSDP's gather before use and reduce_scatter after backward."""
    n = world_size
    total = sum(part_bytes)
    bar_w, gap, label_w = 3.6, 0.55, 1.5
    widths = [bar_w * b / total for b in part_bytes]
    pitch, bh, top = 0.55, 0.4, 1.3
    flow_top = top + n * pitch + 1.85
    height = flow_top + 1.25
    width = label_w + 4 * (bar_w + gap) + 0.2
    c = Canvas(width, height, f"what each of {n} ranks holds, stage by stage",
               "P parameters | G gradients | O optimizer state (Adam); rank j's colour: "
               "rank j's rows, held; white: not held")
    for s, stage in enumerate(ZERO_SHARDED):
        x0 = label_w + s * (bar_w + gap)
        c.text(x0 + bar_w / 2, top - 0.9, stage, bold=True)
        x = x0
        for part, w in zip(ZERO_PARTS, widths):
            c.text(x + w / 2, top - 0.35, part[0].upper(), size=SMALL, colour=MUTED)
            x += w
        c.text(x0 + bar_w / 2, top + n * pitch + 0.4, ZERO_CALLS[stage], size=SMALL,
               colour=GROUP)
        for r in range(n):
            y, x = top + r * pitch, x0
            for part, w in zip(ZERO_PARTS, widths):
                for j in range(n):
                    held = part not in ZERO_SHARDED[stage] or j == r
                    c.ax.add_patch(Rectangle(
                        (x + j * w / n, y), w / n, bh, linewidth=0.4, edgecolor="white",
                        facecolor=rank_colour(j) if held else "white",
                        gid=f"zero:{stage}:{part}:{r}:{j}"))
                c.ax.add_patch(Rectangle((x, y), w, bh, facecolor="none", edgecolor=INK,
                                         linewidth=0.8))
                x += w
    for r in range(n):
        c.text(label_w - 0.15, top + r * pitch + bh / 2, f"rank {r}", ha="right", size=SMALL,
               bold=True, colour=rank_colour(r))
    _fsdp_flow(c, flow_top, n)
    return c.fig


def _fsdp_flow(c: Canvas, y: float, n: int) -> None:
    """One layer under ZeRO-3 / FSDP, seen from rank 0: its rows → all_gather → the whole W
    → compute → freed; backward gathers again, and reduce_scatter leaves rank 0 its rows."""
    c.text(0.3, y - 0.55, "ZeRO-3 / FSDP, one layer, on rank 0:", ha="left", italic=True)
    h = 0.75

    def shard(x: float, label: str) -> None:
        c.box(x, y, 1.6, h, face="white", edge=INK)
        c.ax.add_patch(Rectangle((x + 0.1, y + 0.1), 1.4 / n, h - 0.2,
                                 facecolor=rank_colour(0), edgecolor="none"))
        c.text(x + 0.8, y + h + 0.35, label, size=SMALL)

    def whole(x: float, label: str) -> None:
        for j in range(n):
            c.ax.add_patch(Rectangle((x + 0.1 + j * 1.4 / n, y + 0.1), 1.4 / n, h - 0.2,
                                     facecolor=rank_colour(j), edgecolor="none"))
        c.box(x, y, 1.6, h, face="none", edge=INK)
        c.text(x + 0.8, y + h + 0.35, label, size=SMALL)

    steps = [(shard, "its rows of W"), ("all_gather", None), (whole, "whole W: forward"),
             ("free, later all_gather", None), (whole, "whole W: backward"),
             ("reduce_scatter(∇W)", None), (shard, "its rows of ∇W")]
    x = 0.3
    for what, label in steps:
        if label is None:
            w = 0.28 * len(what) * 0.62 + 0.5
            c.arrow((x, y + h / 2), (x + w, y + h / 2), colour=GROUP)
            c.text(x + w / 2, y - 0.2, what, size=SMALL, colour=GROUP)
            x += w + 0.05
        else:
            what(x, label)
            x += 1.65
