"""The index cards' pictures (tools.thumbnails, tools.build): each page's own figure, the
cell tagged `thumbnail`, letterboxed to the card; a page without one fails, naming itself."""
from __future__ import annotations

import base64
import io

import nbformat
import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from tools import build
from tools.thumbnails import HEIGHT_PX, WIDTH_PX, CardError, card_picture, letterbox, png


def _png(width_in: float, height_in: float, dpi: int = 50) -> bytes:
    fig = Figure(figsize=(width_in, height_in), dpi=dpi)
    fig.add_axes([0, 0, 1, 1]).imshow(np.zeros((9, 3)), cmap="gray", aspect="auto")
    return png(fig)


def _executed(*tagged: bool, png_bytes: bytes | None = None) -> nbformat.NotebookNode:
    """A page of code cells, those `tagged` with `thumbnail`, each with a PNG output
    (the first 1×1, the others `png_bytes`)."""
    nb = nbformat.v4.new_notebook()
    for i, tag in enumerate(tagged):
        cell = nbformat.v4.new_code_cell(f"plot_{i}()")
        cell.metadata["tags"] = ["thumbnail"] if tag else []
        picture = png_bytes if i else _png(0.02, 0.02)
        if picture is not None:
            cell.outputs = [nbformat.v4.new_output(
                "display_data", data={"image/png": base64.b64encode(picture).decode()})]
        nb.cells.append(cell)
    return nb


def test_the_card_is_the_tagged_cells_figure_letterboxed():
    tall = _png(3, 9)                                          # 150 × 450: a tall page plot
    nb = _executed(False, True, png_bytes=tall)
    image = imread(io.BytesIO(card_picture(nb, "91_page")), format="png")[..., :3]
    assert image.shape[:2] == (HEIGHT_PX, WIDTH_PX)            # the cards' one size
    dark = np.where(image.mean(axis=2) < 0.5)
    assert dark[0].min() == 0 and dark[0].max() == HEIGHT_PX - 1   # full height
    width = dark[1].max() - dark[1].min() + 1
    assert abs(width - HEIGHT_PX / 3) <= 2                     # 1:3 kept, not stretched
    assert abs((dark[1].min() + dark[1].max()) / 2 - WIDTH_PX / 2) <= 2   # centred
    assert card_picture(nb, "91_page") == letterbox(tall)      # the tagged one, not the first


@pytest.mark.parametrize("tags, png_bytes, message", [
    ((False, False), b"", r"91_page: 0 cells tagged 'thumbnail'"),
    ((True, True), b"", r"91_page: 2 cells tagged 'thumbnail'"),
    ((False, True), None, r"91_page: its cell tagged 'thumbnail' \(\w+\) has no PNG"),
], ids=["untagged", "two-tagged", "no-png"])
def test_a_page_without_its_tagged_figure_fails_the_build_naming_it(tmp_path, monkeypatch,
                                                                   tags, png_bytes, message):
    nb = _executed(*tags, png_bytes=png_bytes or _png(2, 1))
    if png_bytes is None:
        nb.cells[1].outputs = []
    executed = tmp_path / "91_page.ipynb"
    nbformat.write(nb, executed)
    monkeypatch.setattr(build, "THUMBS_DIR", tmp_path / "thumbs")
    with pytest.raises(CardError, match=message):
        build.write_card_picture("91_page", executed)
    assert not (tmp_path / "thumbs").exists()


def test_the_build_writes_the_card_of_a_tagged_page(tmp_path, monkeypatch):
    executed = tmp_path / "91_page.ipynb"
    nbformat.write(_executed(False, True, png_bytes=_png(4, 2)), executed)
    monkeypatch.setattr(build, "THUMBS_DIR", tmp_path / "thumbs")
    assert build.write_card_picture("91_page", executed) == ""
    card = imread(tmp_path / "thumbs" / "91_page.png", format="png")
    assert card.shape[:2] == (HEIGHT_PX, WIDTH_PX) and card[..., :3].std() > 0.1
