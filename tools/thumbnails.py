"""The index cards' pictures (tools.build): each notebook's own result, drawn for a card.

Every picture is WIDTH_PX × HEIGHT_PX (16:10), with few labels of at least MIN_FONT points
(≥ 10 px on a card ~320 px wide). Drawn from the results a notebook saved
(build/results/<stem>.json, 12 also <stem>.survey.json):

- a record (helpers.records.make_record): every rank's input before → output after
  (08: the sent and received matrices; 10: the ring's steps), tools.thumbnail_collectives;
- 00's barrier timings: each rank working, then waiting; 11's sweep rows: the busbw curves; 12's survey: op × dtype accepted / refused;
- 13's diagnoses: what happened, by rank, for every mistake;
- 14–19 ({"kind": stem, ...}, helpers.records.save_run): tools.thumbnail_training; 20–22:
  tools.thumbnail_block.

Nothing saved (or nothing recognised): None, and tools.build letterboxes the page's first
plot (`letterbox`).
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable

WIDTH_PX, HEIGHT_PX, DPI = 640, 400, 100
MIN_FONT = 15.0               # points at DPI 100: 20.8 px here, 10.4 px on a 320 px card
TITLE_FONT = 18.0
OK, BAD, WARN, IDLE = "#12b76a", "#d92d20", "#f79009", "#98a2b3"


def canvas() -> tuple[Any, Any]:
    """A blank card: the figure and one axes over all of it, in pixels (y down)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, facecolor="white")
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, WIDTH_PX)
    ax.set_ylim(HEIGHT_PX, 0)
    ax.set_axis_off()
    return fig, ax


def title(fig: Any, text: str) -> None:
    fig.text(12 / WIDTH_PX, 1 - 22 / HEIGHT_PX, text, fontsize=TITLE_FONT, fontweight="bold",
             va="center", ha="left")


def legend(ax: Any, items: list[tuple[str, str]], y: float, x: float = 14) -> None:
    """Coloured squares and their words in one row at height y (pixels)."""
    from matplotlib.patches import Rectangle

    for face, words in items:
        ax.add_patch(Rectangle((x, y - 9), 18, 18, facecolor=face, edgecolor="#444444", lw=0.6))
        ax.text(x + 24, y, words, fontsize=MIN_FONT, va="center")
        x += 24 + 11.5 * len(words) + 22


