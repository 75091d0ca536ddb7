"""tools.at_scale: the box it writes into notebooks 05–27 is the model's table with a source
for every figure, in the place its table names; --check names a notebook whose box was
edited by hand, moved or left out; and the committed notebooks carry what it writes."""
from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import NOTEBOOKS
from helpers.scale.at_scale_training import boxes
from tools import at_scale as tool
from tools import series

BOXES = {stem: make() for stem, make in boxes().items()}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A copy of notebooks/ with every box written by the tool."""
    folder = tmp_path_factory.mktemp("at_scale") / "notebooks"
    shutil.copytree(NOTEBOOKS, folder)
    assert tool.main(["--write", str(folder)]) == 0
    return folder


def _cells(path):
    return json.loads(path.read_text())["cells"]


def _headings(cells) -> set[str]:
    return {line.lstrip("#").strip() for c in cells if c["cell_type"] == "markdown"
            for line in "".join(c["source"]).splitlines() if line.startswith("#")}


@pytest.mark.docs
def test_every_place_and_every_pointed_section_is_in_its_notebook():
    found = tool.notebooks(NOTEBOOKS)
    every = [stem[:2] for stem in series.load() if stem >= "05"]
    assert sorted(found) == every == sorted(tool.PLACES)
    for stem, (after, headings, pointer) in tool.PLACES.items():
        cells = _cells(found[stem])
        assert after in [c.get("id") for c in cells], f"{stem}: no cell {after!r}"
        missing = set(headings) - _headings(cells)
        assert not missing, f"{stem}: the box points at sections that are not there: {missing}"
        assert pointer.count("{") == len(headings)


def test_the_cell_in_each_notebook_is_the_box_the_tool_renders(written):
    for stem, path in tool.notebooks(written).items():
        cells = _cells(path)
        ids = [c.get("id") for c in cells]
        assert ids.count(tool.CELL_ID) == 1, stem
        at = ids.index(tool.CELL_ID)
        assert ids[at - 1] == tool.PLACES[stem][0], f"{stem}: the box is not after its cell"
        box = cells[at]
        assert box["cell_type"] == "markdown" and box["metadata"]["tags"] == [tool.TAG]
        text = "".join(box["source"])
        assert text == tool.markdown(BOXES[stem])
        assert BOXES[stem].table() in text and text.startswith(tool.HEADING)


def test_writing_only_adds_the_box_and_writing_again_changes_nothing(written):
    assert tool.write(written) == []
    for stem, path in tool.notebooks(written).items():
        nb = json.loads(path.read_text())
        nb["cells"] = [c for c in nb["cells"] if c.get("id") != tool.CELL_ID]
        original = (NOTEBOOKS / path.name).read_text()
        stripped = json.loads(original)
        stripped["cells"] = [c for c in stripped["cells"] if c.get("id") != tool.CELL_ID]
        assert tool._dump(nb) == tool._dump(stripped), stem


@pytest.mark.parametrize("edit", ["number", "moved", "removed"])
def test_check_fails_on_a_box_edited_by_hand_and_names_the_notebook(written, tmp_path, capsys,
                                                                   edit):
    folder = tmp_path / "notebooks"
    shutil.copytree(written, folder)
    assert tool.main(["--check", str(folder)]) == 0
    path = tool.notebooks(folder)["16"]
    nb = json.loads(path.read_text())
    at = [c.get("id") for c in nb["cells"]].index(tool.CELL_ID)
    if edit == "number":
        source = "".join(nb["cells"][at]["source"])
        changed = re.sub(r"\| 128 GB \|", "| 127 GB |", source, count=1)
        assert changed != source
        nb["cells"][at]["source"] = changed.splitlines(keepends=True)
    elif edit == "moved":
        nb["cells"].insert(at + 2, nb["cells"].pop(at))
    else:
        nb["cells"].pop(at)
    path.write_text(tool._dump(nb))
    capsys.readouterr()
    assert tool.main(["--check", str(folder)]) == 1
    err = capsys.readouterr().err
    assert path.name in err and "05_all_reduce" not in err


def test_every_figure_a_box_uses_has_its_source_line():
    for stem, box in BOXES.items():
        text = tool.markdown(box)
        flat = " ".join(text.split())
        for figure in box.figures:
            assert f"{figure.name}, {figure.shown}: {' '.join(figure.source.split())}" in flat
            assert figure.assumed == ("our assumption" in figure.source.split(",")[0]), figure
            assert figure.assumed or re.search(r"https://|\.hpp:\d+", figure.source), figure
        headers = " ".join(h for h, _ in box.columns) + box.intro
        if "α-β" in box.model:
            assert {"NVLink 4, each way per H100", "InfiniBand NDR, one port per GPU",
                    "α, the cost of one step"} <= {f.name for f in box.figures}, stem
        if "compute" in headers or "step_flops" in box.model:
            assert {"H100 SXM dense BF16", "the share of that peak reached"} <= {
                f.name for f in box.figures}, stem
        if "80 GB" in box.intro:
            assert "H100 SXM memory" in {f.name for f in box.figures}, stem
        assert "(model)" in text.splitlines()[0] and "nothing here ran" in flat


@pytest.mark.docs
def test_the_committed_notebooks_carry_the_boxes_the_tool_writes():
    stale = tool.stale(NOTEBOOKS)
    assert not stale, (f"the At scale box is missing or stale in {stale}: run "
                       "`python -m tools.at_scale --write`")
