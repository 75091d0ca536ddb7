"""Card pictures of the parallelism notebooks (14–19), from what each saved with save_run.

Each shows the notebook's scheme with the run's own numbers: 14 the mesh and the bytes that
stayed in rows, 15 every rank's gradients before and after the all_reduce, 16 what each ZeRO
stage keeps on a rank, 17 how W is cut, 18 the two schedules as measured, 19 the 2-D mesh.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
from matplotlib.patches import FancyBboxPatch, Rectangle

from tools.thumbnails import HEIGHT_PX, MIN_FONT, WIDTH_PX, canvas, legend, title

IDLE = "#f2f2f2"          # a timeline row where its rank computes nothing

RANK_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
               "#17becf")
ROW_LINK, COL_LINK = "#c2410c", "#1f4e79"


def _size(n: float) -> str:
    """Bytes, exact below 10 KiB; else KiB or MiB, three digits."""
    if n < 10 << 10:
        return f"{n:,.0f} B"
    unit, scale = ("MiB", 1 << 20) if n >= 1 << 20 else ("KiB", 1 << 10)
    return f"{n / scale:.3g} {unit}"


def _ranks(data: Mapping[str, Any]) -> list[dict]:
    return sorted(data["ranks"], key=lambda r: r["rank"])


# --------------------------------------------------------------------------- meshes (14, 19)
def mesh_figure(heading: str, coords: Mapping[int, tuple[int, int]],
                links: Sequence[tuple[int, int, str, str]]) -> Any:
    """Ranks at their (row, column) of the mesh; each link (a, b, label, colour) drawn."""
    fig, ax = canvas()
    title(fig, heading)
    rows = max(c[0] for c in coords.values()) + 1
    cols = max(c[1] for c in coords.values()) + 1
    box_w, box_h = 110.0, 52.0
    dx = (WIDTH_PX - 2 * 110) / max(cols - 1, 1)          # room for a label on each side
    dy = (HEIGHT_PX - 110 - box_h) / max(rows - 1, 1)
    centre = {r: (110 + c[1] * dx, 70 + box_h / 2 + c[0] * dy)
              for r, c in coords.items()}
    for a, b, label, color in links:
        (x0, y0), (x1, y1) = centre[a], centre[b]
        ax.plot([x0, x1], [y0, y1], color=color, lw=5, solid_capstyle="butt", zorder=1,
                gid=f"link{a}-{b}")
        ax.text((x0 + x1) / 2, (y0 + y1) / 2, label, fontsize=MIN_FONT, ha="center",
                va="center", color=color, zorder=3, linespacing=1.1,
                bbox=dict(boxstyle="round,pad=0.25", fc="white", ec=color, lw=1.2))
    for rank, (x, y) in centre.items():
        ax.add_patch(FancyBboxPatch((x - box_w / 2, y - box_h / 2), box_w, box_h,
                                    boxstyle="round,pad=0,rounding_size=8", zorder=2,
                                    facecolor="#dbe9f6", edgecolor="#1f4e79", lw=1.5,
                                    gid=f"rank{rank}"))
        ax.text(x, y, f"rank {rank}", fontsize=MIN_FONT + 1, fontweight="bold", ha="center",
                va="center", zorder=3)
    return fig


def groups_figure(data: Mapping[str, Any]) -> Any:
    """14: the 2-D mesh; on each link, the bytes its ranks wrote to each other, all phases."""
    ranks = _ranks(data)
    coords = {r["rank"]: tuple(r["mesh_coordinate"]) for r in ranks}
    n = len(ranks)
    sent = np.zeros((n, n))
    for phase in data.get("crossings", {}).values():
        sent += np.asarray(phase["matrix"], dtype=float)
    links = []
    for a in range(n):
        for b in range(a + 1, n):
            if sent[a, b] + sent[b, a] > 0:
                same_row = coords[a][0] == coords[b][0]
                label = (_size(sent[a, b]) if sent[a, b] == sent[b, a]
                         else f"{_size(sent[a, b])} / {_size(sent[b, a])}")
                links.append((a, b, label, ROW_LINK if same_row else COL_LINK))
    rows, cols = data.get("shape", (0, 0))
    fig = mesh_figure(f"{rows} × {cols} mesh: bytes sent each way", coords, links)
    legend(fig.axes[0], [(ROW_LINK, "in a row"), (COL_LINK, "across rows")], HEIGHT_PX - 20)
    return fig


def two_d_figure(data: Mapping[str, Any]) -> Any:
    """19: dp × tp ranks; tp groups all_reduce activations, dp groups the gradients."""
    ranks = _ranks(data)
    coords = {r["rank"]: (r["dp_rank"], r["tp_rank"]) for r in ranks}
    per_group: dict[tuple[int, ...], dict[str, float]] = {}
    for r in ranks:
        for call in r.get("executed", []):
            phase = per_group.setdefault(tuple(call["group"]), {})
            phase[call["phase"]] = phase.get(call["phase"], 0) + (call["measured"] or 0)
    links = []
    for group, phases in sorted(per_group.items()):
        if len(group) == 2:
            a, b = group
            kind, color = (("tp", ROW_LINK) if coords[a][0] == coords[b][0] else ("dp", COL_LINK))
            total = sum(phases.values()) / 2          # each of the two ranks counted its own
            links.append((a, b, f"{kind}: {' + '.join(phases)}\n{_size(total)}", color))
    fig = mesh_figure(f"{data.get('dp_size')} dp × {data.get('tp_size')} tp: bytes per rank"
                      " and step", coords, links)
    return fig


# --------------------------------------------------------------------------- 15
def _flat(grads: Mapping[str, Any]) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(v, dtype=float)) for v in grads.values()])


def data_parallel_figure(data: Mapping[str, Any]) -> Any:
    """15: each rank's gradient (one row) before and after the all_reduce."""
    ranks = _ranks(data)
    before = np.array([_flat(r["grads_before"]) for r in ranks])
    after = np.array([_flat(r["grads_after"]) for r in ranks])
    limit = float(np.abs(before).max()) or 1.0
    fig, ax = canvas()
    title(fig, f"data parallel: {len(ranks)} ranks' gradients")
    top, height = 96, HEIGHT_PX - 96 - 40
    for k, (grid, head) in enumerate(((before, "before all_reduce"), (after, "after"))):
        left = 92 + k * 282
        ax.text(left, top - 22, head, fontsize=MIN_FONT, fontstyle="italic", va="center")
        sub = fig.add_axes([left / WIDTH_PX, 1 - (top + height) / HEIGHT_PX,
                            262 / WIDTH_PX, height / HEIGHT_PX])
        sub.imshow(grid, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto",
                   interpolation="nearest")
        sub.set_gid(f"grads:{head}")
        sub.set_xticks([])
        sub.set_yticks(range(len(ranks)), [f"rank {r['rank']}" for r in ranks] if k == 0
                       else [])
        sub.tick_params(labelsize=MIN_FONT, length=0)
    same = bool(np.allclose(after, after[0]))
    ax.text(14, HEIGHT_PX - 20, "after: every rank holds the same gradient " +
            ("✓" if same else "✗"), fontsize=MIN_FONT, va="center")
    return fig


