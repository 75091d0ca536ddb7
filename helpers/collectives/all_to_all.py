"""all_to_all as a matrix: what rank i sends to rank j, before and after the call.

    sent[i][j]      the chunk rank i sends to rank j   (input piece j of rank i)
    received[j][i]  the chunk rank j got from rank i   (output slot i of rank j)

all_to_all moves sent[i][j] into received[j][i]: the received matrix is the sent
matrix transposed. `plot_exchange(record)` draws both, coloured like
`plot_record`, and `is_transpose(record)` checks it.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers.checks import mark
from helpers.collectives import registry as collectives
from helpers.figures import panels
from helpers.formatting import format_value

CELL_FONT = 9.5
EXCHANGES = {  # collective: (what is sent, what is received)
    "all_to_all": ("input_tensor_list", "output_tensor_list"),
    "all_to_all_single": ("input", "output"),
}


def _ranks(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    if record.get("collective") not in EXCHANGES:
        raise ValueError(f"not an all_to_all record: {record.get('collective')!r}; "
                         f"known: {', '.join(EXCHANGES)}")
    return sorted(record["ranks"], key=lambda r: r["rank"])


def split_sizes(state: Mapping[str, Any], name: str, length: int, world_size: int) -> list[int]:
    """`name` (input_/output_split_sizes) from a rank's state, or the even split."""
    return collectives.split_sizes(
        state.get(name), name, length, world_size,
        uneven=f"{name} is None, so {length} elements must split evenly "
               f"over {world_size} ranks",
        wrong=f"{name} {{sizes}} must be {world_size} sizes adding up to {length}")


def _chunks(state: Mapping[str, Any], arg: str, sizes_name: str, world_size: int) -> list[list]:
    """A rank's buffer cut into one chunk per peer, each a flat list of values."""
    value = state.get(arg)
    if value is None:
        raise ValueError(f"the record has no {arg!r}")
    if isinstance(value, list) and arg.endswith("_list"):
        if len(value) != world_size:
            raise ValueError(f"{arg} has {len(value)} tensors, world_size is {world_size}")
        return [panels.flatten(v) for v in value]
    rows = value if isinstance(value, list) else [value]      # dim 0 of the tensor
    sizes = split_sizes(state, sizes_name, len(rows), world_size)
    out, start = [], 0
    for size in sizes:
        out.append(panels.flatten(rows[start:start + size]))
        start += size
    return out


def sent_matrix(record: Mapping[str, Any]) -> list[list[list]]:
    """sent[i][j]: the values rank i sends to rank j (from the 'before' states)."""
    ranks = _ranks(record)
    arg = EXCHANGES[record["collective"]][0]
    return [_chunks(r["before"], arg, "input_split_sizes", len(ranks)) for r in ranks]


def received_matrix(record: Mapping[str, Any]) -> list[list[list]]:
    """received[j][i]: the values rank j holds from rank i (from the 'after' states)."""
    ranks = _ranks(record)
    arg = EXCHANGES[record["collective"]][1]
    return [_chunks(r["after"], arg, "output_split_sizes", len(ranks)) for r in ranks]


def transpose(matrix: Sequence[Sequence[Any]]) -> list[list[Any]]:
    return [list(column) for column in zip(*matrix)]


def is_transpose(record: Mapping[str, Any]) -> bool:
    """True when received[j][i] == sent[i][j] for every pair of ranks."""
    return received_matrix(record) == transpose(sent_matrix(record))


def chunk_text(values: Sequence[Any], count: bool = True) -> str:
    """'12' for [12.0], '12 ×3' for three 12s (just '12' with count=False), '—' for
    nothing, else the values."""
    if not values:
        return "—"
    texts = [format_value(v) for v in values]
    if len(set(texts)) == 1:
        return texts[0] if len(texts) == 1 or not count else f"{texts[0]} ×{len(texts)}"
    return ",".join(texts) if len(texts) <= 3 else f"{texts[0]},…,{texts[-1]}"


def uniform_length(*matrices: Sequence[Sequence[Sequence[Any]]]) -> int | None:
    """The length every chunk has, or None when the lengths differ."""
    lengths = {len(c) for m in matrices for row in m for c in row}
    return lengths.pop() if len(lengths) == 1 else None


