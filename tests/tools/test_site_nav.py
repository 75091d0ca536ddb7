"""The series navigation of the built pages, followed in headless Chromium from disk.

Three tiny notebooks (no engines; numbers 01, 02 and 09, so two groups) are built with
`python -m tools.build` into a temporary folder. Every link of every page's navigation
must open a page of the build with the network cut, the page itself must be the one
marked current, and previous / next must follow the index's order.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest

import browser
from conftest import REPO

STEMS = ["01_tiny", "02_tiny", "09_tiny"]

NAV_JS = """() => ({
  prev: [...document.querySelectorAll('.series-bar a[rel=prev]')].map(a => a.href),
  next: [...document.querySelectorAll('.series-bar a[rel=next]')].map(a => a.href),
  index: [...document.querySelectorAll('.series-bar a[rel=index]')].map(a => a.href),
  toc: [...document.querySelectorAll('.series-toc a')].map(a => a.href),
  current: [...document.querySelectorAll('.series-toc a[aria-current=page]')]
           .map(a => a.href),
  groups: [...document.querySelectorAll('.series-toc h2')].map(h => h.textContent),
  cards: [...document.querySelectorAll('a.card')].map(a => a.href),
})"""


@pytest.fixture(scope="module")
def html_dir(tmp_path_factory) -> Path:
    browser.require_chromium()
    tmp = tmp_path_factory.mktemp("nav")
    for stem in STEMS:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_markdown_cell(f"# {stem[:2]} · tiny\n\n"
                                                  "**What you will learn**\n- a line"),
                    nbformat.v4.new_code_cell("print('hello')")]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nbformat.write(nb, tmp / f"{stem}.ipynb")
    env = {**os.environ, "TUTORIAL_BUILD_DIR": str(tmp / "build")}
    done = subprocess.run([sys.executable, "-m", "tools.build",
                           *(str(tmp / f"{s}.ipynb") for s in STEMS)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp / "build" / "html"


def _name(url: str) -> str:
    return Path(urlparse(url).path).name


def test_every_navigation_link_opens_a_page_and_marks_the_current_one(html_dir):
    visited: dict[str, dict] = {}
    with browser.chromium() as chromium:
        context = chromium.new_context(viewport=browser.VIEWPORT)
        foreign = browser.block_network(context)
        page = context.new_page()
        watch = browser.PageWatch(page)
        queue = ["index.html"]
        while queue:
            name = queue.pop()
            if name in visited:
                continue
            assert (html_dir / name).is_file(), f"navigation links to missing {name}"
            response = page.goto((html_dir / name).as_uri(), wait_until="load")
            assert response is None or response.ok, name
            nav = visited[name] = page.evaluate(NAV_JS)
            links = nav["prev"] + nav["next"] + nav["index"] + nav["toc"] + nav["cards"]
            queue += [_name(url) for url in links]
        context.close()
    assert not foreign, f"requests that left the disk: {foreign}"
    assert not watch.errors, watch.errors

    order = [_name(url) for url in visited["index.html"]["cards"]]
    assert order == [f"{s}.html" for s in STEMS]
    assert set(visited) == {"index.html", *order}, "a page is not reachable from the index"
    for i, name in enumerate(order):
        nav = visited[name]
        assert [_name(u) for u in nav["current"]] == [name], f"{name}: current {nav['current']}"
        assert [_name(u) for u in nav["toc"]] == order, f"{name}: contents {nav['toc']}"
        assert nav["groups"] == ["Collectives", "Beyond the collectives"], nav["groups"]
        assert [_name(u) for u in nav["index"]] == ["index.html"] * 2, name  # top and bottom
        want_prev = [order[i - 1]] * 2 if i > 0 else []
        want_next = [order[i + 1]] * 2 if i + 1 < len(order) else []
        assert [_name(u) for u in nav["prev"]] == want_prev, f"{name}: prev {nav['prev']}"
        assert [_name(u) for u in nav["next"]] == want_next, f"{name}: next {nav['next']}"


def test_a_later_build_rewrites_the_navigation_not_duplicates_it(html_dir):
    tmp = html_dir.parent.parent
    env = {**os.environ, "TUTORIAL_BUILD_DIR": str(tmp / "build")}
    # 02 and 09 only: 02's next must become 09's page, and 01 drops out of the contents.
    done = subprocess.run([sys.executable, "-m", "tools.build", str(tmp / "02_tiny.ipynb"),
                           str(tmp / "09_tiny.ipynb")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "up to date" in done.stdout, done.stdout + done.stderr
    page = (html_dir / "02_tiny.html").read_text()
    assert 'rel="prev"' not in page and 'href="01_tiny.html"' not in page
    assert page.count('class="series-bar top"') == 1
    assert page.count('class="series-toc"') == 1
