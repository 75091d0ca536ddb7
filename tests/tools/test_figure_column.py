"""The width a figure gets on a page at 1280 px, measured in headless Chromium.

helpers.figures.audit.COLUMN_PX is the column every figure is audited against (the
smallest text of a figure, in displayed px, is its size scaled by min(1, COLUMN_PX / PNG
width)). A tiny notebook shows, through the inline backend as every notebook does, a
figure wider than any column and one narrower than every column, with section headings
like a real notebook's (the page's right-hand table of contents takes its share of 1280
px). It is built with `python -m tools.build`, opened at 1280 × 900, and the wide figure's
displayed width must be COLUMN_PX: a theme or CSS change that narrows (or widens) the
column fails here, and the constant is measured again. The narrow one is shown at its own
width (never scaled up).
"""
from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import browser
from conftest import REPO
from helpers.figures.audit import COLUMN_PX

WIDE_PX, NARROW_PX = 2000, 300        # figure widths in PNG px (dpi 100, bbox tight)
FIGURE = """import matplotlib.pyplot as plt
fig = plt.figure(figsize=({w} / 100, 1), dpi=100)
ax = fig.add_axes((0, 0, 1, 1))          # IPython prints no figure without Axes
ax.axis("off")
ax.add_patch(plt.Rectangle((0, 0), 1, 1, color="#3182bd"))
plt.close(fig)
fig"""


def _tiny() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 01 · tiny `01_column`\n\n"
                                              "**What you will learn**\n- a line"),
                nbformat.v4.new_markdown_cell("## A wide figure"),
                nbformat.v4.new_code_cell(FIGURE.format(w=WIDE_PX),
                                          metadata={"tags": ["thumbnail"]}),   # its card
                nbformat.v4.new_markdown_cell("## A narrow figure"),
                nbformat.v4.new_code_cell(FIGURE.format(w=NARROW_PX)),
                nbformat.v4.new_markdown_cell("## What to remember\n\n- the column")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


def measure_column(tmp_path) -> list[dict]:
    """Build the tiny page; the displayed and natural widths of its two figures at 1280 px."""
    browser.require_chromium()
    source = tmp_path / "01_column.ipynb"
    nbformat.write(_tiny(), source)
    env = {**os.environ, "TUTORIAL_BUILD_DIR": str(tmp_path / "build")}
    done = subprocess.run([sys.executable, "-m", "tools.build", "--languages", "en",
                           str(source)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    page_file = tmp_path / "build" / "html" / "01_column.html"
    with browser.chromium() as chromium:
        context = chromium.new_context(viewport=browser.VIEWPORT)
        try:
            page = context.new_page()
            page.goto(page_file.as_uri(), wait_until="load")
            return page.evaluate("""() => [...document.querySelectorAll(
                'div.cell_output img')].map(i => ({natural: i.naturalWidth,
                shown: i.getBoundingClientRect().width}))""")
        finally:
            context.close()


def test_a_wide_figure_gets_the_column_and_a_narrow_one_its_own_width(tmp_path):
    wide, narrow = measure_column(tmp_path)
    assert wide["natural"] >= WIDE_PX - 20 and narrow["natural"] <= NARROW_PX + 20
    assert abs(wide["shown"] - COLUMN_PX) <= 1, (
        f"a wide figure is shown {wide['shown']} px wide at 1280 px, not COLUMN_PX = "
        f"{COLUMN_PX}: measure it again (this test) and update helpers/figures/audit.py")
    assert narrow["shown"] == narrow["natural"]
