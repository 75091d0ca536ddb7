"""Notebook 13's scheme (helpers.figures.mistakes_scheme): a row per mistake of its sections,
a cell per rank in the verdict colours of helpers.figures.diagnoses; read from the drawing's
gids, at 3, 4 and 5 ranks, audited, and held against the notebook's own headings. The
executed notebook's diagnoses are held against the same table in
tests/notebooks/test_13_debugging.py."""
from __future__ import annotations

import json
import re

import matplotlib.colors as mcolors
import pytest
from matplotlib.text import Text

from conftest import NOTEBOOKS
from helpers.figures.audit import audit
from helpers.figures.diagnoses import FAILED_LOST, FAILED_USABLE, FINE, NEVER, verdict
from helpers.figures.mistakes_scheme import (AT_ONCE, AT_TIMEOUT, DIED, NEVER_CALLED,
                                             PEER_GONE, ROW_OF_DIAGNOSIS, draw_mistakes,
                                             mistakes)

NB = NOTEBOOKS / "13_debugging.ipynb"


def by_gid(fig) -> dict:
    return {a.get_gid(): a for ax in fig.axes for a in ax.get_children() if a.get_gid()}


def same_colour(a, b) -> bool:
    return mcolors.to_hex(a) == mcolors.to_hex(b)


def headings() -> dict[str, str]:
    """Section number → heading, from notebook 13's "## k · ..." cells."""
    cells = json.loads(NB.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return dict(re.findall(r"^## (\d) · (.*)$", text, flags=re.M))


@pytest.mark.parametrize("n", [3, 4, 5])
def test_each_rank_of_each_mistake_has_its_colour_and_words(n):
    rows = mistakes(n)
    fig = draw_mistakes(n)
    gid = by_gid(fig)
    cells = [k for k in gid if k.startswith("cell:")]
    assert len(cells) == len(rows) * n
    shown = [t for t in fig.findobj(Text) if t.get_text()]
    for i, row in enumerate(rows):
        assert len(row.ranks) == n
        for r, (colour, words) in enumerate(row.ranks):
            patch = gid[f"cell:{i}:{r}"]
            assert same_colour(patch.get_facecolor(), colour)
            b = patch.get_bbox()
            here = [t for t in shown if t.get_text() == words
                    and b.x0 < t.get_position()[0] < b.x1 and b.y0 < t.get_position()[1] < b.y1]
            assert len(here) == 1, (i, r, words)
        after = gid[f"after:{i}"].get_text()
        assert after == ("still usable" if row.group_usable else "lost: restart")
    assert fig.texts[0].get_text().endswith(f"({n} ranks, gloo)")
    assert [t.get_text() for t in shown if t.get_text().startswith("rank ")
            and t.get_text()[5:].isdigit()] == [f"rank {r}" for r in range(n)]


@pytest.mark.docs
def test_the_table_is_the_notebooks_taxonomy():
    """Rows in section order; the mistakes the text names; colours of the verdict only."""
    rows = mistakes(4)
    titles = headings()
    numbers = [int(k) for row in rows for k in re.findall(r"\d", row.sections)]
    assert numbers == [1, 2, 3, 4, 5, 6] and set(map(str, numbers)) <= set(titles)
    assert "Shapes" in titles["1"] and "Dtypes" in titles["2"]
    assert "src" in titles["3"] and "scatter_list" in titles["4"]
    assert "only some ranks" in titles["5"] and "dies" in titles["6"]
    colours = {c for row in rows for c, _ in row.ranks}
    assert colours == {FAILED_LOST, FAILED_USABLE, NEVER}           # no rank is fine
    assert [row.group_usable for row in rows] == [True, True, False, False, False]
    assert rows[2].ranks[0][1] == AT_ONCE and {w for _, w in rows[2].ranks[1:]} == {AT_TIMEOUT}
    assert rows[3].ranks[0][1] == AT_TIMEOUT and {w for _, w in rows[3].ranks[1:]} == {
        NEVER_CALLED}
    assert rows[4].ranks[-1][1] == DIED and {w for _, w in rows[4].ranks[:-1]} == {PEER_GONE}
    assert len(ROW_OF_DIAGNOSIS) == 7 and sorted(set(ROW_OF_DIAGNOSIS)) == list(range(5))


def test_a_row_is_what_diagnoses_verdict_gives_for_such_a_diagnosis():
    """The same colours as the page's last figure, for diagnoses shaped as 13's (3 ranks)."""
    refused = {"failed": [{"rank": r, "survives": True} for r in range(3)], "skipped": []}
    alone = {"failed": [{"rank": 0, "survives": False}], "skipped": [1, 2]}
    died = {"failed": [{"rank": r, "survives": False} for r in range(3)], "skipped": []}
    rows = mistakes(3)
    for diagnosis, row in ((refused, rows[0]), (alone, rows[3]), (died, rows[4])):
        assert [verdict(diagnosis, r)[0] for r in range(3)] == [c for c, _ in row.ranks]
    assert FINE not in {c for row in rows for c, _ in row.ranks}


@pytest.mark.parametrize("n", [3, 4, 5])
def test_the_scheme_reads_at_1280_px(n):
    found = audit(draw_mistakes(n))
    assert found.problems() == []
    assert found.min_text_px >= 9.0


def test_other_world_sizes_are_refused():
    for n in (2, 6):
        with pytest.raises(ValueError, match="3 to 5 ranks"):
            draw_mistakes(n)
    with pytest.raises(ValueError):
        mistakes(1)


@pytest.mark.docs
def test_notebook_13_draws_it_for_4_ranks_under_its_title():
    cells = json.loads(NB.read_text())["cells"]
    assert [c["id"] for c in cells[:5]] == ["c00", "scheme", "scheme-text", "at-scale",
                                            "in-detail"]
    assert "scheme" in cells[1]["metadata"]["tags"]
    assert "draw_mistakes(4)" in "".join(cells[1]["source"])
    text = "".join(cells[2]["source"])
    assert text.startswith("## What the picture shows")
    assert "drawn for 4 ranks" in " ".join(text.split())
