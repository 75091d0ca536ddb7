"""Our own drawings of the collectives: the offline fallback of helpers.figures.diagrams.

Computed from `helpers.collectives.models` (example inputs and the expected result), so they cannot
disagree with the model. Regenerate images/ with

    make images   (or: python -m helpers.figures.drawings)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.colors as mcolors
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

from helpers.figures import panels
from helpers.collectives.registry import ALIASES, IO_ARGS, LIST_ARGS, REDUCING, ROOT
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
    if arg in LIST_ARGS:
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


# Geometry of a drawing, in drawing units (one cell = 1.0; 0.36 inch per unit).
CELL, GAP, PAD, PITCH, HEADER, UNIT = 1.0, 0.3, 0.18, 1.75, 1.5, 0.36
TOP_IN, BOTTOM_IN = 0.95, 0.35


def _width(chunks: Any) -> float:
    """A buffer's box: its cells, the gaps between chunks, the padding."""
    if not isinstance(chunks, list) or not chunks:
        return 2.8
    return sum(len(c) for c in chunks) * CELL + (len(chunks) - 1) * GAP + 2 * PAD


def _row_y(rank: int) -> float:
    return HEADER + rank * PITCH


def _mid_y(rank: int) -> float:
    return _row_y(rank) + PAD + CELL / 2


def _spread(k: int, n: int) -> float:
    """Offset of the k-th of n arrows leaving (or reaching) one box."""
    return (k - (n - 1) / 2) * min(0.22, 0.9 / max(n, 1))