# --------------------------------------------------------------------------- 16
MEMORY_PARTS = (("parameters", "params", "#4c72b0"), ("gradients", "grads", "#55a868"),
                ("optimizer state", "optimizer", "#c44e52"),
                ("peak gathered", "gathered", "#dd8452"))


def zero_figure(data: Mapping[str, Any]) -> Any:
    """16: what one rank holds at each stage, stacked, bytes measured."""
    rank = _ranks(data)[0]
    stages = list(rank["results"])
    fig, ax = canvas()
    title(fig, f"ZeRO: bytes rank {rank['rank']} holds")
    left, top = 100, 60
    pitch = (HEIGHT_PX - 50 - top) / len(stages)
    totals = [sum(rank["results"][s]["memory"].get(p, 0) for p, *_ in MEMORY_PARTS)
              for s in stages]
    scale = (WIDTH_PX - left - 110) / max(max(totals), 1)
    for i, stage in enumerate(stages):
        y = top + i * pitch
        ax.text(left - 10, y + pitch / 2, stage, fontsize=MIN_FONT, ha="right", va="center")
        x = float(left)
        for part, _short, color in MEMORY_PARTS:
            w = rank["results"][stage]["memory"].get(part, 0) * scale
            ax.add_patch(Rectangle((x, y + 6), w, pitch - 12, facecolor=color,
                                   edgecolor="white", gid=f"{stage}:{part}"))
            x += w
        ax.text(x + 8, y + pitch / 2, _size(totals[i]), fontsize=MIN_FONT, va="center")
    legend(ax, [(color, short) for _, short, color in MEMORY_PARTS], HEIGHT_PX - 20)
    return fig


