"""The book's pages of real notebooks, opened from disk in headless Chromium, as a reader
would open them.

A session fixture builds BUILT with `python -m tools.build` (real kernels and engines, then
Sphinx) into a temporary folder; every page of its html/ folder is then loaded over file://
with the network cut, at 1280 and at 420 px: nothing may be requested from anywhere else,
no image may be broken, no script may fail, no terminal residue, build-machine path or C++
log line may show, no exercise's answer or verdict may be visible before the reader unfolds
it, no animation may open on an empty frame, the phone layout may not scroll sideways, and
no page (with its own images) may weigh over 1 MB. Screenshots of each page at both widths
go to build/screenshots/ ($TUTORIAL_BUILD_DIR/screenshots when set) for a person to look at.
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pytest

import browser
from animation_checks import displayed_frames
from conftest import NOTEBOOKS, REPO
from notebook_runner import run_bounded
from page_checks import MACHINE_PATH
from tools.exercises import student_stub

# 00: a timeline animation (it opened on blank timelines) and per-rank lines; 05: a record
# animation and an exercise; 11: a progress bar, folded tables and plots; 13: tracebacks
# raised on purpose and C++ log lines. (Every kind of animation, 18's timelines too, opens
# on its last frame in Chromium in tests/helpers/test_player.py.)
BUILT = ["00_ranks_and_world", "05_all_reduce", "11_bandwidth", "13_debugging"]
PAGES_WITH_PLOTS = {"05_all_reduce", "11_bandwidth"}
PAGES_WITH_ANIMATIONS = {"00_ranks_and_world", "05_all_reduce"}
BUILD_TIMEOUT_S = 1200      # four notebooks, ~5-60 s each on an idle 2-core machine
PAGE_TIMEOUT_MS = 60_000
MAX_PAGE_BYTES = 1_000_000
MIN_INK = 0.1    # blank timelines (axes and labels only) ink 4-5 %, the results shown 13-44 %
CPP_LOG = re.compile(r"(?:^|\]:)\[[EWIF]\d{4} ", flags=re.M)    # glog: [rank0]:[E1201 …
VERDICT = re.compile(r"Your prediction of|All ranks right!|\d+ of \d+ ranks right")

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


def test_the_build_ran_the_notebooks_on_one_set_of_engines_per_lane(html_dir):
    """make html's default: the first notebook of each lane (tools.lanes: two where there
    are two cores) starts engines at 4 ranks, the rest reuse them (the progress line says
    so, as the start cell's summary line does)."""
    from tools.build import default_jobs

    log = (html_dir.parent / "build.log").read_text()
    progress = {stem: line for line in log.splitlines() for stem in BUILT
                if line.startswith(f"{stem}.ipynb")}
    assert set(progress) == set(BUILT), log[-4000:]
    started = [stem for stem in BUILT if "engines reused" not in progress[stem]]
    assert len(started) == min(default_jobs(), len(BUILT)), progress


@pytest.fixture(scope="module")
def chromium():
    with browser.chromium() as b:
        yield b


PAGE_JS = """() => ({
  title: document.title,
  h1: (document.querySelector('h1') || {innerText: ''}).innerText.replace('#', '').trim(),
  images: [...document.images].map(i => i.getAttribute('src')),
  px_cells: [...document.querySelectorAll('div.cell_input pre')]
            .filter(p => p.innerText.startsWith('%%px'))
            .map(p => p.querySelectorAll('.k, .kn, .nb, .n').length),
  links: [...document.querySelectorAll('a[href]')].map(a => a.href),
  width: [document.documentElement.scrollWidth, window.innerWidth],
  contents: [...document.querySelectorAll('.bd-sidebar-secondary nav a')]
            .filter(a => a.checkVisibility()).map(a => {
              const box = a.getBoundingClientRect();
              return [a.innerText, box.right, a.scrollWidth, a.clientWidth];
            }),
  cards: [...document.querySelectorAll('.series-card-text')]
         .map(e => [e.innerText, e.scrollHeight, e.clientHeight]),
})"""


@pytest.fixture(scope="module")
def pages(html_dir, chromium, pytestconfig) -> dict[str, dict]:
    """Load every page of html/ from disk, network cut, at both widths; screenshot it."""
    shots = _screenshot_dir()
    shots.mkdir(parents=True, exist_ok=True)
    message = f"screenshots of the built pages: {shots}"
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:   # shown even when output is captured
        reporter.write_line(f"\n{message}")
    seen = {}
    for path in sorted(html_dir.glob("*.html")):
        if path.stem in ("genindex", "search"):
            continue
        for width in (1280, 420):
            context = chromium.new_context(viewport={"width": width, "height": 900})
            try:
                foreign = browser.block_network(context)
                page = context.new_page()
                watch = browser.PageWatch(page)
                page.goto(path.as_uri(), wait_until="load", timeout=PAGE_TIMEOUT_MS)
                page.evaluate("() => document.fonts.ready.then(() => true)")
                page.wait_for_timeout(300)   # late script errors, lazy layout
                page.screenshot(path=str(shots / f"{path.stem}-{width}.png"), full_page=True,
                                timeout=PAGE_TIMEOUT_MS)
                seen[path.stem, width] = {
                    **page.evaluate(PAGE_JS),
                    "outputs": page.eval_on_selector_all(   # what a reader sees of each
                        "div.cell_output", f"els => els.map(e => ({browser.VISIBLE_TEXT_JS})(e))"),
                    "path": path,
                    "text": page.inner_text("body"),
                    "visible": browser.visible_text(page),
                    "broken_images": browser.broken_images(page),
                    "animations": displayed_frames(page) if width == 1280 else [],
                    "errors": list(watch.errors),
                    "failed_requests": list(watch.failed_requests),
                    "foreign_requests": list(foreign),
                }
            finally:
                context.close()
    return seen


ALL = ["index", "kit", "run", *BUILT]    # kit: the instructor's kit; run: how to run it


def test_every_built_notebook_has_a_page(pages):
    assert {stem for stem, _ in pages} == set(ALL)


@pytest.mark.parametrize("stem", ALL)
def test_page_loads_from_disk_with_no_network_and_no_error(pages, stem):
    for width in (1280, 420):
        page = pages[stem, width]
        assert page["foreign_requests"] == [], \
            f"{stem}.html asks for something that is not on disk: {page['foreign_requests']}"
        assert page["errors"] == [], f"{stem}.html: {page['errors']}"
        assert page["failed_requests"] == [], f"{stem}.html: {page['failed_requests']}"
        assert page["broken_images"] == [], f"{stem}.html: {page['broken_images']}"


@pytest.mark.parametrize("stem", BUILT)
def test_the_page_title_is_the_notebook_heading(pages, stem):
    page = pages[stem, 1280]
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    heading = re.search(r"^# (.+)$", nb.cells[0].source, flags=re.M).group(1).replace("`", "")
    assert page["h1"] == heading
    assert page["title"].startswith(heading + " "), page["title"]


@pytest.mark.parametrize("stem", ALL)
def test_the_phone_layout_does_not_scroll_sideways(pages, stem):
    scroll, window = pages[stem, 420]["width"]
    assert scroll <= window, f"{stem}.html is {scroll} px wide in a {window} px window"


@pytest.mark.parametrize("stem", ALL)
def test_no_page_weighs_over_1_mb_with_its_own_images(pages, html_dir, stem):
    page = pages[stem, 1280]
    own = {src for src in page["images"] if src and src.startswith("_images/")}
    weight = page["path"].stat().st_size + sum((html_dir / src).stat().st_size for src in own)
    assert weight <= MAX_PAGE_BYTES, f"{stem}.html weighs {weight / 1e6:.2f} MB"


@pytest.mark.parametrize("stem", ALL)
def test_no_terminal_residue_on_the_page(pages, stem):
    text = pages[stem, 1280]["text"]
    for name, pattern in [("ANSI escape", browser.ANSI), ("progress bar", browser.PROGRESS_BAR)]:
        found = [text[max(m.start() - 60, 0):m.end() + 60] for m in pattern.finditer(text)]
        assert not found, f"{stem}.html shows {name} residue: {found[:3]}"


@pytest.mark.parametrize("stem", BUILT)
def test_no_output_holds_a_machine_path_or_a_cpp_warning(pages, stem):
    outputs = pages[stem, 1280]["outputs"]
    for name, pattern in [("build-machine path", MACHINE_PATH), ("C++ log line", CPP_LOG)]:
        found = [text[max(m.start() - 60, 0):m.end() + 60]
                 for text in outputs for m in pattern.finditer(text)]
        assert not found, f"{stem}.html shows {name}: {found[:3]}"


@pytest.mark.parametrize("stem", BUILT)
def test_no_exercise_answer_or_verdict_is_visible_before_it_is_unfolded(pages, stem):
    page = pages[stem, 1280]
    shown = VERDICT.findall(page["visible"])
    assert not shown, f"{stem}.html shows an exercise's verdict unasked: {shown}"
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        if "solution" in cell.metadata.get("tags", []):
            # what the answer adds to the reader's empty cell
            given = {line.strip() for line in student_stub(cell).splitlines()}
            answer = [line.strip() for line in cell.source.splitlines()
                      if len(line.strip()) > 8 and line.strip() not in given]
            assert answer, f"{stem}: the answer adds nothing to the reader's cell"
            shown = [line for line in answer if line in page["visible"]]
            assert not shown, f"{stem}.html shows the answer: {shown}"


@pytest.mark.parametrize("stem", sorted(PAGES_WITH_ANIMATIONS))
def test_no_animation_opens_on_an_empty_frame(pages, stem):
    shown = pages[stem, 1280]["animations"]
    assert shown, f"{stem}.html has no animation"
    for anim in shown:
        assert anim["index"] == anim["count"] - 1, f"{stem}.html opens on frame {anim}"
        assert anim["ink"] > MIN_INK, f"{stem}.html opens on an empty frame: {anim}"


@pytest.mark.parametrize("stem", sorted(PAGES_WITH_PLOTS))
def test_plots_are_drawn(pages, stem):
    plots = [src for src in pages[stem, 1280]["images"] if src and src.endswith(".png")]
    assert plots, f"{stem}.html shows no plot"


def test_the_px_code_is_highlighted_as_python(pages):
    counts = pages["05_all_reduce", 1280]["px_cells"]
    assert len(counts) >= 4, counts
    assert all(n >= 5 for n in counts), f"a %%px cell is not highlighted: {counts}"


def test_index_links_resolve_to_existing_pages(pages, html_dir):
    local = []
    for href in pages["index", 1280]["links"]:
        url = urlparse(href)
        if url.scheme != "file":
            continue
        target = Path(unquote(url.path))
        assert target.is_file(), f"index.html links to a missing file: {href}"
        local.append(target.resolve())
    for stem in BUILT:
        assert (html_dir / f"{stem}.html").resolve() in local, f"index.html has no link to {stem}"


def test_outputs_that_name_their_ranks_have_no_engine_headers_and_keep_rank_order(pages):
    for stem in BUILT:
        for text in pages[stem, 1280]["outputs"]:
            ids = [int(n) for n in re.findall(r"\[stdout:(\d+)\]", text)]
            assert ids == sorted(set(ids)), f"{stem}.html: %%px output out of order: {ids}"
            # a header is left only where an engine printed a line that does not name it
            for n, body in re.findall(r"^\[stdout:(\d+)\] ?\n(.*?)(?=^\[stdout:|\Z)", text,
                                      flags=re.M | re.S):
                lines = body.rstrip("\n").split("\n")
                assert not all(re.match(rf"rank {n}\b", line) or line.startswith(" ")
                               for line in lines), f"{stem}.html: a needless header: {body!r}"
    outputs = pages["00_ranks_and_world", 1280]["outputs"]
    ranks = [re.findall(r"^rank (\d) of 4", text, flags=re.M) for text in outputs]
    assert ["0", "1", "2", "3"] in ranks, f"00: no output with ranks 0..3 in order: {ranks}"
    shown = next(text for text, r in zip(outputs, ranks) if r == ["0", "1", "2", "3"])
    assert "[stdout:" not in shown
    assert "only rank 0 runs this cell" in pages["00_ranks_and_world", 1280]["text"]


def test_page_shows_the_per_rank_checks(pages, html_dir):
    """A check whose ranks all pass shows one line ("✓ 4/4 ranks: …"), its per-rank lines
    folded under it (helpers.checks.Report): in the page's text, hidden until unfolded."""
    for stem in ["05_all_reduce"]:
        text = pages[stem, 1280]["visible"]
        assert re.search(r"✓ 4/4 ranks", text), f"{stem}.html: no '✓ 4/4 ranks' line"
        assert not re.search(r"rank \d+ ✓", text), f"{stem}.html: per-rank lines not folded"
        assert not re.search(r"✗|rank \d+ ✗", text), f"{stem}.html: a rank failed its check"
        source = (html_dir / f"{stem}.html").read_text()
        for rank in range(4):
            assert f"rank {rank} ✓" in source, f"{stem}.html: no 'rank {rank} ✓' line, folded"


def test_debugging_page_shows_each_error_and_its_diagnosis(pages):
    text = pages["13_debugging", 1280]["text"]
    assert "Detected mismatch between collectives" in text
    assert text.count("What happened, by rank:") >= 6
    assert "did not run this cell" in text and "its engine process died" in text


@pytest.mark.parametrize("stem", ALL)
def test_the_contents_column_is_not_cut_at_1280_px(pages, stem):
    """Every visible entry of the right-hand contents ends inside the window and its box."""
    page = pages[stem, 1280]
    window = page["width"][1]
    cut = [entry for entry in page["contents"]
           if entry[1] > window + 0.5 or entry[2] > entry[3]]
    assert not cut, f"{stem}.html: contents entries cut at 1280 px: {cut}"


@pytest.mark.parametrize("width", [1280, 420])
def test_the_index_cards_show_whole_sentences(pages, width):
    cards = pages["index", width]["cards"]
    assert len(cards) == len(BUILT)
    for text, scroll, client in cards:
        assert scroll <= client and text.rstrip()[-1] in ".!?", (text, scroll, client)
