"""Our own drawings of the collectives: the offline fallback of helpers.figures.diagrams.

Computed from `helpers.collectives.models` (example inputs and the expected result), so they cannot
disagree with the model. Regenerate images/ with

    make images   (or: python -m helpers.figures.drawings)

Used by notebooks 01-10 and 12 through `load_diagram` when the upstream diagram is out
of reach.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.colors as mcolors
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

from helpers.figures import panels
from helpers.collectives.registry import ALIASES, IO_ARGS, REDUCING
from helpers.paths import REPO_ROOT
from helpers.formatting import format_value
from helpers.runtime.files import atomic_write

IMAGES_DIR = REPO_ROOT / "images"
REGENERATE = "make images"
LOCAL_DRAWINGS = ("scatter", "gather", "broadcast", "reduce", "all_reduce", "all_gather",
                  "reduce_scatter", "all_to_all", "send_recv")

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
    from helpers.collectives import examples
    befores = examples.example_befores(collective, world_size, params, size=size)
    afters = examples.model_after(collective, befores, params)
    return befores, afters, params


def _chunks(value: Any, arg: str) -> list[list[str]] | None | str:
    """A buffer as chunks of cell texts; None = not passed; "undefined"."""
    if value is None:
        return None
    if panels.is_unspecified(value):
        return "undefined"
    if arg in panels.LIST_ARGS:
        return [[format_value(v) for v in panels.flatten(x)] for x in value]
    return [[format_value(v) for v in panels.flatten(value)]]


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

    name = ALIASES.get(collective, collective)
    if name == "send_recv":
        world_size = 2
    befores, afters, params = model_states(name, world_size, params)
    in_arg, out_arg = IO_ARGS[name]
    root_key = panels.ROOT_PARAM.get(name)
    root = params.get(root_key) if root_key else None
    ignored = {r for r in range(world_size)          # buffers that only receive
               if (name == "broadcast" and r != params.get("src")) or (name == "send_recv" and r == 1)}
    ins = [_chunks(b.get(in_arg), in_arg) for b in befores]
    outs = [_chunks(a.get(out_arg), out_arg) for a in afters]
    colors = panels.ValueColors()
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

    title = panels.call_signature(name, {k: v for k, v in params.items() if name != "send_recv"})
    if name == "send_recv":
        title = "send / recv"
    fig.text(0.02, 1 - 0.3 / fig_h, title, fontsize=15, fontweight="bold", va="center")
    fig.text(0.02, 1 - 0.65 / fig_h, SUMMARY[name], fontsize=9.5, color="#444444", va="center")
    fig.text(0.98, 0.14 / fig_h, f"nccl-notebooks · drawn from helpers.collectives.models · {REGENERATE}",
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
        frame = panels.ROOT_COLOR if is_root else "#7a7a7a"
        if chunks is None or chunks == "undefined":
            undefined = chunks == "undefined"
            ax.add_patch(FancyBboxPatch(
                (x, y), w, cell + 2 * pad - 0.0, boxstyle="round,pad=0,rounding_size=0.15",
                facecolor=panels.UNDEFINED_FACE if undefined else "white", edgecolor="#a0a0a0",
                hatch="////" if undefined else None, linestyle="-" if undefined else (0, (3, 3)),
                linewidth=1.0))
            ax.text(x + w / 2, y + pad + cell / 2, "undefined" if undefined else "None",
                    ha="center", va="center", fontsize=9.5, fontstyle="italic", color="#666666",
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none") if undefined else None)
            return
        ax.add_patch(FancyBboxPatch((x, y), w, cell + 2 * pad, boxstyle="round,pad=0,rounding_size=0.15",
                                    facecolor=panels.ROOT_FACE if is_root else "#f7f7f7",
                                    edgecolor=frame, linewidth=1.8 if is_root else 1.0))
        cx = x + pad
        for chunk in chunks:
            for text in chunk:
                face = colors(text)
                ax.add_patch(Rectangle((cx, y + pad), cell, cell, facecolor=face, edgecolor="#333333",
                                       linewidth=0.8, alpha=0.35 if faded else 1.0))
                ax.text(cx + cell / 2, y + pad + cell / 2, text, ha="center", va="center",
                        fontsize=10, color=panels.text_color_for(face), alpha=0.45 if faded else 1.0)
                cx += cell
            cx += gap

    def rank_label(x: float, rank: int, ha: str) -> None:
        ax.text(x, row_y(rank) + pad + cell / 2, labels[rank], ha=ha, va="center", fontsize=10.5,
                fontweight="bold", color=panels.ROOT_COLOR if rank == root else "#222222")

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