# --------------------------------------------------------------------------- 17
def tensor_parallel_figure(data: Mapping[str, Any]) -> Any:
    """17: W1 whole, each rank's rows outlined; W2 whole, each rank's columns outlined."""
    ranks = _ranks(data)
    w1 = [np.asarray(r["W1_shard"], dtype=float) for r in ranks]
    w2 = [np.asarray(r["W2_shard"], dtype=float) for r in ranks]
    fig, ax = canvas()
    title(fig, "tensor parallel: how W is cut")
    top, height = 84, HEIGHT_PX - 84 - 44
    whole1, whole2 = np.vstack(w1), np.hstack(w2)
    cell1 = height / whole1.shape[0]
    left2 = 40 + whole1.shape[1] * cell1 + 70
    cell2 = min((WIDTH_PX - 20 - left2) / whole2.shape[1], height / whole2.shape[0])
    boxes = (("W1: rows", whole1, 40, [(0, s.shape[0]) for s in w1], 0, cell1),
             ("W2: columns", whole2, left2, [(1, s.shape[1]) for s in w2], 1, cell2))
    for head, whole, left, spans, axis, cell in boxes:
        ax.text(left, top - 22, head, fontsize=MIN_FONT, fontweight="bold", va="center")
        h, w = whole.shape[0] * cell, whole.shape[1] * cell
        sub = fig.add_axes([left / WIDTH_PX, 1 - (top + h) / HEIGHT_PX, w / WIDTH_PX,
                            h / HEIGHT_PX])
        sub.imshow(whole, cmap="Greys", aspect="auto", interpolation="nearest")
        sub.set_axis_off()
        start = 0
        for rank, (_, size) in enumerate(spans):
            xy, wh = (((-0.5, start - 0.5), (whole.shape[1], size)) if axis == 0
                      else ((start - 0.5, -0.5), (size, whole.shape[0])))
            sub.add_patch(Rectangle(xy, *wh, fill=False, lw=3.5, clip_on=False,
                                    edgecolor=RANK_COLORS[rank % len(RANK_COLORS)],
                                    gid=f"{head.split(':')[0]}:rank{rank}"))
            start += size
    legend(ax, [(RANK_COLORS[r % len(RANK_COLORS)], f"rank {r}") for r in range(len(ranks))],
           HEIGHT_PX - 20)
    return fig


# --------------------------------------------------------------------------- 18
def _timelines(ranks: Sequence[Mapping[str, Any]], m: int) -> dict[str, list]:
    """Per schedule, the fastest recorded run with m micro-batches: every rank's events."""
    from helpers.training.pipeline import step_time

    runs: dict[tuple, list] = {}
    for state in ranks:
        for name, mb, repeat, events, *_ in state["runs"]:
            runs.setdefault((name, mb, repeat), []).append(events)
    out = {}
    for name in dict.fromkeys(k[0] for k in runs):
        candidates = [v for (n, mb, _), v in runs.items() if (n, mb) == (name, m)]
        if candidates:
            out[name] = min(candidates, key=step_time)
    return out


def pipeline_figure(data: Mapping[str, Any]) -> Any:
    """18: GPipe and 1F1B as measured: one row per stage, forwards and backwards, the rest
    idle; the m the page plots (8) when it was run, else the largest."""
    from helpers.training.pipeline import COLOURS, COMPUTE, bubble_fraction, step_time

    ranks = _ranks(data)
    ms = sorted({run[1] for r in ranks for run in r["runs"]})
    m = 8 if 8 in ms else ms[-1]
    timelines = _timelines(ranks, m)
    longest = max(step_time(t) for t in timelines.values())
    fig, ax = canvas()
    title(fig, f"pipeline: {len(ranks)} stages · m = {m} micro-batches")
    left, top, right = 14, 62, WIDTH_PX - 14
    block = (HEIGHT_PX - 40 - top) / len(timelines)
    scale = (right - left) / longest
    for k, (name, by_rank) in enumerate(timelines.items()):
        y0 = top + k * block
        bubble = float(np.mean(bubble_fraction(by_rank)))
        ax.text(left, y0 + 14, f"{name} · {step_time(by_rank) * 1e3:.0f} ms · "
                f"mean bubble {bubble:.0%}", fontsize=MIN_FONT, va="center", fontweight="bold")
        timeline_rows(ax, name, by_rank, left, right, y0 + 30, (block - 36) / len(by_rank),
                      scale, {kind: COLOURS[kind] for kind in COMPUTE})
    legend(ax, [(COLOURS["forward"], "forward"), (COLOURS["backward"], "backward"),
                (IDLE, "idle")], HEIGHT_PX - 20)
    return fig


def timeline_rows(ax: Any, name: str, by_rank: Sequence[list], x0: float, x1: float,
                  top: float, pitch: float, scale: float, colour_of: Mapping[str, str]) -> None:
    """One row per rank from `top`, `pitch` apart: the whole row idle grey, then each event
    of a kind in `colour_of` in its colour, at `scale` px a second from x0 (gid
    "name:rankR:kind"). Notebooks 18 and 24's measured timelines."""
    for r, events in enumerate(by_rank):
        y = top + r * pitch
        ax.add_patch(Rectangle((x0, y + 1), x1 - x0, pitch - 2, facecolor=IDLE,
                               edgecolor="none"))
        for kind, _mb, begin, end in events:
            if kind in colour_of:
                ax.add_patch(Rectangle((x0 + begin * scale, y + 1), (end - begin) * scale,
                                       pitch - 2, facecolor=colour_of[kind], edgecolor="none",
                                       gid=f"{name}:rank{r}:{kind}"))


DRAWINGS: dict[str, Callable[[dict], Any]] = {
    "14_groups_and_meshes": groups_figure,
    "15_data_parallel": data_parallel_figure,
    "16_zero_fsdp": zero_figure,
    "17_tensor_parallel": tensor_parallel_figure,
    "18_pipeline_parallel": pipeline_figure,
    "19_two_d_parallel": two_d_figure,
}