def png(fig: Any) -> bytes:
    """The figure as a PNG of exactly WIDTH_PX × HEIGHT_PX (no tight bbox: it would resize)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None}, facecolor="white")
    return buf.getvalue()


def letterbox(image_png: bytes) -> bytes:
    """Any PNG scaled to fit the card, centred on white: never stretched, never cropped."""
    import matplotlib.image as mpimg
    from matplotlib.figure import Figure

    image = mpimg.imread(io.BytesIO(image_png), format="png")
    height, width = image.shape[:2]
    scale = min(WIDTH_PX / width, HEIGHT_PX / height)
    w, h = width * scale / WIDTH_PX, height * scale / HEIGHT_PX
    fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, facecolor="white")
    ax = fig.add_axes([(1 - w) / 2, (1 - h) / 2, w, h])
    ax.imshow(image, interpolation="antialiased", aspect="auto")
    ax.set_axis_off()
    return png(fig)


# --------------------------------------------------------------------------- 00, 11 and 13
def barrier_figure(data: dict) -> Any:
    """Notebook 00: each rank working, then waiting in dist.barrier() until the last arrives."""
    from matplotlib.patches import Rectangle

    timings = sorted(data["timings"], key=lambda t: t["rank"])
    fig, ax = canvas()
    title(fig, "dist.barrier(): nobody leaves early")
    top, bottom, left, right = 60, HEIGHT_PX - 56, 92, WIDTH_PX - 20
    end = max(t["left"] for t in timings) or 1.0
    x = lambda seconds: left + (right - left) * seconds / end
    pitch = (bottom - top) / len(timings)
    for i, t in enumerate(timings):
        y = top + i * pitch + 4
        ax.text(left - 10, y + pitch / 2 - 4, f"rank {t['rank']}", ha="right", va="center",
                fontsize=MIN_FONT, fontweight="bold")
        ax.add_patch(Rectangle((x(0), y), x(t["arrived"]) - x(0), pitch - 8, facecolor="#9ecae1",
                               edgecolor="#3182bd", gid=f"rank{t['rank']}:working"))
        ax.add_patch(Rectangle((x(t["arrived"]), y), x(t["left"]) - x(t["arrived"]), pitch - 8,
                               facecolor="#fdd0a2", edgecolor="#e6550d", hatch="//",
                               gid=f"rank{t['rank']}:waiting"))
    last = max(t["arrived"] for t in timings)
    ax.plot([x(last)] * 2, [top - 4, bottom + 4], color="#c2410c", lw=2.5, ls="--")
    legend(ax, [("#9ecae1", "working"), ("#fdd0a2", "waiting in the barrier")],
           HEIGHT_PX - 24, x=left)
    return fig


def busbw_figure(rows: list[dict]) -> Any:
    """Notebook 11: busbw against message size, one line per collective, legend outside."""
    from helpers.bench.figures import COLORS, MARKERS, by_collective, size_label

    shown = [r for r in rows if r.get("busbw", 0) > 0 and r.get("bytes", 0) > 0]
    fig, _ = canvas()
    fig.axes[0].remove()
    ax = fig.add_axes([78 / WIDTH_PX, 48 / HEIGHT_PX, 330 / WIDTH_PX, 300 / HEIGHT_PX])
    groups = by_collective(shown)
    for collective, group in groups.items():
        ax.plot([r["bytes"] for r in group], [r["busbw"] for r in group], lw=2.2,
                color=COLORS.get(collective, "black"), marker=MARKERS.get(collective, "o"),
                markersize=4, label=collective, gid=f"busbw:{collective}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted({r["bytes"] for r in shown})
    ticks = [s for s in sizes if s in (1024, 1024 ** 2)] or sizes[:: max(len(sizes) // 2, 1)]
    ax.set_xticks(ticks, [size_label(s) for s in ticks])
    ax.minorticks_off()
    ax.tick_params(labelsize=MIN_FONT)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=MIN_FONT, frameon=False,
              handlelength=1.2, borderaxespad=0, labelspacing=0.25)
    first = shown[0] if shown else {}
    title(fig, f"busbw, GB/s · {first.get('backend', '?')} · {first.get('world_size', '?')} ranks")
    return fig


def diagnosis_figure(diagnoses: list[dict]) -> Any:
    """Notebook 13: one row per mistake run, one column per rank, coloured by what happened."""
    from matplotlib.patches import Rectangle

    from helpers.figures.diagnoses import verdict    # the page's own figure's colours

    fig, ax = canvas()
    title(fig, "What happened, by rank")
    n = max([r for d in diagnoses for key in ("skipped", "absent") for r in d.get(key, [])]
            + [f["rank"] for d in diagnoses for f in d.get("failed", [])] + [0]) + 1
    top, bottom, left = 74, HEIGHT_PX - 44, 150
    pitch = (bottom - top) / len(diagnoses)
    width = (WIDTH_PX - left - 14) / n
    for r in range(n):
        ax.text(left + (r + 0.5) * width, top - 16, f"rank {r}", ha="center", va="center",
                fontsize=MIN_FONT, fontweight="bold")
    for i, diagnosis in enumerate(diagnoses):
        y = top + i * pitch
        ax.text(left - 12, y + pitch / 2, f"mistake {i + 1}", ha="right", va="center",
                fontsize=MIN_FONT, color="#333333")
        for r in range(n):
            face, mark = verdict(diagnosis, r)
            ax.add_patch(Rectangle((left + r * width + 3, y + 2), width - 6, pitch - 4,
                                   facecolor=face, edgecolor="white", gid=f"mistake{i}:rank{r}"))
            ax.text(left + (r + 0.5) * width, y + pitch / 2, mark, ha="center", va="center",
                    fontsize=MIN_FONT, color="white", fontweight="bold")
    legend(ax, [(BAD, "✗ group lost"), (WARN, "✗ group usable"), (IDLE, "never reached")],
           HEIGHT_PX - 20)
    return fig


# --------------------------------------------------------------------------- which picture
def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except json.JSONDecodeError:
        return None


def figure_for(stem: str, results_dir: Path) -> Any:
    """The card's figure for `stem`, from its saved results, or None."""
    from tools import thumbnail_block as block
    from tools import thumbnail_collectives as collectives
    from tools import thumbnail_scale as scale
    from tools import thumbnail_training as training

    survey = _load(results_dir / f"{stem}.survey.json")
    if isinstance(survey, dict) and survey.get("cases"):
        return collectives.support_figure(survey)
    data = _load(results_dir / f"{stem}.json")
    if isinstance(data, list) and data and all(isinstance(d, dict) and "failed" in d
                                               for d in data):
        return diagnosis_figure(data)
    if isinstance(data, list) and data and all(isinstance(r, dict) and "busbw" in r
                                               for r in data):
        return busbw_figure(data)
    if isinstance(data, dict) and data.get("kind") == "00_ranks_and_world":
        return barrier_figure(data)
    drawings: dict[str, Callable[[dict], Any]] = {**training.DRAWINGS, **block.DRAWINGS,
                                                  **scale.DRAWINGS}
    if isinstance(data, dict) and data.get("kind") in drawings:
        return drawings[data["kind"]](data)
    record = collectives.first_record(data)
    return None if record is None else collectives.record_thumbnail(record)


def thumbnail(stem: str, results_dir: Path) -> bytes | None:
    """PNG of the card's picture from the saved results, or None (use the page's plot)."""
    fig = figure_for(stem, results_dir)
    return None if fig is None else png(fig)
