"""The book's pages of real notebooks, opened from disk in headless Chromium, as a reader
would open them.

A session fixture builds BUILT with `python -m tools.build` (real kernels and engines, then
Sphinx) into a temporary folder; every page of its html/ folder is then loaded over file://
with the network cut, at 1280 and at 420 px: nothing may be requested from anywhere else,
no image may be broken, no script may fail, no terminal residue, build-machine path or C++
log line may show, no exercise's answer or verdict may be visible before the reader unfolds
it, no animation may open on an empty frame, the phone layout may not scroll sideways, and
no page (with its own images) may weigh over 1 MB. The Chinese site (html/zh_CN/, the same
executed notebooks) passes the same checks, holds no English prose paragraph, and keeps every
heading's id. Screenshots of each page at both widths go to build/screenshots/
($TUTORIAL_BUILD_DIR/screenshots when set; zh_CN-<page>-<width>.png for the Chinese) for a
person to look at.
"""
from __future__ import annotations

import os
import re
import subprocess
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
from tools.i18n import catalogs

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
  // the page's prose: what the tools and the markdown wrote, not what the code printed
  prose: [...document.querySelectorAll(
            'main :is(p, h1, h2, h3, h4, li, td, th, summary, .bd-header-announcement)')]
         .filter(e => !e.closest('.cell_output, .cell_input, pre, .highlight'))
         .map(e => e.innerText.trim()).filter(t => t),
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
    for name, path in _site_pages(html_dir):
        for width in (1280, 420):
            context = chromium.new_context(viewport={"width": width, "height": 900})
            try:
                foreign = browser.block_network(context)
                page = context.new_page()
                watch = browser.PageWatch(page)
                page.goto(path.as_uri(), wait_until="load", timeout=PAGE_TIMEOUT_MS)
                page.evaluate("() => document.fonts.ready.then(() => true)")
                page.wait_for_timeout(300)   # late script errors, lazy layout
                page.screenshot(path=str(shots / f"{name.replace('/', '-')}-{width}.png"),
                                full_page=True, timeout=PAGE_TIMEOUT_MS)
                seen[name, width] = {
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
ZH = "zh_CN"
ZH_ALL = [f"{ZH}/{stem}" for stem in ALL]
BOTH = ALL + ZH_ALL


def _site_pages(html_dir: Path) -> list[tuple[str, Path]]:
    """(name, file) of every page of both sites: "05_all_reduce", "zh_CN/05_all_reduce"."""
    return [(f"{prefix}{path.stem}", path)
            for prefix, folder in (("", html_dir), (f"{ZH}/", html_dir / ZH))
            for path in sorted(folder.glob("*.html")) if path.stem not in ("genindex", "search")]


def test_every_built_notebook_has_a_page_in_both_languages(pages):
    assert {stem for stem, _ in pages} == set(BOTH)


@pytest.mark.parametrize("stem", BOTH)
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


@pytest.mark.parametrize("stem", BOTH)
def test_the_phone_layout_does_not_scroll_sideways(pages, stem):
    scroll, window = pages[stem, 420]["width"]
    assert scroll <= window, f"{stem}.html is {scroll} px wide in a {window} px window"


@pytest.mark.parametrize("stem", BOTH)
def test_no_page_weighs_over_1_mb_with_its_own_images(pages, html_dir, stem):
    page = pages[stem, 1280]
    own = {src for src in page["images"] if src and src.startswith("_images/")}
    folder = page["path"].parent
    weight = page["path"].stat().st_size + sum((folder / src).stat().st_size for src in own)
    assert weight <= MAX_PAGE_BYTES, f"{stem}.html weighs {weight / 1e6:.2f} MB"


@pytest.mark.parametrize("stem", BOTH)
def test_no_terminal_residue_on_the_page(pages, stem):
    text = pages[stem, 1280]["text"]
    for name, pattern in [("ANSI escape", browser.ANSI), ("progress bar", browser.PROGRESS_BAR)]:
        found = [text[max(m.start() - 60, 0):m.end() + 60] for m in pattern.finditer(text)]
        assert not found, f"{stem}.html shows {name} residue: {found[:3]}"


@pytest.mark.parametrize("stem", BUILT + [f"{ZH}/{s}" for s in BUILT])
def test_no_output_holds_a_machine_path_or_a_cpp_warning(pages, stem):
    outputs = pages[stem, 1280]["outputs"]
    for name, pattern in [("build-machine path", MACHINE_PATH), ("C++ log line", CPP_LOG)]:
        found = [text[max(m.start() - 60, 0):m.end() + 60]
                 for text in outputs for m in pattern.finditer(text)]
        assert not found, f"{stem}.html shows {name}: {found[:3]}"


@pytest.mark.parametrize("stem", BUILT + [f"{ZH}/{s}" for s in BUILT])
def test_no_exercise_answer_or_verdict_is_visible_before_it_is_unfolded(pages, stem):
    page = pages[stem, 1280]
    shown = VERDICT.findall(page["visible"])
    assert not shown, f"{stem}.html shows an exercise's verdict unasked: {shown}"
    nb = nbformat.read(NOTEBOOKS / f"{stem.split('/')[-1]}.ipynb", as_version=4)
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


@pytest.mark.parametrize("stem", BOTH)
def test_the_contents_column_is_not_cut_at_1280_px(pages, stem):
    """Every visible entry of the right-hand contents ends inside the window and its box."""
    page = pages[stem, 1280]
    window = page["width"][1]
    cut = [entry for entry in page["contents"]
           if entry[1] > window + 0.5 or entry[2] > entry[3]]
    assert not cut, f"{stem}.html: contents entries cut at 1280 px: {cut}"


@pytest.mark.parametrize("index", ["index", f"{ZH}/index"])
@pytest.mark.parametrize("width", [1280, 420])
def test_the_index_cards_show_whole_sentences(pages, width, index):
    cards = pages[index, width]["cards"]
    assert len(cards) == len(BUILT)
    for text, scroll, client in cards:
        assert scroll <= client and text.rstrip()[-1] in ".!?。！？", (text, scroll, client)


# ------------------------------------------------------------------ the Chinese site

CJK = re.compile(r"[\u3400-\u9fff]")


def english_prose(blocks: list[str], min_words: int = 4) -> list[str]:
    """The blocks with no Chinese character and `min_words` English words or more."""
    return [b for b in blocks if not CJK.search(b)
            and len(re.findall(r"\b[A-Za-z]{2,}\b", b)) >= min_words]


def test_the_english_prose_check_finds_english_and_passes_chinese_and_names():
    assert english_prose(["What the picture shows, rank by rank", "每个 rank 都调用 all_reduce",
                          "torch 2.13.0 · CPU", "05 · all_reduce"]) == \
        ["What the picture shows, rank by rank"]


@pytest.mark.parametrize("stem", ZH_ALL)
def test_a_chinese_page_has_no_english_prose_paragraph(pages, stem):
    """Outputs stay as the code printed them; every line the markdown or the tools wrote is
    Chinese (a name or a number alone may stay as it is)."""
    for width in (1280, 420):
        left = english_prose(pages[stem, width]["prose"])
        assert not left, f"{stem}.html at {width} px: English prose: {left[:5]}"


@pytest.mark.parametrize("stem", BUILT)
def test_the_chinese_page_title_is_the_catalogs_heading(pages, stem):
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    heading = re.search(r"^# (.+)$", nb.cells[0].source, flags=re.M).group(1)
    chinese = catalogs.lookup(catalogs.page_catalog(stem))(heading)
    assert chinese, f"{stem}: its heading has no entry in its catalog"    # 05 · `all_reduce`
    page = pages[f"{ZH}/{stem}", 1280]
    assert page["h1"] == chinese.replace("`", "")
    assert page["title"].startswith(page["h1"] + " "), page["title"]


def _section_ids(path: Path) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("stem", ALL)
def test_every_heading_keeps_its_id_in_chinese(html_dir, stem):
    """The switch can keep the reader's place, and kit.html#course-paths holds in both."""
    english = _section_ids(html_dir / f"{stem}.html")
    assert english and _section_ids(html_dir / ZH / f"{stem}.html") == english


def test_the_language_switch_opens_the_same_place_in_the_other_language(html_dir, chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    browser.block_network(context)
    page = context.new_page()
    try:
        place = _section_ids(html_dir / "05_all_reduce.html")[2]
        english = html_dir / "05_all_reduce.html"
        page.goto(f"{english.as_uri()}#{place}", wait_until="load")
        page.click("a.series-language")
        page.wait_for_load_state("load")
        assert page.url == f"{(html_dir / ZH / '05_all_reduce.html').as_uri()}#{place}"
        assert page.evaluate("document.documentElement.lang") == "zh-CN"
        assert page.inner_text("a.series-language") == "English"
        page.click("a.series-language")
        page.wait_for_load_state("load")
        assert page.url == f"{english.as_uri()}#{place}"
    finally:
        context.close()


def test_chinese_search_finds_a_chinese_word_with_its_snippet(html_dir, chromium):
    """Sphinx indexes Chinese only with jieba (sphinx.search.zh): a word of 05's Chinese."""
    from tools import glossary

    texts = " ".join(m.string for m in catalogs.page_catalog("05_all_reduce") if m.string)
    word = max((t.chinese for t in glossary.load() if len(t.chinese) >= 2
                and CJK.fullmatch(t.chinese[0]) and t.chinese.isalpha()),
               key=texts.count)
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    browser.block_network(context)
    page = context.new_page()
    try:
        page.goto((html_dir / ZH / "search.html").as_uri() + f"?q={word}", wait_until="load")
        page.wait_for_selector("#search-results li p.context", timeout=20_000)
        found = page.eval_on_selector_all(
            "#search-results li", "els => els.map(e => [e.querySelector('a').href, "
            "(e.querySelector('p.context') || {innerText: ''}).innerText])")
    finally:
        context.close()
    hits = {Path(urlparse(url).path).name: snippet for url, snippet in found}
    assert "05_all_reduce.html" in hits, (word, found)
    assert word in hits["05_all_reduce.html"], (word, hits["05_all_reduce.html"])


def test_the_chinese_download_is_the_notebook_as_it_ran_with_its_text_in_chinese(html_dir):
    english, chinese = (nbformat.read(folder / "_sources" / "05_all_reduce.ipynb", as_version=4)
                        for folder in (html_dir, html_dir / ZH))
    assert [(c.cell_type, c.get("id")) for c in chinese.cells] == \
        [(c.cell_type, c.get("id")) for c in english.cells]
    for en, zh in zip(english.cells, chinese.cells):
        if en.cell_type == "code":
            assert (zh.source, zh.outputs) == (en.source, en.outputs), en.get("id")
    assert any(c.get("outputs") for c in chinese.cells), "the download lost its outputs"
    assert CJK.search(chinese.cells[0].source) and not CJK.search(english.cells[0].source)


def test_chromium_has_a_chinese_font_to_lay_the_chinese_pages_out_with():
    """Without one every Chinese character is an empty box, and the Chinese pages' layout
    checks measure boxes (.ci/run installs fonts-wqy-microhei)."""
    fonts = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True)
    assert fonts.stdout.strip(), "no Chinese font: apt-get install fonts-wqy-microhei"
