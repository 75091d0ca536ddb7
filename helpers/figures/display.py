"""Small display helpers: per-rank tables that render in JupyterLab, HTML and text."""
from __future__ import annotations

import html
from typing import Any, Sequence


class RankTable:
    """A table with one row per rank; `_repr_html_` for notebooks, `str` for text."""

    def __init__(self, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None):
        self.rows = list(rows)
        self.columns = list(columns or (self.rows[0].keys() if self.rows else []))

    def _cells(self) -> list[list[str]]:
        return [[str(row.get(col, "")) for col in self.columns] for row in self.rows]

    def __str__(self) -> str:
        cells = self._cells()
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(self.columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(self.columns, widths))]
        lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
        return "\n".join(line.rstrip() for line in lines)

    __repr__ = __str__

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>"
            for r in self._cells())
        return (f'<table class="rank-table"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>")


def rank_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> RankTable:
    """One row per rank, sorted by rank, showing `columns` (default: all keys)."""
    return RankTable(sorted(rows, key=lambda r: r.get("rank", 0)), columns)


def plot_barrier(timings: Sequence[dict[str, Any]]):
    """One bar per rank: working until it arrives at the barrier, then waiting in it."""
    import matplotlib.pyplot as plt

    rows = sorted(timings, key=lambda t: t["rank"])
    # Made through pyplot (so Jupyter knows how to show it), closed so it shows once.
    fig = plt.figure(figsize=(9, 0.5 * len(rows) + 1.5), dpi=100)
    plt.close(fig)
    ax = fig.add_subplot()
    for t in rows:
        ax.barh(t["rank"], t["arrived"], color="#9ecae1", edgecolor="#3182bd")
        ax.barh(t["rank"], t["left"] - t["arrived"], left=t["arrived"],
                color="#fdd0a2", edgecolor="#e6550d", hatch="//")
    last = max(t["arrived"] for t in rows)
    ax.axvline(last, color="#c2410c", linestyle="--")
    ax.set_yticks([t["rank"] for t in rows], [f"rank {t['rank']}" for t in rows])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the cell started")
    ax.legend(["last rank arrives", "working (sleep)", "waiting in dist.barrier()"],
              loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9, frameon=False)
    ax.set_title("dist.barrier(): nobody leaves before the last rank arrives")
    fig.tight_layout()
    return fig


def plot_ranks(rows: Sequence[dict[str, Any]]):
    """One box per rank, in rank order: what that rank reported of itself (its rank, the
    world size, backend and device, host and process id), so the boxes show what every
    rank shares (the world) and what is its own (rank, process)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    from helpers.training.schemes import rank_colour

    rows = sorted(rows, key=lambda r: r["rank"])
    n = len(rows)
    fig = plt.figure(figsize=(8.3, 2.5), dpi=100)
    plt.close(fig)
    ax = fig.add_axes((0, 0, 1, 0.86))
    ax.set_xlim(0, n)
    ax.set_ylim(0, 1)
    ax.axis("off")
    for k, row in enumerate(rows):
        r = row["rank"]
        ax.add_patch(FancyBboxPatch((k + 0.06, 0.04), 0.88, 0.9,
                                    boxstyle="round,pad=0,rounding_size=0.04",
                                    facecolor=rank_colour(r, True), edgecolor=rank_colour(r),
                                    lw=1.6, gid=f"rank:{r}"))
        ax.text(k + 0.5, 0.78, f"rank {r}", ha="center", va="center", fontsize=12,
                fontweight="bold", gid=f"rank-label:{r}")
        lines = [f"of {row['world size']} (world size)", f"{row['backend']} · {row['device']}",
                 f"host {row['host']}", f"pid {row['pid']}"]
        ax.text(k + 0.5, 0.38, "\n".join(lines), ha="center", va="center", fontsize=9.5,
                linespacing=1.5, gid=f"facts:{r}")
    fig.suptitle("what each engine reported: the same world, its own rank and process",
                 fontsize=11)
    return fig
