"""Notebook 12's survey as pictures: a table of helpers.collectives.support_tables drawn as a
grid, one coloured cell per case (the table's mark in it), the errors printed under it.

`plot_support(table)` draws the grid; `show_support(table)` shows it and prints the errors
the cells number ("no (3)" is error (3)), as the table's legend words them.
"""
from __future__ import annotations

from typing import Any

from helpers.collectives.support_tables import SupportTable
from helpers.figures.column import COLUMN_IN

# status → (fill, meaning in the legend); the fills are the tables' hues, stronger
STATUS = {"ok": ("#a6dba0", "✓ accepted, matches the model"),
          "refused": ("#d0d5dd", "no: refused on every rank"),
          "wrong": ("#f97066", "WRONG: accepted, not the model"),
          "unchecked": ("#fde272", "?: accepted, no model"),
          "split": ("#fdb022", "split: the ranks disagree")}
CHANGED = "no*: raised, buffers already changed"
ROW_IN, HEADER_IN = 0.25, 0.3     # a case's row; a group's name above its rows


def layout(table: SupportTable) -> tuple[list[tuple[float, str, list]], list[tuple[float, str]]]:
    """([(y, row label, cases)], [(y, group name)]): where each row and group name goes, in
    rows from the top. A table with two label columns (collective, op) names each group of
    collectives once, above its rows; the row is labelled by its last label."""
    rows, groups, y = [], [], 0.0
    for labels, cases in table.rows:
        if len(labels) > 1 and labels[0]:
            groups.append((y + HEADER_IN / ROW_IN / 2, labels[0]))
            y += HEADER_IN / ROW_IN
        rows.append((y, labels[-1], cases))
        y += 1
    return rows, groups


def plot_support(table: SupportTable):
    """The table as a grid: a row per row of the table, a column per dtype, each case
    coloured by its status and marked as the table marks it."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    rows, groups = layout(table)
    dtypes = table.columns[-len(rows[0][2]):]
    height = (rows[-1][0] + 1) * ROW_IN
    fig = plt.figure(figsize=(COLUMN_IN, height + 1.2), dpi=100)
    plt.close(fig)                       # made through pyplot so Jupyter shows it, once
    ax = fig.add_axes((0.19, 0.6 / (height + 1.2), 0.8, height / (height + 1.2)))
    seen = []
    for y, _, cases in rows:
        for x, case in enumerate(cases):
            if case is None:
                continue
            status = case["status"]
            seen += [status] if status not in seen else []
            changed = bool(case.get("changed"))   # "no*": it raised after changing buffers
            seen += ["changed"] if changed and "changed" not in seen else []
            ax.add_patch(Rectangle((x + 0.04, y + 0.06), 0.92, 0.88, facecolor=STATUS[status][0],
                                   edgecolor="white", hatch="///" if changed else None))
            ax.text(x + 0.5, y + 0.5, table.cell(case), ha="center", va="center", fontsize=9)
    for y, name in groups:
        ax.text(0.04, y, name, ha="left", va="center", fontsize=10, fontweight="bold")
    ax.set_xlim(0, len(dtypes))
    ax.set_ylim(rows[-1][0] + 1, 0)
    ax.set_xticks([x + 0.5 for x in range(len(dtypes))], dtypes, fontsize=9)
    ax.set_yticks([y + 0.5 for y, _, _ in rows], [label for _, label, _ in rows], fontsize=9)
    ax.tick_params(length=0)
    ax.xaxis.tick_top()
    for side in ax.spines.values():
        side.set_visible(False)
    ax.legend(handles=[Patch(facecolor="white", edgecolor="#667085", hatch="///", label=CHANGED)
                       if s == "changed" else Patch(facecolor=STATUS[s][0], label=STATUS[s][1])
                       for s in seen],
              loc="upper center", bbox_to_anchor=(0.42, -0.01), ncol=min(len(seen), 3),
              fontsize=9, frameon=False)
    ax.set_title(f"{table.title}: this run's cases", fontsize=11, pad=22)
    return fig


def show_support(table: SupportTable) -> Any:
    """Show the grid, then print the errors its cells number (nothing when none)."""
    from IPython.display import display

    fig = plot_support(table)
    display(fig)
    if table.legend():
        print("\n".join(table.legend()))
    return None