class _Schematic:
    """One drawing: the model's states of every rank, laid out before → after."""

    def __init__(self, name: str, world_size: int, params: Mapping[str, Any] | None):
        self.name, self.world_size = name, world_size
        self.befores, self.afters, self.params = model_states(name, world_size, params)
        self.in_arg, self.out_arg = IO_ARGS[name]
        self.root_key = ROOT.get(name)
        self.root = self.params.get(self.root_key) if self.root_key else None
        self.ignored = {r for r in range(world_size)          # buffers that only receive
                        if (name == "broadcast" and r != self.params.get("src"))
                        or (name == "send_recv" and r == 1)}
        self.ins = [_chunks(b.get(self.in_arg), self.in_arg) for b in self.befores]
        self.outs = [_chunks(a.get(self.out_arg), self.out_arg) for a in self.afters]
        self.colors = panels.ValueColors()
        for chunks in self.ins + self.outs:
            if isinstance(chunks, list):
                for chunk in chunks:
                    for text in chunk:
                        self.colors.add(text)
        self.labels = [_rank_label(name, r, self.root, self.root_key) for r in range(world_size)]
        self.sums = (_reduction_terms(name, self.ins, self.outs, self.params)
                     if name in REDUCING else {})
        # x positions: labels | before boxes | the zone of arrows | after boxes | labels | sums
        self.label_w = 0.27 * max(len(t) for t in self.labels) + 0.7
        note_w = (0.21 * max((len(t) for t in self.sums.values()), default=0) + 0.6
                  if self.sums else 0.0)
        self.bw = max(_width(c) for c in self.ins)
        self.aw = max(_width(c) for c in self.outs)
        self.zone = 5.5 if world_size <= 4 else 7.0
        self.bx, self.ax0 = self.label_w, self.label_w + self.bw + self.zone
        self.total_w = self.ax0 + self.aw + self.label_w + note_w
        self.total_h = HEADER + world_size * PITCH + 0.2

    def figure(self) -> Figure:
        import matplotlib.pyplot as plt

        fig_h = self.total_h * UNIT + TOP_IN + BOTTOM_IN
        fig = plt.figure(figsize=(self.total_w * UNIT, fig_h), dpi=100)
        self.ax = fig.add_axes([0, BOTTOM_IN / fig_h, 1, self.total_h * UNIT / fig_h])
        self.ax.set_xlim(0, self.total_w)
        self.ax.set_ylim(self.total_h, 0)
        self.ax.set_axis_off()
        self.ax.set_gid("schematic")
        self._titles(fig, fig_h)
        for r in range(self.world_size):
            self._rank_row(r)
        if self.name in REDUCING:
            self._reduction_arrows()
        else:
            self._movement_arrows()
        plt.close(fig)
        return fig

    def _titles(self, fig: Figure, fig_h: float) -> None:
        name, ax = self.name, self.ax
        title = ("send / recv" if name == "send_recv"
                 else panels.call_signature(name, dict(self.params.items())))
        fig.text(0.02, 1 - 0.3 / fig_h, title, fontsize=15, fontweight="bold", va="center")
        fig.text(0.02, 1 - 0.65 / fig_h, SUMMARY[name], fontsize=9.5, color="#444444",
                 va="center")
        fig.text(0.98, 0.14 / fig_h,
                 f"nccl-notebooks · drawn from helpers.collectives.models · {REGENERATE}",
                 fontsize=7, color="#9a9a9a", ha="right", va="center")
        for x, text in ((self.bx + self.bw / 2, f"before · {self.in_arg}"),
                        (self.ax0 + self.aw / 2, f"after · {self.out_arg}")):
            ax.text(x, 0.6, text, ha="center", va="center", fontsize=10.5,
                    fontstyle="italic", color="#333333")

    def _rank_row(self, r: int) -> None:
        ax = self.ax
        self._box(self.bx, r, self.ins[r], r in self.ignored)
        self._box(self.ax0, r, self.outs[r], False)
        for x, ha in ((self.bx - 0.3, "right"), (self.ax0 + self.aw + 0.3, "left")):
            ax.text(x, _mid_y(r), self.labels[r], ha=ha, va="center", fontsize=10.5,
                    fontweight="bold",
                    color=panels.ROOT_COLOR if r == self.root else "#222222")
        if r in self.sums:
            ax.text(self.ax0 + self.aw + self.label_w + 0.1, _mid_y(r), self.sums[r],
                    ha="left", va="center", fontsize=9.5, color="#555555")
        if r in self.ignored:
            ax.text(self.bx + _width(self.ins[r]) + 0.15, _mid_y(r), "overwritten",
                    fontsize=8, fontstyle="italic", color="#888888", va="center")

    def _box(self, x: float, rank: int, chunks: Any, faded: bool) -> None:
        ax, y, w = self.ax, _row_y(rank), _width(chunks)
        is_root = rank == self.root
        if chunks is None or chunks == "undefined":
            undefined = chunks == "undefined"
            ax.add_patch(FancyBboxPatch(
                (x, y), w, CELL + 2 * PAD, boxstyle="round,pad=0,rounding_size=0.15",
                facecolor=panels.UNDEFINED_FACE if undefined else "white",
                edgecolor="#a0a0a0", hatch="////" if undefined else None,
                linestyle="-" if undefined else (0, (3, 3)), linewidth=1.0))
            ax.text(x + w / 2, y + PAD + CELL / 2, "undefined" if undefined else "None",
                    ha="center", va="center", fontsize=9.5, fontstyle="italic",
                    color="#666666", bbox=dict(boxstyle="round,pad=0.15", fc="white",
                                               ec="none") if undefined else None)
            return
        ax.add_patch(FancyBboxPatch(
            (x, y), w, CELL + 2 * PAD, boxstyle="round,pad=0,rounding_size=0.15",
            facecolor=panels.ROOT_FACE if is_root else "#f7f7f7",
            edgecolor=panels.ROOT_COLOR if is_root else "#7a7a7a",
            linewidth=1.8 if is_root else 1.0))
        cx = x + PAD
        for chunk in chunks:
            for text in chunk:
                face = self.colors(text)
                ax.add_patch(Rectangle((cx, y + PAD), CELL, CELL, facecolor=face,
                                       edgecolor="#333333", linewidth=0.8,
                                       alpha=0.35 if faded else 1.0))
                ax.text(cx + CELL / 2, y + PAD + CELL / 2, text, ha="center", va="center",
                        fontsize=10, color=panels.text_color_for(face),
                        alpha=0.45 if faded else 1.0)
                cx += CELL
            cx += GAP

    def _arrow(self, p: tuple[float, float], q: tuple[float, float], color: Any) -> None:
        self.ax.add_patch(FancyArrowPatch(p, q, arrowstyle="-|>,head_length=5,head_width=2.6",
                                          color=color, linewidth=1.5, shrinkA=0, shrinkB=0,
                                          alpha=0.9, zorder=3))

    def _start_x(self, r: int) -> float:
        return self.bx + _width(self.ins[r]) + (0.1 if r not in self.ignored else 1.4)

    def _reduction_arrows(self) -> None:
        """Every input into the op node; the node into every rank that gets the result."""
        n, end_x = self.world_size, self.ax0 - 0.12
        node = (self.bx + self.bw + self.zone / 2, HEADER + (n - 1) * PITCH / 2 + PAD + CELL / 2)
        self.ax.add_patch(Circle(node, 0.85, facecolor="white", edgecolor="#333333",
                                 linewidth=1.5, zorder=4))
        self.ax.text(*node, str(self.params.get("op", "SUM")), ha="center", va="center",
                     fontsize=10, fontweight="bold", zorder=5)
        for r in range(n):
            ins, outs = self.ins[r], self.outs[r]
            first = ins[0][0] if isinstance(ins, list) and len(ins) == 1 else None
            color = _darker(self.colors(first)) if first else "#777777"
            self._arrow((self._start_x(r), _mid_y(r)),
                        (node[0] - 0.9, node[1] + _spread(r, n) * 2), color)
            if isinstance(outs, list):
                self._arrow((node[0] + 0.9, node[1] + _spread(r, n) * 2), (end_x, _mid_y(r)),
                            _darker(self.colors(outs[0][0])))

    def _moves(self) -> list[tuple[int, int, list[str]]]:
        """(from rank, to rank, chunk) for every chunk that lands in another buffer."""
        moves = []
        for j, out in enumerate(self.outs):
            if not isinstance(out, list):
                continue
            for chunk in out:
                for i, inp in enumerate(self.ins):
                    if i in self.ignored or not isinstance(inp, list) or chunk not in inp:
                        continue
                    if (i == j and self.in_arg == self.out_arg and
                            self.befores[i].get(self.in_arg) == self.afters[j].get(self.out_arg)):
                        continue                  # the same buffer, untouched: no movement
                    moves.append((i, j, chunk))
        return moves

    def _movement_arrows(self) -> None:
        moves, ranks = self._moves(), range(self.world_size)
        n_out = {i: sum(1 for m in moves if m[0] == i) for i in ranks}
        n_in = {j: sum(1 for m in moves if m[1] == j) for j in ranks}
        k_out, k_in = dict.fromkeys(ranks, 0), dict.fromkeys(ranks, 0)
        for i, j, chunk in moves:
            self._arrow((self._start_x(i), _mid_y(i) + _spread(k_out[i], n_out[i])),
                        (self.ax0 - 0.12, _mid_y(j) + _spread(k_in[j], n_in[j])),
                        _darker(self.colors(chunk[0])))
            k_out[i] += 1
            k_in[j] += 1


def draw_collective(collective: str, world_size: int = 4,
                    params: Mapping[str, Any] | None = None) -> Figure:
    """Our schematic: each rank's input before (left), output after (right),
    arrows for the data movement (through an `op` node for reductions)."""
    name = ALIASES.get(collective, collective)
    return _Schematic(name, 2 if name == "send_recv" else world_size, params).figure()


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
