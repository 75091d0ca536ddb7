"""helpers.figures.no_checks: notebook 13's cases without the checks, and the checks' cost,
drawn from the outcomes they were given."""
from __future__ import annotations

import pytest
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from helpers.figures.no_checks import (KILLED, RAISED, RIGHT, TIMED_OUT, WRONG, ending,
                                       no_checks_text, plot_check_cost, plot_no_checks)
from helpers.runtime.disposable import RankOutcome

RESET = "RuntimeError: [pair.cc:537] Read error: Connection reset by peer."
TIMEOUT = "RuntimeError: [unbound_buffer.cc:129] Timed out waiting 5000ms for send"
OUTCOMES = {
    ("shape", 2): [RankOutcome(0, -6, stderr="[enforce fail at pair.cc:456] sizes"),
                   RankOutcome(1, 1, error=RESET, seconds=0.05)],
    ("shape", 3): [RankOutcome(0, 0, [2.0, 3.0, 2.0, 3.0], seconds=0.02),
                   RankOutcome(1, 1, error=TIMEOUT, seconds=5.03),
                   RankOutcome(2, 0, [3.0, 3.0, 3.0, 3.0], seconds=0.02)],
}


def right(n):
    return [float(n)] * 4


def test_each_rank_is_a_cell_coloured_and_worded_by_how_it_ended():
    fig = plot_no_checks(OUTCOMES, right)
    ax = fig.axes[0]
    cells = {(round(p.get_y()), int(p.get_x())): p.get_facecolor()
             for p in ax.patches if isinstance(p, Rectangle)}
    assert cells == {(0, 0): to_rgba(KILLED), (0, 1): to_rgba(RAISED),
                     (1, 0): to_rgba(WRONG), (1, 1): to_rgba(TIMED_OUT), (1, 2): to_rgba(RIGHT)}
    words = {(int(t.get_position()[1]), int(t.get_position()[0])): t.get_text()
             for t in ax.texts}
    assert words == {(0, 0): "SIGABRT", (0, 1): "raised 0.05 s", (1, 0): "[2, 3, 2, 3]",
                     (1, 1): "timed out 5.03 s", (1, 2): "[3, 3, 3, 3]"}
    assert [t.get_text() for t in ax.get_yticklabels()] == ["shape differs · 2 ranks",
                                                            "shape differs · 3 ranks"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["rank 0", "rank 1", "rank 2"]


def test_the_text_is_every_ranks_summary_case_by_case():
    text = no_checks_text(OUTCOMES).splitlines()
    assert text[0] == "shape differs, 2 ranks, no checks:"
    assert text[1].startswith("rank 0: killed by SIGABRT") and len(text) == 2 + 2 + 3
    assert ending(RankOutcome(0, None), right(2)) == (KILLED, "still running")


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_cost_bars_are_the_measured_microseconds(ranks):
    without, with_checks = [100.0 + r for r in range(ranks)], [600.0 + r for r in range(ranks)]
    ax = plot_check_cost({False: without, True: with_checks}).axes[0]
    widths = [p.get_width() for p in ax.patches]
    assert widths == without + with_checks
    assert [t.get_text() for t in ax.texts] == [f"{v:,.0f} µs" for v in without + with_checks]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "without the checks", "with the checks (DETAIL)"]
