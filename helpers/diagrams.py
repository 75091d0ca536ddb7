"""Collective diagrams: the upstream ones when reachable, our own drawings otherwise.

`load_diagram("scatter")` returns the upstream PNG (PyTorch tutorial or NCCL
user guide), fetched once with a short timeout and cached *outside* the
repository; without network it falls back to our own drawing in
`images/<collective>.png` and says so in `Diagram.note`.

Our drawings are computed from `helpers.models` (example inputs and the
expected result), so they cannot disagree with the model.  Regenerate them with

    make images   (or: python -c "from helpers.diagrams import main; main()")

Environment: TUTORIAL_OFFLINE=1 skips the network; TUTORIAL_CACHE_DIR moves the
cache (default ~/.cache/nccl-notebooks/diagrams); TUTORIAL_DIAGRAM_BASE_URL
replaces the upstream base URL (the file name is appended).
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle
import matplotlib.colors as mcolors

from helpers import plots
from helpers.formatting import format_value
from helpers.collectives import ALIASES, IO_ARGS, REDUCING, REPO_ROOT, UPSTREAM, Upstream  # noqa: F401
from helpers.runtime.files import atomic_write

IMAGES_DIR = REPO_ROOT / "images"
REGENERATE = "make images"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

LOCAL_DRAWINGS = ("scatter", "gather", "broadcast", "reduce", "all_reduce", "all_gather",
                  "reduce_scatter", "all_to_all", "send_recv")


def canonical(collective: str) -> str:
    if collective not in UPSTREAM:
        raise ValueError(f"no diagram for {collective!r}; known: {', '.join(sorted(UPSTREAM))}")
    return ALIASES.get(collective, collective)


def upstream_url(collective: str) -> str:
    """The URL load_diagram fetches (TUTORIAL_DIAGRAM_BASE_URL replaces the base)."""
    up = UPSTREAM[canonical(collective)]
    base = os.environ.get("TUTORIAL_DIAGRAM_BASE_URL")
    return f"{base.rstrip('/')}/{up.filename}" if base else up.url


def cache_dir() -> Path:
    explicit = os.environ.get("TUTORIAL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "nccl-notebooks" / "diagrams"


def cache_path(url: str) -> Path:
    """One cache file per URL, so a test server never shadows the real diagram."""
    name = Path(urllib.parse.urlparse(url).path).stem or "diagram"
    return cache_dir() / f"{name}-{hashlib.sha256(url.encode()).hexdigest()[:12]}.png"


def local_path(collective: str) -> Path:
    return IMAGES_DIR / f"{canonical(collective)}.png"


def is_png(data: bytes) -> bool:
    return data[:8] == PNG_MAGIC and len(data) > 32


@dataclass(frozen=True)
class Diagram:
    collective: str
    png: bytes
    source: str                 # "upstream" or "local"
    url: str                    # the upstream diagram, always
    credit: str                 # who made what is shown
    licence: str
    caption: str                # one line to print under the image
    note: str | None = None     # why we fell back to our own drawing
    path: Path | None = None    # cache file or local drawing
    reason: str | None = None   # the error behind the note

    def __repr__(self) -> str:
        return (f"Diagram({self.collective!r}, source={self.source!r}, {len(self.png)} bytes, "
                f"url={self.url!r}, note={self.note!r})")

    def _ipython_display_(self) -> None:
        """In a notebook: the image itself (embedded) and its credit line."""
        DiagramDisplay(self)._ipython_display_()


# Hosts that failed with a network error: not retried for a while in this process,
# so an offline notebook waits at most once.
_UNREACHABLE: dict[str, float] = {}
UNREACHABLE_FOR_S = 300.0


def _fetch(url: str, timeout_s: float, max_bytes: int = 8_000_000) -> bytes:
    """GET url with a hard overall deadline (DNS and slow servers included)."""
    result: dict[str, Any] = {}

    def worker() -> None:
        try:
            request = urllib.request.Request(url, headers={"User-Agent": "nccl-notebooks/diagrams"})
            deadline = time.monotonic() + timeout_s
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                chunks, total = [], 0
                while time.monotonic() < deadline:
                    chunk = response.read(65536)
                    if not chunk:
                        result["data"] = b"".join(chunks)
                        return
                    chunks.append(chunk)
                    total += len(chunk)
                    if total > max_bytes:
                        raise ValueError(f"more than {max_bytes} bytes")
                raise TimeoutError(f"download took longer than {timeout_s} s")
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            result["error"] = exc

    thread = threading.Thread(target=worker, name="diagram-fetch", daemon=True)
    thread.start()
    thread.join(timeout_s + 0.2)
    if thread.is_alive():
        raise TimeoutError(f"no answer from {url} within {timeout_s} s")
    if "error" in result:
        raise result["error"]
    return result["data"]


def _read_cache(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if is_png(data):
        return data
    path.unlink(missing_ok=True)                 # a damaged cache entry: fetch again
    return None


def _upstream(collective: str, url: str, data: bytes, path: Path | None) -> Diagram:
    up = UPSTREAM[canonical(collective)]
    caption = f"Diagram: {up.credit}. Licence: {up.licence}. Image: {url}"
    return Diagram(collective, data, "upstream", url, up.credit, up.licence, caption, path=path)


def _local(collective: str, url: str, note: str | None, reason: str | None) -> Diagram:
    path = local_path(collective)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing (our own drawing of {canonical(collective)}); regenerate it "
            f"with `{REGENERATE}` in the repository root")
    data = path.read_bytes()
    if not is_png(data):
        raise FileNotFoundError(f"{path} is not a PNG; regenerate it with `{REGENERATE}`")
    up = UPSTREAM[canonical(collective)]
    credit = "nccl-notebooks, drawn from helpers.models"
    caption = (f"Our own drawing of {canonical(collective)} ({credit}). "
               f"Upstream diagram: {url} ({up.credit})")
    return Diagram(collective, data, "local", url, credit, "same as this repository", caption,
                   note=note, path=path, reason=reason)


def load_diagram(collective: str, timeout_s: float = 3.0) -> Diagram:
    """The upstream diagram (cache, else one fetch), else our own drawing.

    Never raises for network trouble; raises FileNotFoundError only when the
    local fallback image itself is missing.
    """
    canonical(collective)
    url = upstream_url(collective)
    cached = cache_path(url)
    data = _read_cache(cached)
    if data is not None:
        return _upstream(collective, url, data, cached)

    offline = f"Offline: showing our own drawing of {collective}; the upstream diagram is at {url}"
    if os.environ.get("TUTORIAL_OFFLINE", "").strip() not in ("", "0"):
        return _local(collective, url, offline, "TUTORIAL_OFFLINE is set")
    host = urllib.parse.urlparse(url).netloc
    failed_at = _UNREACHABLE.get(host)
    if failed_at is not None and time.monotonic() - failed_at < UNREACHABLE_FOR_S:
        return _local(collective, url, offline, f"{host} was unreachable a moment ago")
    try:
        data = _fetch(url, timeout_s)
    except urllib.error.HTTPError as exc:
        note = (f"The upstream diagram is unavailable (HTTP {exc.code}): showing our own "
                f"drawing of {collective}; the upstream diagram is at {url}")
        return _local(collective, url, note, repr(exc))
    except Exception as exc:  # noqa: BLE001 - any network trouble means "offline"
        _UNREACHABLE[host] = time.monotonic()
        return _local(collective, url, offline, repr(exc))
    if not is_png(data):
        note = (f"The upstream answer was not a PNG: showing our own drawing of {collective}; "
                f"the upstream diagram is at {url}")
        return _local(collective, url, note, f"{len(data)} bytes starting {data[:16]!r}")
    try:
        atomic_write(cached, data)
    except OSError:                               # a read-only home: show it anyway
        cached = None
    return _upstream(collective, url, data, cached)


def diagram_markdown(diagram: Diagram) -> str:
    """The credit line (and the fallback note) as Markdown."""
    up = UPSTREAM[canonical(diagram.collective)]
    # A bare URL would swallow the closing "*" of the italics: make it an explicit link.
    credit = re.sub(r"(https?://[^\s,;)]+)", r"<\1>", up.credit)
    if diagram.source == "upstream":
        text = f"*Diagram: {credit} — [{up.filename}]({diagram.url}), {up.licence}.*"
    else:
        text = (f"*Our own drawing of `{canonical(diagram.collective)}`, computed from "
                f"`helpers.models`. Upstream diagram: [{up.filename}]({diagram.url}) — {credit}.*")
    if diagram.note:
        text += f"\n\n> {diagram.note}"
    return text


class DiagramDisplay:
    """Shows the PNG (embedded, not linked) and the credit line in a notebook."""

    def __init__(self, diagram: Diagram):
        from IPython.display import Image, Markdown
        self.diagram = diagram
        self.image = Image(data=diagram.png, format="png")
        self.credit = Markdown(diagram_markdown(diagram))

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.image, self.credit)

    def __repr__(self) -> str:
        return f"<diagram of {self.diagram.collective}: {self.diagram.caption}>"


def show_diagram(collective: str, timeout_s: float = 3.0) -> DiagramDisplay:
    return DiagramDisplay(load_diagram(collective, timeout_s))


# --------------------------------------------------------------------------- our drawings
DRAW_PARAMS: dict[str, dict[str, Any]] = {
    "scatter": {"src": 0}, "gather": {"dst": 0}, "broadcast": {"src": 0},
    "reduce": {"dst": 0, "op": "SUM"}, "all_reduce": {"op": "SUM"}, "all_gather": {},
    "reduce_scatter": {"op": "SUM"}, "all_to_all": {}, "send_recv": {"src": 0, "dst": 1},
}
SUMMARY = {
    "scatter": "src splits scatter_list: rank i receives scatter_list[i] in its tensor",
    "gather": "dst collects every rank's tensor: gather_list[i] holds rank i's tensor",
    "broadcast": "src's tensor is copied into the tensor of every rank",
    "reduce": "all tensors are combined with op; only dst receives the result",
    "all_reduce": "all tensors are combined with op; every rank receives the result",
    "all_gather": "every rank receives every tensor: tensor_list[i] holds rank i's tensor",
    "reduce_scatter": "input_list[i] of all ranks is combined with op; rank i receives it in output",
    "all_to_all": "input_tensor_list[j] of rank i lands in output_tensor_list[i] of rank j",
    "send_recv": "rank 0 calls send(tensor, dst=1); rank 1 calls recv(tensor, src=0)",
}


def model_states(collective: str, world_size: int = 4, params: Mapping[str, Any] | None = None,
                 size: int = 1) -> tuple[list[dict], list[dict], dict]:
    """Example befores and the model's afters (send_recv is spelled out here)."""
    params = dict(DRAW_PARAMS[collective] if params is None else params)
    if collective == "send_recv":
        befores = [{"tensor": [1.0] * size}, {"tensor": [0.0] * size}]
        afters = [{"tensor": list(befores[0]["tensor"])} for _ in range(2)]
        return befores, afters, params
    from . import models
    befores = models.example_befores(collective, world_size, params, size=size)
    afters = models.model_after(collective, befores, params)
    return befores, afters, params


