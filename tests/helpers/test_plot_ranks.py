"""helpers.figures.display.plot_ranks: a box per rank holding what that rank reported."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from helpers.figures.audit import audit          # noqa: E402
from helpers.figures.display import plot_ranks   # noqa: E402


def _row(rank: int, n: int = 3) -> dict:
    return {"rank": rank, "world size": n, "backend": "gloo", "device": "cpu",
            "host": "vm", "pid": 1000 + rank}


def test_each_box_holds_its_ranks_own_facts_in_rank_order():
    fig = plot_ranks([_row(2), _row(0), _row(1)])          # pulled in any order
    ax = fig.axes[0]
    boxes = {p.get_gid(): p.get_x() for p in ax.patches}
    assert sorted(boxes, key=boxes.get) == ["rank:0", "rank:1", "rank:2"]
    facts = {t.get_gid(): t.get_text() for t in ax.texts}
    assert facts["rank-label:1"] == "rank 1"
    assert facts["facts:2"].splitlines() == ["of 3 (world size)", "gloo · cpu", "host vm",
                                             "pid 1002"]


def test_the_boxes_read_at_1280_px_with_their_text_inside():
    found = audit(plot_ranks([_row(r, 4) for r in range(4)]))
    assert found.min_text_px >= 9 and not found.spills, found
