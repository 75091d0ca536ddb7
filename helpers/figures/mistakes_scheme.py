"""Notebook 13's scheme: the mistakes its sections run, and what each rank gets from each,
drawn from the notebook's own taxonomy (not from a run), in the verdict colours of its
last figure (helpers.figures.diagnoses: red, raised and the group is lost; orange, raised
and the group is still usable; grey, never reached the collective).

`mistakes(world_size)` is the table; `ROW_OF_DIAGNOSIS` maps each diagnosis the notebook
records (helpers.runtime.diagnose.history, in cell order) to its row, so a test can hold
the table against an executed run. Cells carry gids ("cell:<row>:<rank>", "after:<row>").
"""
from __future__ import annotations

from dataclasses import dataclass

from matplotlib.figure import Figure

from helpers.figures.diagnoses import FAILED_LOST, FAILED_USABLE, NEVER
from helpers.training.schemes import INK, MUTED, SMALL, Canvas

AT_ONCE, AT_TIMEOUT = "✗ at once", "✗ timed out"
NEVER_CALLED, DIED, PEER_GONE = "– never called", "✗ died", "✗ closed or\ntimed out"


@dataclass(frozen=True)
class Mistake:
    """One row: the notebook's section(s), the mistake, each rank's (colour, words)."""

    sections: str
    what: str
    ranks: tuple[tuple[str, str], ...]

    @property
    def group_usable(self) -> bool:
        return all(colour != FAILED_LOST for colour, _ in self.ranks)


# the diagnoses 13 records, in order: shape, dtype, all_gather shape, src, scatter_list,
# --targets 0, a dead rank
ROW_OF_DIAGNOSIS = (0, 0, 0, 1, 2, 3, 4)


def mistakes(world_size: int = 4) -> list[Mistake]:
    """The rows, as sections 1–6 of notebook 13 run them with the DETAIL checks on."""
    if world_size < 2:
        raise ValueError(f"a mistake between ranks needs 2+ ranks, not {world_size}")
    ranks = range(world_size)
    last = world_size - 1
    return [
        Mistake("1–2", "shapes or dtypes differ",
                tuple((FAILED_USABLE, AT_ONCE) for _ in ranks)),
        Mistake("3", "src is not a rank", tuple((FAILED_USABLE, AT_ONCE) for _ in ranks)),
        Mistake("4", "scatter_list one tensor short",
                tuple((FAILED_LOST, AT_ONCE if r == 0 else AT_TIMEOUT) for r in ranks)),
        Mistake("5", "only rank 0 calls all_reduce",
                tuple((FAILED_LOST, AT_TIMEOUT) if r == 0 else (NEVER, NEVER_CALLED)
                      for r in ranks)),
        Mistake("6", f"rank {last} (the last) dies",
                tuple((FAILED_LOST, DIED if r == last else PEER_GONE) for r in ranks)),
    ]


def draw_mistakes(world_size: int = 4) -> Figure:
    """One row per mistake, one column per rank: what the rank got, coloured by what
    happened to the group; on the right, what to do next."""
    if not 3 <= world_size <= 5:       # the labels fit these widths (tests: the audit)
        raise ValueError(f"drawn for 3 to 5 ranks, not {world_size}")
    rows = mistakes(world_size)
    label_w, pitch, cw, rh, top = 5.9, 2.4, 2.3, 0.86, 0.8
    after_x = label_w + world_size * pitch + 0.15
    width = label_w + max(world_size, 4) * pitch + 0.15 + 2.35
    legend_y = top + len(rows) * rh + 0.4
    c = Canvas(width, legend_y + 0.35,
               f"The mistakes of this page, rank by rank ({world_size} ranks, gloo)",
               "with the DETAIL checks on; each row is a section below, run for real")
    for r in range(world_size):
        c.text(label_w + r * pitch + cw / 2, top - 0.4, f"rank {r}", bold=True)
    c.text(after_x + 0.1, top - 0.4, "the group", bold=True, ha="left")
    for i, row in enumerate(rows):
        y = top + i * rh
        c.text(0.15, y + rh / 2, f"{row.sections} · {row.what}", ha="left")
        for r, (colour, words) in enumerate(row.ranks):
            c.box(label_w + r * pitch, y + 0.05, cw, rh - 0.1, face=colour, edge="white",
                  gid=f"cell:{i}:{r}")
            c.text(label_w + r * pitch + cw / 2, y + rh / 2, words, size=SMALL,
                   colour="white" if colour == FAILED_LOST else INK,
                   bold=colour != NEVER)
        c.text(after_x + 0.1, y + rh / 2, "still usable" if row.group_usable else
               "lost: restart", ha="left", size=SMALL,
               colour=MUTED if row.group_usable else FAILED_LOST, gid=f"after:{i}")
    x = 0.15
    for colour, words in ((FAILED_LOST, "raised: group lost"),
                          (FAILED_USABLE, "raised: group usable"),
                          (NEVER, "never reached it")):
        c.box(x, legend_y - 0.22, 0.44, 0.44, face=colour, edge="white", gid=f"key:{colour}")
        c.text(x + 0.6, legend_y, words, size=SMALL, ha="left")
        x += 4.6
    return c.fig