def _grid(ax, matrix, colors, title: str, row_label: str, col_label: str,
          cell_w: float, count: bool, tag: str) -> None:
    n = len(matrix)
    ax.set_xlim(-1.3, n * cell_w + 0.1)
    ax.set_ylim(n + 0.1, -2.1)
    ax.set_axis_off()
    ax.text(-1.3, -1.75, title, ha="left", va="center", fontsize=11, fontweight="bold")
    ax.text(n * cell_w / 2, -0.95, col_label, ha="center", va="center", fontsize=9,
            color="#555555", fontstyle="italic")
    ax.text(-1.05, n / 2, row_label, ha="center", va="center", rotation=90, fontsize=9,
            color="#555555", fontstyle="italic")
    fs = CELL_FONT if n <= 4 else CELL_FONT - 1
    for j in range(n):
        ax.text((j + 0.5) * cell_w, -0.3, str(j), ha="center", va="center", fontsize=9,
                color="#333333")
    for i, row in enumerate(matrix):
        ax.text(-0.25, i + 0.5, str(i), ha="right", va="center", fontsize=9, color="#333333")
        for j, chunk in enumerate(row):
            text = chunk_text(chunk, count)
            same = bool(chunk) and len({format_value(v) for v in chunk}) == 1
            face = colors(format_value(chunk[0])) if same else "white"
            ax.add_patch(Rectangle((j * cell_w, i), cell_w, 1, facecolor=face,
                                   edgecolor="#3a3a3a", linewidth=0.8,
                                   gid=f"{tag}[{i}][{j}]={text}"))
            ax.text((j + 0.5) * cell_w, i + 0.5, text, ha="center", va="center", fontsize=fs,
                    color=panels.text_color_for(face))


def plot_exchange(record: Mapping[str, Any], title: str | None = None) -> Figure:
    """Sent and received matrices side by side, cells coloured as in plot_record."""
    import matplotlib.pyplot as plt

    sent, received = sent_matrix(record), received_matrix(record)
    n = len(sent)
    length = uniform_length(sent, received)
    count = length is None
    colors = panels.record_colors(panels.build_panels(record))   # the same colours as plot_record
    longest = max(len(chunk_text(c, count)) for row in sent + received for c in row)
    unit = 0.42 if n <= 4 else 0.34                 # inches per matrix row
    font = CELL_FONT if n <= 4 else CELL_FONT - 1
    cell_w = max(1.0, (0.6 * font / 72 * longest + 0.14) / unit)   # the text fits its cell
    grid_w, grid_h = (n * cell_w + 1.4) * unit, (n + 2.2) * unit
    gap, margin, head = 1.2, 0.25, 0.85
    fig_w = max(2 * grid_w + gap + 2 * margin, 6.5)
    fig_h = head + grid_h + margin
    fig = plt.figure(figsize=(fig_w, fig_h), dpi=100)
    fig.patch.set_facecolor("white")
    verdict = mark(True) if received == transpose(sent) else "— NOT the transpose"
    heading = title or (f"{record['collective']} · world size {n} · "
                        f"received = sent transposed {verdict}")
    legend = (f"sent[i][j] lands in received[j][i] · every cell: {length} element(s) of that value"
              if length else "sent[i][j] lands in received[j][i] · v ×n: n elements of value v")
    fig.text(margin / fig_w, 1 - 0.28 / fig_h, heading, fontsize=12.5, fontweight="bold",
             ha="left", va="center")
    fig.text(margin / fig_w, 1 - 0.58 / fig_h, legend, fontsize=9, color="#555555",
             ha="left", va="center")
    box = lambda x: [x / fig_w, margin / fig_h, grid_w / fig_w, grid_h / fig_h]
    _grid(fig.add_axes(box(margin)), sent, colors, "sent (before)", "from rank i",
          "to rank j", cell_w, count, "sent")
    _grid(fig.add_axes(box(margin + grid_w + gap)), received, colors, "received (after)",
          "at rank j", "from rank i", cell_w, count, "received")
    fig.text((margin + grid_w + gap / 2) / fig_w, (margin + grid_h / 2) / fig_h, "→",
             ha="center", va="center", fontsize=22, color="#777777")
    plt.close(fig)
    return fig
