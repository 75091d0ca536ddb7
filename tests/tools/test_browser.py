"""The built HTML pages, opened from disk in headless Chromium, as a reader would open them.

A session fixture builds three notebooks with `python -m tools.build` into a
temporary folder; every page of its html/ folder is then loaded over file:// with
the network cut: nothing may be requested from anywhere else, no image may be
broken, no script may fail, and no terminal residue (ANSI codes, progress bars)
may show. A full-page screenshot of each page goes to build/screenshots/
($TUTORIAL_BUILD_DIR/screenshots when set) for a person to look at.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

import browser
from conftest import NOTEBOOKS, REPO
from notebook_runner import run_bounded

# 11: a progress bar and plots; 13: tracebacks raised on purpose, shown as a page.
BUILT = ["00_ranks_and_world", "01_scatter", "05_all_reduce", "11_bandwidth", "13_debugging"]
PAGES_WITH_PLOTS = {"01_scatter", "05_all_reduce", "11_bandwidth"}
BUILD_TIMEOUT_S = 1200      # five notebooks, ~20-70 s each on an idle 2-core machine
PAGE_TIMEOUT_MS = 60_000

pytestmark = pytest.mark.notebook


def _screenshot_dir() -> Path:
    return Path(os.environ.get("TUTORIAL_BUILD_DIR") or REPO / "build") / "screenshots"


@pytest.fixture(scope="session")
def html_dir(tmp_path_factory) -> Path:
    """html/ of a build of BUILT notebooks into a temporary folder."""
    browser.require_chromium()
    build = tmp_path_factory.mktemp("build")
    env = dict(os.environ, TUTORIAL_BUILD_DIR=str(build),
               TUTORIAL_RESULTS_DIR=str(build / "results"))
    cmd = [sys.executable, "-m", "tools.build",
           *(str(NOTEBOOKS / f"{stem}.ipynb") for stem in BUILT)]
    returncode, out = run_bounded(cmd, REPO, env, BUILD_TIMEOUT_S)
    (build / "build.log").write_text(out)
    assert returncode == 0, f"tools.build exited {returncode}:\n{out[-4000:]}"
    html = build / "html"
    assert (html / "index.html").is_file(), out[-4000:]
    return html


def test_the_build_ran_the_notebooks_on_one_set_of_engines(html_dir):
    """make html's default: the first notebook at 4 ranks starts the engines, the rest reuse
    them (the progress line says so, as the start cell's summary line does)."""
    log = (html_dir.parent / "build.log").read_text()
    progress = {stem: line for line in log.splitlines() for stem in BUILT
                if line.startswith(f"{stem}.ipynb")}
    assert set(progress) == set(BUILT), log[-4000:]
    assert "engines reused" not in progress[BUILT[0]]
    assert all("engines reused" in progress[stem] for stem in BUILT[1:]), progress


@pytest.fixture(scope="module")
def chromium():
    with browser.chromium() as b:
        yield b


@pytest.fixture(scope="module")
def pages(html_dir, chromium, pytestconfig) -> dict[str, dict]:
    """Load every page of html/ from disk, network cut; screenshot it; note what went wrong."""
    shots = _screenshot_dir()
    shots.mkdir(parents=True, exist_ok=True)
    message = f"screenshots of the built pages: {shots}"
    print(message)
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:   # shown even when output is captured
        reporter.write_line(f"\n{message}")
    seen = {}
    for path in sorted(html_dir.glob("*.html")):
        context = chromium.new_context(viewport=browser.VIEWPORT)
        try:
            foreign = browser.block_network(context)
            page = context.new_page()
            watch = browser.PageWatch(page)
            page.goto(path.as_uri(), wait_until="load", timeout=PAGE_TIMEOUT_MS)
            page.evaluate("() => document.fonts.ready.then(() => true)")
            page.wait_for_timeout(300)   # late script errors, lazy layout
            page.screenshot(path=str(shots / f"{path.stem}.png"), full_page=True,
                            timeout=PAGE_TIMEOUT_MS)
            seen[path.stem] = {
                "path": path,
                "text": page.inner_text("body"),
                "broken_images": browser.broken_images(page),
                "plots": browser.plot_count(page),
                "links": page.eval_on_selector_all("a[href]", "els => els.map(a => a.href)"),
                "stdout_order": page.eval_on_selector_all(
                    ".jp-OutputArea-output",
                    r"""els => els.map(el => [...el.innerText.matchAll(/\[stdout:(\d+)\]/g)]
                                         .map(m => Number(m[1]))).filter(ids => ids.length)"""),
                "errors": list(watch.errors),
                "failed_requests": list(watch.failed_requests),
                "foreign_requests": list(foreign),
            }
        finally:
            context.close()
    return seen


def test_every_built_notebook_has_a_page(pages):
    assert set(pages) == {"index", *BUILT}


@pytest.mark.parametrize("stem", ["index", *BUILT])
def test_page_loads_from_disk_with_no_network_and_no_error(pages, stem):
    page = pages[stem]
    assert page["foreign_requests"] == [], \
        f"{stem}.html asks for something that is not on disk: {page['foreign_requests']}"
    assert page["errors"] == [], f"{stem}.html: {page['errors']}"
    assert page["failed_requests"] == [], f"{stem}.html: {page['failed_requests']}"


@pytest.mark.parametrize("stem", ["index", *BUILT])
def test_no_broken_image_and_plots_are_drawn(pages, stem):
    page = pages[stem]
    assert page["broken_images"] == [], f"{stem}.html: {page['broken_images']}"
    if stem in PAGES_WITH_PLOTS:
        assert page["plots"] >= 1, f"{stem}.html shows no plot"


@pytest.mark.parametrize("stem", ["index", *BUILT])
def test_no_terminal_residue_in_the_page_text(pages, stem):
    text = pages[stem]["text"]
    for name, pattern in [("ANSI escape", browser.ANSI), ("progress bar", browser.PROGRESS_BAR)]:
        found = [text[max(m.start() - 60, 0):m.end() + 60] for m in pattern.finditer(text)]
        assert not found, f"{stem}.html shows {name} residue: {found[:3]}"


def test_index_links_resolve_to_existing_pages(pages, html_dir):
    local = []
    for href in pages["index"]["links"]:
        url = urlparse(href)
        if url.scheme != "file":
            continue
        target = Path(unquote(url.path))
        assert target.is_file(), f"index.html links to a missing file: {href}"
        local.append(target.resolve())
    for stem in BUILT:
        assert (html_dir / f"{stem}.html").resolve() in local, f"index.html has no link to {stem}"


def test_engine_output_is_grouped_by_rank_in_rank_order(pages):
    for stem in BUILT:
        for ids in pages[stem]["stdout_order"]:
            assert ids == sorted(set(ids)), \
                f"{stem}.html: %%px output not one block per engine in engine order: {ids}"
    blocks = pages["00_ranks_and_world"]["stdout_order"]
    assert [0, 1, 2, 3] in blocks, f"00: no %%px output from engines 0..3 in order: {blocks}"
    assert "only rank 0 runs this cell" in pages["00_ranks_and_world"]["text"]


def test_page_shows_the_per_rank_checks(pages):
    for stem in PAGES_WITH_PLOTS:
        text = pages[stem]["text"]
        for rank in range(4):
            assert re.search(rf"rank {rank} ✓", text), f"{stem}.html: no 'rank {rank} ✓' line"
        assert not re.search(r"rank \d+ ✗", text), f"{stem}.html: a rank failed its check"


def test_debugging_page_shows_each_error_and_its_diagnosis(pages):
    text = pages["13_debugging"]["text"]
    assert "Detected mismatch between collectives" in text
    assert text.count("What happened, by rank:") >= 6
    assert "did not run this cell" in text and "its engine process died" in text
