"""Issue 50, item 1, measured on the book itself: at 1280×800 every notebook's page shows
its title, what you will learn and the whole scheme picture without scrolling.

What a page's first screen holds is its first cells: the title with its bullets, the scheme
cell (drawn before any rank starts) and the text under it. So the series' own pages are
built here from those first cells of every notebook (`python -m tools.build`: executed
with a real kernel, rendered by Sphinx with the book's theme, as `make html` does), and
opened in headless Chromium, network cut. The rest of a page comes after the first screen
and cannot move it. The Chinese pages (html/zh_CN/, their text from the same catalogs) are
measured the same way.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import browser
from conftest import NOTEBOOKS, REPO
from tools import series

SCREEN = {"width": 1280, "height": 800}
LANGUAGES = ["", "zh_CN"]      # the site's folder of each language: English at its root
FIRST_CELLS = 3            # the title and bullets, the scheme, what the picture shows
STEMS = sorted(p.stem for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))

FIRST_SCREEN_JS = """() => {
  const article = document.querySelector('article');
  const h1 = article.querySelector('h1').getBoundingClientRect();
  const picture = [...article.querySelectorAll('img')]
      .find(img => img.getBoundingClientRect().height > 40);
  const box = picture ? picture.getBoundingClientRect() : null;
  const above = [...article.querySelectorAll('li')]
      .filter(li => box && li.getBoundingClientRect().top < box.top);
  return {h1_top: h1.top, h1_bottom: h1.bottom, bullets: above.length,
          bullets_end: above.length ? above[above.length - 1].getBoundingClientRect().bottom
                                    : null,
          top: box ? box.top : null, bottom: box ? box.bottom : null,
          height: box ? box.height : null};
}"""


@pytest.fixture(scope="module")
def html_dir(tmp_path_factory) -> Path:
    browser.require_chromium()
    tmp = tmp_path_factory.mktemp("first_screen")
    paths = []
    for stem in STEMS:
        nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
        nb.cells = nb.cells[:FIRST_CELLS]
        for cell in nb.cells:   # the card's picture (tools.thumbnails): here, the scheme's
            tags = [t for t in cell.metadata.get("tags", []) if t != "thumbnail"]
            cell.metadata["tags"] = tags + (["thumbnail"] if "scheme" in tags else [])
        path = tmp / f"{stem}.ipynb"
        nbformat.write(nb, path)
        paths.append(str(path))
    env = {**os.environ, "TUTORIAL_BUILD_DIR": str(tmp / "build")}
    done = subprocess.run([sys.executable, "-m", "tools.build", *paths], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return tmp / "build" / "html"


@pytest.fixture(scope="module")
def first_screens(html_dir) -> dict[str, dict]:
    with browser.chromium() as chromium:
        context = chromium.new_context(viewport=SCREEN)
        foreign = browser.block_network(context)
        page = context.new_page()
        found = {}
        for folder in LANGUAGES:
            for stem in STEMS:
                page.goto((html_dir / folder / f"{stem}.html").as_uri(), wait_until="load")
                found[folder, stem] = page.evaluate(FIRST_SCREEN_JS)
        context.close()
    assert not foreign, f"requests that left the disk: {foreign}"
    return found


def test_every_page_is_measured(first_screens):
    assert sorted(first_screens) == [(f, s) for f in LANGUAGES for s in STEMS]
    assert STEMS == list(series.load())


@pytest.mark.parametrize("folder", LANGUAGES, ids=["en", "zh_CN"])
@pytest.mark.parametrize("stem", STEMS, ids=lambda s: s[:2])
def test_the_first_screen_shows_the_title_the_bullets_and_the_whole_picture(first_screens,
                                                                            stem, folder):
    screen = first_screens[folder, stem]
    assert screen["top"] is not None, f"{stem}: no picture on the page"
    assert 0 <= screen["h1_top"] and screen["h1_bottom"] <= screen["top"], screen
    assert screen["bullets"] >= 3, f"{stem}: what you will learn is not above the picture"
    assert screen["bullets_end"] <= screen["top"], screen
    assert screen["height"] >= 150, f"{stem}: the picture is a sliver: {screen}"
    assert screen["bottom"] <= SCREEN["height"], (
        f"{stem}: the picture ends {screen['bottom']:.0f} px down, under the first screen "
        f"({SCREEN['height']} px): {screen}")
