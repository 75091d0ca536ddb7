"""Issue 50, item 1: the first screen teaches. Every notebook opens with its title and what
you will learn, then its scheme picture (a cell tagged `scheme`, drawn without the ranks),
then what the picture shows; the parameters and the start cell come after. The page hides
the scheme cell's code (tools.pages.hide_scheme_code), so its first screen is the title,
the bullets and the picture (measured in Chromium by tests/tools/test_site.py)."""
from __future__ import annotations

import json
import re

import nbformat
import pytest

from conftest import NOTEBOOKS
from tools import series
from tools.pages import SCHEME_TAG, as_page

NUMBERED = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
# What a cell drawn before the ranks start cannot use: the cluster and what it gives.
NEEDS_RANKS = re.compile(r"%%px|\bcluster\b|\bworld_size\b|\bstart_cluster\b")


def _cells(path):
    return json.loads(path.read_text())["cells"]


def _source(cell) -> str:
    return "".join(cell["source"])


@pytest.mark.docs
def test_the_series_has_its_notebooks():
    assert len(NUMBERED) == len(series.load()) >= 1


@pytest.mark.docs
@pytest.mark.parametrize("path", NUMBERED, ids=lambda p: p.stem[:2])
def test_the_title_then_the_scheme_then_what_it_shows_then_the_ranks(path):
    cells = _cells(path)
    title, scheme, text = cells[0], cells[1], cells[2]
    assert title["cell_type"] == "markdown" and _source(title).startswith("# ")
    assert "**What you will learn**" in _source(title)
    assert scheme["cell_type"] == "code", f"{path.name}: cell 1 is not the scheme cell"
    assert SCHEME_TAG in scheme["metadata"].get("tags", []), \
        f"{path.name}: cell 1 has no `{SCHEME_TAG}` tag"
    assert not NEEDS_RANKS.search(_source(scheme)), \
        f"{path.name}: the scheme cell needs the ranks: {_source(scheme)!r}"
    assert text["cell_type"] == "markdown" and \
        _source(text).startswith("## What the picture shows"), path.name
    tagged = [i for i, c in enumerate(cells) if SCHEME_TAG in c["metadata"].get("tags", [])]
    assert tagged == [1], f"{path.name}: one scheme cell, right under the title: {tagged}"
    params = next(i for i, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    start = next(i for i, c in enumerate(cells)
                 if c["cell_type"] == "code" and "start_cluster(" in _source(c))
    assert 2 < params < start, f"{path.name}: the parameters and start come after the picture"


@pytest.mark.docs
@pytest.mark.parametrize("path", NUMBERED, ids=lambda p: p.stem[:2])
def test_what_the_picture_shows_never_points_below_at_it(path):
    """The text moved under the picture: "below" may point at the run, never at the
    drawing ("the drawing below", "Below, our drawing")."""
    text = _source(_cells(path)[2])
    wrong = re.findall(r"(?:drawing|picture|figure) below|Below, (?:our|the) (?:drawing|MLP)",
                       text)
    assert not wrong, f"{path.name}: {wrong}"


def test_the_page_hides_the_scheme_code_and_keeps_its_picture():
    nb = nbformat.v4.new_notebook()
    scheme = nbformat.v4.new_code_cell("draw(4)")
    scheme.metadata["tags"] = [SCHEME_TAG]
    scheme.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBOR"})]
    other = nbformat.v4.new_code_cell("draw(4)")
    nb.cells = [nbformat.v4.new_markdown_cell("# 99 · t"), scheme, other]
    page = as_page(nb)
    assert page.cells[1].metadata["tags"] == [SCHEME_TAG, "remove-input"]
    assert page.cells[1].outputs == scheme.outputs
    assert "remove-input" not in page.cells[2].metadata.get("tags", [])
    assert "remove-input" not in nb.cells[1].metadata["tags"]        # the notebook unchanged


@pytest.mark.parametrize("path", NUMBERED, ids=lambda p: p.stem[:2])
def test_the_taught_code_is_never_folded_as_plumbing(path):
    """Issue 50: folding is for plumbing; every cell that calls a collective (`dist.`) and
    the scheme stay in view. A cell tagged `plumbing` is neither (a `%%px` cell that only
    keeps records may be)."""
    from tools.pages import PLUMBING_TAG

    for cell in _cells(path):
        tags = cell["metadata"].get("tags", [])
        if PLUMBING_TAG not in tags:
            continue
        source = _source(cell)
        assert cell["cell_type"] == "code", cell["id"]
        assert not {SCHEME_TAG, "solution", "exercise"} & set(tags), (cell["id"], tags)
        assert "dist." not in source, (
            f"{path.stem} cell {cell['id']}: taught code tagged plumbing")