def _chunks(value: Any, arg: str) -> list[list[str]] | None | str:
    """A buffer as chunks of cell texts; None = not passed; "undefined"."""
    if value is None:
        return None
    if plots.is_unspecified(value):
        return "undefined"
    if arg in plots.LIST_ARGS:
        return [[format_value(v) for v in plots.flatten(x)] for x in value]
    return [[format_value(v) for v in plots.flatten(value)]]


def _rank_label(name: str, rank: int, root: int | None, root_key: str | None) -> str:
    if name == "send_recv":
        return f"rank {rank}" + (" (send)" if rank == 0 else " (recv)")
    return f"rank {rank}" + (f" ({root_key})" if rank == root else "")


def _reduction_terms(name: str, ins: list, outs: list, params: Mapping[str, Any]) -> dict[int, str]:
    """rank → "64 = 1 + 11 + 21 + 31" for the first element of each result."""
    op = str(params.get("op", "SUM"))
    terms = {}
    for r, out in enumerate(outs):
        if not isinstance(out, list):
            continue
        column = 0 if name != "reduce_scatter" else r
        parts = [chunks[column][0] for chunks in ins if isinstance(chunks, list)]
        joined = {"SUM": " + ", "PRODUCT": " × "}.get(op)
        expr = joined.join(parts) if joined else f"{op.lower()}({', '.join(parts)})"
        terms[r] = f"{out[0][0]} = {expr}"
    return terms


