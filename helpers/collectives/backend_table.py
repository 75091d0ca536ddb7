"""torch's documented table of which functions each backend offers per device, as data, and
notebook 12's scheme drawn from it (`draw_backend_table`).

The table is torch's documentation, not a measurement: notebook 12 probes the backend in use
(dtypes and ops included, which the table does not list). Every cell of a drawn table has a
gid "cell:<function>:<backend>:<device>:<mark>", so the tests read the drawing.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

SOURCE = ("torch's documentation, Distributed communication package, section Backends "
          "(https://docs.pytorch.org/docs/stable/distributed.html#backends; "
          "docs/source/distributed.md in pytorch/pytorch at commit 0015d6b)")

# Copied cell by cell from that section's table (SOURCE): "✓" available, "✘" not, "?" MPI
# on GPUs, "only if the implementation used to build PyTorch supports it" (its text above
# the table). Its xccl columns (Intel GPUs) are left out: no notebook of the series runs it.
COLUMNS: tuple[tuple[str, str], ...] = (("gloo", "CPU"), ("gloo", "GPU"), ("mpi", "CPU"),
                                        ("mpi", "GPU"), ("nccl", "CPU"), ("nccl", "GPU"))
DOCUMENTED: dict[str, str] = {        # one mark per column, in COLUMNS' order
    "send":           "✓✘✓?✘✓",
    "recv":           "✓✘✓?✘✓",
    "broadcast":      "✓✓✓?✘✓",
    "all_reduce":     "✓✓✓?✘✓",
    "reduce":         "✓✓✓?✘✓",
    "all_gather":     "✓✓✓?✘✓",
    "gather":         "✓✓✓?✘✓",
    "scatter":        "✓✓✓?✘✓",
    "reduce_scatter": "✓✓✘✘✘✓",
    "all_to_all":     "✓✓✓?✘✓",
    "barrier":        "✓✘✓?✘✓",
}
MEANING = {"✓": "available", "✘": "not available",
           "?": "only if the MPI library torch was built with supports CUDA"}
FILL = {"✓": "#bbf7d0", "✘": "#fecaca", "?": "#fef3c7"}
SERIES = (("gloo", "CPU"), ("nccl", "GPU"))   # what start_cluster's backend="auto" picks
INK, MUTED, OUTLINE = "#222222", "#555555", "#c2410c"
FONT, SMALL = 10.0, 9.5


def documented(function: str, backend: str, device: str) -> str:
    """The table's mark ("✓", "✘" or "?") for one function, backend and device."""
    if function not in DOCUMENTED:
        raise ValueError(f"{function!r} is not in torch's table; it lists "
                         f"{', '.join(DOCUMENTED)}")
    if (backend, device) not in COLUMNS:
        raise ValueError(f"no column {backend} {device}; the columns: "
                         f"{', '.join(f'{b} {d}' for b, d in COLUMNS)}")
    return DOCUMENTED[function][COLUMNS.index((backend, device))]


def draw_backend_table() -> Figure:
    """torch's documented table as a grid, function × (backend, device), each cell
    coloured by its mark; the two columns backend="auto" picks are outlined."""
    import matplotlib.pyplot as plt

    functions = list(DOCUMENTED)
    cell_w, label_w, head = 1.0, 1.55, 1.6        # in rows' heights
    grid_w = label_w + cell_w * len(COLUMNS)
    height = head + len(functions)
    fig = plt.figure(figsize=(10, 3.1), dpi=100)
    ax = fig.add_axes([0.0, 0.0, 0.56, 0.86])
    ax.set_xlim(0, grid_w)
    ax.set_ylim(height, 0)
    ax.set_axis_off()
    for j, (backend, device) in enumerate(COLUMNS):
        x = label_w + j * cell_w
        if device == "CPU":
            ax.text(x + cell_w, 0.45, backend, ha="center", va="center", fontsize=FONT,
                    fontweight="bold", color=INK)
        ax.text(x + cell_w / 2, 1.15, device, ha="center", va="center", fontsize=SMALL,
                color=MUTED)
    for i, function in enumerate(functions):
        y = head + i
        ax.text(label_w - 0.1, y + 0.5, function, ha="right", va="center", fontsize=SMALL,
                color=INK)
        for j, column in enumerate(COLUMNS):
            mark = documented(function, *column)
            x = label_w + j * cell_w
            ax.add_patch(Rectangle((x, y), cell_w, 1, facecolor=FILL[mark], edgecolor="white",
                                   linewidth=1.5, gid=f"cell:{function}:{column[0]}:"
                                   f"{column[1]}:{mark}"))
            ax.text(x + cell_w / 2, y + 0.5, mark, ha="center", va="center", fontsize=FONT,
                    color=INK)
    for column in SERIES:
        x = label_w + COLUMNS.index(column) * cell_w
        ax.add_patch(Rectangle((x, head), cell_w, len(functions), facecolor="none",
                               edgecolor=OUTLINE, linewidth=2.2, zorder=3,
                               gid=f"series:{column[0]}:{column[1]}"))

    key = [f"{mark}  {MEANING[mark]}" for mark in ("✓", "✘", "?")]
    notes = [*key, "",
             'outlined: what backend="auto" picks,',
             "gloo on CPUs, NCCL on GPUs",
             "",
             "The table lists functions only:",
             "which dtypes and reduction ops",
             "a backend accepts, it does not say.",
             "This page probes them on its ranks."]
    for k, line in enumerate(notes):
        fig.text(0.58, 0.80 - k * 0.068, line, fontsize=SMALL,
                 color=OUTLINE if line.startswith(("outlined", "gloo on")) else INK)
    fig.suptitle("torch's documentation (not measured): which functions each backend "
                 "offers, per device", fontsize=FONT + 0.5, fontweight="bold", x=0.01,
                 ha="left", y=0.98)
    plt.close(fig)
    return fig
