"""Notebook 13's picture: a row per failed cell, a column per rank, coloured by verdict."""
from __future__ import annotations

import pytest
from matplotlib.patches import Rectangle

from helpers.figures.diagnoses import (FAILED_LOST, FAILED_USABLE, FINE, NEVER, label,
                                       plot_diagnoses)

MISMATCH = {"failed": [{"rank": r, "meaning": "the ranks called the collective with different "
                        "arguments (shape, dtype or op: see TensorShape/TensorDtypes below)",
                        "survives": True} for r in range(4)], "skipped": [], "absent": []}
ONLY_RANK_0 = {"failed": [{"rank": 0, "meaning": "some ranks never reached this collective",
                           "survives": False}], "skipped": [1, 2, 3], "absent": []}
DIED = {"failed": [{"rank": 0, "meaning": "some ranks never reached this collective",
                    "survives": False},
                   {"rank": 3, "meaning": "its engine process died (re-run the start cell for "
                    "a full set of ranks)", "survives": False}], "skipped": [], "absent": []}


@pytest.mark.parametrize("world_size", [2, 4])
def test_each_rank_of_each_failed_cell_has_its_colour(world_size):
    fig = plot_diagnoses([MISMATCH, ONLY_RANK_0, DIED], world_size)
    ax = fig.axes[0]
    cells = {(round(p.get_y()), int(p.get_x())): p.get_facecolor()
             for p in ax.patches if isinstance(p, Rectangle)}
    assert len(cells) == 3 * world_size
    from matplotlib.colors import to_rgba

    assert cells[0, 1] == to_rgba(FAILED_USABLE)           # a mismatch: the group survives
    assert cells[1, 0] == to_rgba(FAILED_LOST) and cells[1, 1] == to_rgba(NEVER)
    assert cells[2, 1] == to_rgba(FINE) and cells[2, 0] == to_rgba(FAILED_LOST)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["1 · the ranks called the collective with differ…",
                      "2 · some ranks never reached this collective",
                      "3 · some ranks never reached this collective"]


def test_the_label_names_the_rank_that_did_more_than_wait_or_die():
    assert label(3, DIED) == "3 · some ranks never reached this collective"
    assert label(1, {"failed": [DIED["failed"][1]]}) == "1 · its engine process died"
    with pytest.raises(ValueError, match="no diagnosis"):
        plot_diagnoses([], 4)