def _darker(color: str, amount: float = 0.3) -> tuple[float, float, float]:
    return tuple(c * (1 - amount) for c in mcolors.to_rgb(color))


def draw_collective(collective: str, world_size: int = 4,
                    params: Mapping[str, Any] | None = None) -> Figure:
    """Our schematic: each rank's input before (left), output after (right),
    arrows for the data movement (through an `op` node for reductions)."""
    import matplotlib.pyplot as plt

    name = canonical(collective) if collective in UPSTREAM else collective
    if name == "send_recv":
        world_size = 2
    befores, afters, params = model_states(name, world_size, params)
    in_arg, out_arg = IO_ARGS[name]
    root_key = plots.ROOT_PARAM.get(name)
    root = params.get(root_key) if root_key else None
    ignored = {r for r in range(world_size)          # buffers that only receive
               if (name == "broadcast" and r != params.get("src")) or (name == "send_recv" and r == 1)}
    ins = [_chunks(b.get(in_arg), in_arg) for b in befores]
    outs = [_chunks(a.get(out_arg), out_arg) for a in afters]
    colors = plots.ValueColors()
    for group in (ins, outs):
        for chunks in group:
            if isinstance(chunks, list):
                for chunk in chunks:
                    for text in chunk:
                        colors.add(text)

    cell, gap, pad, pitch, header = 1.0, 0.3, 0.18, 1.75, 1.5

    def width(chunks: Any) -> float:
        if not isinstance(chunks, list) or not chunks:
            return 2.8
        return sum(len(c) for c in chunks) * cell + (len(chunks) - 1) * gap + 2 * pad

    labels = [_rank_label(name, r, root, root_key) for r in range(world_size)]
    label_w = 0.27 * max(len(t) for t in labels) + 0.7
    sums = _reduction_terms(name, ins, outs, params) if name in REDUCING else {}
    note_w = 0.21 * max((len(t) for t in sums.values()), default=0) + 0.6 if sums else 0.0
    bw = max(width(c) for c in ins)
    aw = max(width(c) for c in outs)
    zone = 5.5 if world_size <= 4 else 7.0
    bx, ax0 = label_w, label_w + bw + zone
    total_w = ax0 + aw + label_w + note_w
    total_h = header + world_size * pitch + 0.2
    unit = 0.36
    top_in, bottom_in = 0.95, 0.35
    fig = plt.figure(figsize=(total_w * unit, total_h * unit + top_in + bottom_in), dpi=100)
    fig_h = total_h * unit + top_in + bottom_in
    ax = fig.add_axes([0, bottom_in / fig_h, 1, total_h * unit / fig_h])
    ax.set_xlim(0, total_w)
    ax.set_ylim(total_h, 0)
    ax.set_axis_off()
    ax.set_gid("schematic")

    title = plots.call_signature(name, {k: v for k, v in params.items() if name != "send_recv"})
    if name == "send_recv":
        title = "send / recv"
    fig.text(0.02, 1 - 0.3 / fig_h, title, fontsize=15, fontweight="bold", va="center")
    fig.text(0.02, 1 - 0.65 / fig_h, SUMMARY[name], fontsize=9.5, color="#444444", va="center")
    fig.text(0.98, 0.14 / fig_h, f"nccl-notebooks · drawn from helpers.models · {REGENERATE}",
             fontsize=7, color="#9a9a9a", ha="right", va="center")
    ax.text(bx + bw / 2, 0.6, f"before · {in_arg}", ha="center", va="center", fontsize=10.5,
            fontstyle="italic", color="#333333")
    ax.text(ax0 + aw / 2, 0.6, f"after · {out_arg}", ha="center", va="center", fontsize=10.5,
            fontstyle="italic", color="#333333")

    def row_y(rank: int) -> float:
        return header + rank * pitch

    def draw_box(x: float, rank: int, chunks: Any, faded: bool) -> None:
        y = row_y(rank)
        w = width(chunks)
        is_root = rank == root
        frame = plots.ROOT_COLOR if is_root else "#7a7a7a"
        if chunks is None or chunks == "undefined":
            undefined = chunks == "undefined"
            ax.add_patch(FancyBboxPatch(
                (x, y), w, cell + 2 * pad - 0.0, boxstyle="round,pad=0,rounding_size=0.15",
                facecolor=plots.UNDEFINED_FACE if undefined else "white", edgecolor="#a0a0a0",
                hatch="////" if undefined else None, linestyle="-" if undefined else (0, (3, 3)),
                linewidth=1.0))
            ax.text(x + w / 2, y + pad + cell / 2, "undefined" if undefined else "None",
                    ha="center", va="center", fontsize=9.5, fontstyle="italic", color="#666666",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none") if undefined else None)
            return
        ax.add_patch(FancyBboxPatch((x, y), w, cell + 2 * pad, boxstyle="round,pad=0,rounding_size=0.15",
                                    facecolor=plots.ROOT_FACE if is_root else "#f7f7f7",
                                    edgecolor=frame, linewidth=1.8 if is_root else 1.0))
        cx = x + pad
        for chunk in chunks:
            for text in chunk:
                face = colors(text)
                ax.add_patch(Rectangle((cx, y + pad), cell, cell, facecolor=face, edgecolor="#333333",
                                       linewidth=0.8, alpha=0.35 if faded else 1.0))
                ax.text(cx + cell / 2, y + pad + cell / 2, text, ha="center", va="center",
                        fontsize=10, color=plots.text_color_for(face), alpha=0.45 if faded else 1.0)
                cx += cell
            cx += gap

    def rank_label(x: float, rank: int, ha: str) -> None:
        ax.text(x, row_y(rank) + pad + cell / 2, labels[rank], ha=ha, va="center", fontsize=10.5,
                fontweight="bold", color=plots.ROOT_COLOR if rank == root else "#222222")

    for r in range(world_size):
        draw_box(bx, r, ins[r], r in ignored)
        draw_box(ax0, r, outs[r], False)
        rank_label(bx - 0.3, r, "right")
        rank_label(ax0 + aw + 0.3, r, "left")
        if r in sums:
            ax.text(ax0 + aw + label_w + 0.1, row_y(r) + pad + cell / 2, sums[r], ha="left",
                    va="center", fontsize=9.5, color="#555555")
        if r in ignored:
            ax.text(bx + width(ins[r]) + 0.15, row_y(r) + pad + cell / 2, "overwritten",
                    fontsize=8, fontstyle="italic", color="#888888", va="center")

    def arrow(p, q, color, lw=1.5) -> None:
        ax.add_patch(FancyArrowPatch(p, q, arrowstyle="-|>,head_length=5,head_width=2.6",
                                     color=color, linewidth=lw, shrinkA=0, shrinkB=0,
                                     alpha=0.9, zorder=3))

    mid_y = lambda r: row_y(r) + pad + cell / 2
    spread = lambda k, n: (k - (n - 1) / 2) * min(0.22, 0.9 / max(n, 1))
    start_x = lambda r: bx + width(ins[r]) + (0.1 if r not in ignored else 1.4)
    end_x = ax0 - 0.12

    if name in REDUCING:
        node = (bx + bw + zone / 2, header + (world_size - 1) * pitch / 2 + pad + cell / 2)
        ax.add_patch(Circle(node, 0.85, facecolor="white", edgecolor="#333333", linewidth=1.5, zorder=4))
        ax.text(*node, str(params.get("op", "SUM")), ha="center", va="center", fontsize=10,
                fontweight="bold", zorder=5)
        for r in range(world_size):
            first = ins[r][0][0] if isinstance(ins[r], list) and len(ins[r]) == 1 else None
            col = _darker(colors(first)) if first else "#777777"
            arrow((start_x(r), mid_y(r)), (node[0] - 0.9, node[1] + spread(r, world_size) * 2), col)
            if isinstance(outs[r], list):
                arrow((node[0] + 0.9, node[1] + spread(r, world_size) * 2), (end_x, mid_y(r)),
                      _darker(colors(outs[r][0][0])))
    else:
        moves = []
        for j, out in enumerate(outs):
            if not isinstance(out, list):
                continue
            for chunk in out:
                for i, inp in enumerate(ins):
                    if i in ignored or not isinstance(inp, list) or chunk not in inp:
                        continue
                    if i == j and in_arg == out_arg and befores[i].get(in_arg) == afters[j].get(out_arg):
                        continue                  # the same buffer, untouched: no movement
                    moves.append((i, j, chunk))
        n_out = {i: sum(1 for m in moves if m[0] == i) for i in range(world_size)}
        n_in = {j: sum(1 for m in moves if m[1] == j) for j in range(world_size)}
        k_out = {i: 0 for i in range(world_size)}
        k_in = {j: 0 for j in range(world_size)}
        for i, j, chunk in moves:
            p = (start_x(i), mid_y(i) + spread(k_out[i], n_out[i]))
            q = (end_x, mid_y(j) + spread(k_in[j], n_in[j]))
            k_out[i] += 1
            k_in[j] += 1
            arrow(p, q, _darker(colors(chunk[0])))
    plt.close(fig)
    return fig


def save_png(fig: Figure, path: Path) -> None:
    """Deterministic PNG bytes (no software/time stamps), written atomically."""
    import io
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    atomic_write(Path(path), buffer.getvalue())


def write_images(out_dir: str | os.PathLike | None = None, world_size: int = 4,
                 collectives: Sequence[str] = LOCAL_DRAWINGS) -> list[Path]:
    """Write images/<collective>.png for our own drawings; returns the paths."""
    out = Path(out_dir) if out_dir is not None else IMAGES_DIR
    paths = []
    for name in collectives:
        path = out / f"{name}.png"
        save_png(draw_collective(name, world_size), path)
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    parser = argparse.ArgumentParser(description="Regenerate our own collective drawings.")
    parser.add_argument("--out", default=str(IMAGES_DIR), help="output folder (default: images/)")
    args = parser.parse_args(argv)
    for path in write_images(args.out):
        print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
