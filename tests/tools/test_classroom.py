"""Classroom material: student copies leak no solution and still run; slides build offline."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import NOTEBOOKS, REPO
from tools.classroom import make_student, student_copy
from tools.exercises import check_cells, is_solution, student_stub
import browser
from notebook_runner import rehearse

MASTERS = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
WITH_EXERCISE = [p for p in MASTERS
                 if any("solution" in c.metadata.get("tags", [])
                        for c in nbformat.read(p, as_version=4).cells)]


def _lines(cells, comments: bool = False) -> set[str]:
    """Code lines without trailing comments; with `comments`, commented-out code too."""
    found = set()
    for cell in cells:
        for line in cell.source.splitlines():
            line = line.strip()
            if comments:
                line = line.lstrip("#").strip()
            line = line.split("  #")[0].strip()
            if len(line) > 12 and not line.startswith("#"):
                found.add(line)
    return found


def _solution_lines(nb) -> set[str]:
    """Lines of solution cells that would give an answer away: the ones the notebook
    does not show anywhere else (a loop header the lesson itself uses is no leak)."""
    solutions = [c for c in nb.cells if "solution" in c.metadata.get("tags", [])]
    others = [c for c in nb.cells if "solution" not in c.metadata.get("tags", [])]
    # Scaffolding the author chose to give students (the cell's `student` text) is no leak.
    stubs = [nbformat.v4.new_code_cell(student_stub(c)) for c in solutions]
    leaking = _lines(solutions) - _lines(others) - _lines(stubs, comments=True)
    assert leaking or not solutions, "a solution that only repeats its own stub"
    return leaking


def test_collective_notebooks_have_a_solution_cell_and_a_check():
    stems = {p.stem for p in WITH_EXERCISE}
    assert {"01_scatter", "04_reduce", "05_all_reduce", "07_reduce_scatter"} <= stems
    for path in WITH_EXERCISE:
        nb = nbformat.read(path, as_version=4)
        checks = "\n".join(c.source for c in nb.cells if c.cell_type == "code"
                           and "solution" not in c.metadata.get("tags", []))
        # The grader, or a Report the notebook's own check cell builds (or ring's).
        assert ("grade(" in checks or "Report(" in checks or "report_ring(" in checks), path.name


@pytest.mark.parametrize("path", WITH_EXERCISE, ids=lambda p: p.stem)
def test_no_solution_leaks_into_the_student_copy(path, tmp_path):
    master = nbformat.read(path, as_version=4)
    make_student(tmp_path)
    student = nbformat.read(tmp_path / path.name, as_version=4)
    text = "\n".join(c.source for c in student.cells)
    leaks = [line for line in _solution_lines(master) if line in text]
    assert not leaks, f"{path.name}: solution lines in the student copy: {leaks}"
    assert not any("solution" in c.metadata.get("tags", []) for c in student.cells)
    exercises = [c for c in student.cells if "exercise" in c.metadata.get("tags", [])]
    assert len(exercises) == len([c for c in master.cells
                                  if "solution" in c.metadata.get("tags", [])])
    # Everything else is kept, in order: the check cells in particular.
    kept = [c.source for c in master.cells if "solution" not in c.metadata.get("tags", [])]
    rest = [c.source for c in student.cells
            if "exercise" not in c.metadata.get("tags", []) and c.id != "student-note"]
    assert rest == kept
    assert all(c.get("outputs", []) == [] for c in student.cells if c.cell_type == "code")


def test_student_copy_of_a_notebook_without_solution_is_unchanged_but_for_the_note():
    nb = nbformat.read(NOTEBOOKS / "00_ranks_and_world.ipynb", as_version=4)
    if any("solution" in c.metadata.get("tags", []) for c in nb.cells):
        pytest.skip("notebook 00 has an exercise solution")
    copy = student_copy(nb)
    assert [c.source for c in copy.cells if c.id != "student-note"] == [c.source for c in nb.cells]


@pytest.mark.parametrize("path", WITH_EXERCISE, ids=lambda p: p.stem)
def test_the_rehearsal_runs_the_student_copy_up_to_its_exercise(path):
    """The notebook tests execute each notebook once with `rehearse` (notebook_runner): the
    student copy's cells up to each exercise's checks, in its order, then the master's
    solution. Here: those first cells are the student copy's, stub and checks included."""
    master = nbformat.read(path, as_version=4)
    student = [c for c in student_copy(master).cells if c.id != "student-note"]
    rehearsed = [c for c in rehearse(nbformat.read(path, as_version=4)).cells
                 if not c.id.startswith(("rehearsal-save-", "rehearsal-restore-"))]
    first_solution = next(i for i, c in enumerate(rehearsed) if is_solution(c))
    at = next(i for i, c in enumerate(master.cells) if is_solution(c))
    assert first_solution == at + 1 + len(check_cells(master.cells, at))   # stub, checks
    ran = [c.source for c in rehearsed[:first_solution] if c.cell_type == "code"]
    assert ran == [c.source for c in student if c.cell_type == "code"][:len(ran)]
    assert "exercise" in student[at].metadata["tags"] and not is_solution(rehearsed[at])


@pytest.mark.parametrize("path", WITH_EXERCISE, ids=lambda p: p.stem)
def test_no_cell_after_an_exercise_needs_its_solution(path):
    """The student copy runs on past an unanswered exercise: no cell after its checks reads
    a name that only the solution assigns (the rehearsal runs the solution before those
    cells, so this is where that is checked)."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if not is_solution(cell):
            continue
        own = assigned(cell.source) - assigned(student_stub(cell)) - set().union(
            *(assigned(c.source) for c in nb.cells if c.cell_type == "code" and c is not cell))
        checks = check_cells(nb.cells, i)            # they handle a missing answer
        after = max(checks, default=i) + 1
        later = set().union(*(read(c.source) for c in nb.cells[after:] if c.cell_type == "code"))
        assert not own & later, f"{path.name}: after the exercise, cells read {own & later}"


def _tree(source: str):
    import ast

    code = "\n".join(line for line in source.splitlines() if not line.startswith(("%", "!")))
    return ast.parse(code)


def assigned(source: str) -> set[str]:
    """Names a cell binds: assignments, for-targets, imports, defs and classes."""
    import ast

    names = set()
    for node in ast.walk(_tree(source)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def read(source: str) -> set[str]:
    import ast

    return {node.id for node in ast.walk(_tree(source))
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def test_every_notebook_has_slide_metadata():
    for path in MASTERS:
        nb = nbformat.read(path, as_version=4)
        kinds = [c.metadata.get("slideshow", {}).get("slide_type") for c in nb.cells]
        assert None not in kinds, f"{path.name}: a cell without slide metadata"
        assert kinds[0] == "slide" and kinds.count("slide") >= 4, path.name
        params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert all(c.metadata["slideshow"]["slide_type"] == "skip" for c in params)


@pytest.mark.notebook
def test_slides_are_built_offline_from_executed_notebooks(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_BUILD_DIR", str(tmp_path / "build"))
    env = {**__import__("os").environ}
    run = lambda *args: subprocess.run([sys.executable, "-m", *args], cwd=REPO, env=env,
                                       capture_output=True, text=True, timeout=600)
    built = run("tools.build", "--languages", "en", "notebooks/01_scatter.ipynb",
                "notebooks/05_all_reduce.ipynb")
    assert built.returncode == 0, built.stdout + built.stderr
    slides = run("tools.classroom", "slides")
    assert slides.returncode == 0, slides.stderr
    page = (tmp_path / "build" / "slides" / "01_scatter.slides.html").read_text()
    vendor = tmp_path / "build" / "slides" / "vendor"
    assert (vendor / "reveal.js" / "dist" / "reveal.js").exists()
    assert 'src="vendor/require.js"' in page and "vendor/reveal.js/dist/reveal.css" in page
    remote = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?://[^"]+)"', page)
    assert not remote, f"slides must not need the network: {remote}"
    kinds = _laid_out(tmp_path / "build" / "executed" / "01_scatter.ipynb")
    n_slides = kinds.count("slide")
    assert page.count("<section") >= n_slides
    assert "rank 0 ✓" in page and "data:image/png;base64," in page
    assert "MathJax" not in page        # left out, and nothing that calls it either
    chinese = run("tools.classroom", "slides", "--language", "zh_CN")
    assert chinese.returncode == 0, chinese.stderr
    _the_chinese_decks_are_the_english_ones_in_chinese(tmp_path / "build",
                                                       ["01_scatter", "05_all_reduce"])

    # In a real browser, from disk, with the network cut: reveal.js starts and shows slides.
    with browser.chromium() as chromium:
        context = chromium.new_context(viewport=browser.VIEWPORT)
        try:
            foreign = browser.block_network(context)
            tab = context.new_page()
            watch = browser.PageWatch(tab)
            tab.goto((tmp_path / "build" / "slides" / "01_scatter.slides.html").as_uri())
            tab.wait_for_selector(".reveal.ready", timeout=30_000)
            total = tab.evaluate("() => document.querySelectorAll('.reveal .slides > section').length")
            # The title slide links the index and the decks' contents, this deck marked.
            nav = tab.evaluate("""() => {
              const first = document.querySelector('.reveal .slides > section');
              const hrefs = sel => [...first.querySelectorAll(sel)].map(a => a.href);
              return {index: hrefs('.series-bar a[rel=index]'),
                      current: hrefs('.series-toc a[aria-current=page]'),
                      toc: hrefs('.series-toc a')};
            }""")
            shots = tmp_path / "build" / "screenshots"
            shots.mkdir(parents=True, exist_ok=True)
            tab.screenshot(path=str(shots / "01_scatter.slides.png"))
            stepped = _step_through_every_slide(
                context, tmp_path / "build" / "slides" / "05_all_reduce.slides.html")
        finally:
            context.close()
    assert total == n_slides
    deck, other = (tmp_path / "build" / "slides" / f"{stem}.slides.html"
                   for stem in ("01_scatter", "05_all_reduce"))
    assert nav["current"] == [deck.as_uri()], nav
    assert nav["toc"] == [deck.as_uri(), other.as_uri()], nav
    assert nav["index"] == [(tmp_path / "build" / "html" / "index.html").as_uri()], nav
    assert (tmp_path / "build" / "html" / "index.html").is_file()
    assert not foreign and not watch.errors, (foreign, watch.errors)
    kinds = _laid_out(tmp_path / "build" / "executed" / "05_all_reduce.ipynb")
    # every slide and sub-slide tools.slide_layout made, and the title's contents sub-slide
    assert stepped["visited"] == stepped["total"] == kinds.count("slide") + kinds.count(
        "subslide") + 1
    assert stepped["last"], stepped
    assert not stepped["errors"], stepped["errors"]


def _text(markup: str) -> str:
    """What HTML shows, its whitespace left out (a Chinese line break shows none)."""
    import html

    return re.sub(r"\s+", "", html.unescape(re.sub(r"<[^>]+>|¶", "", markup)))


def _markdown_cells(page: str) -> list[str]:
    """The HTML of each markdown cell of a deck."""
    cells = page.split('<div class="jp-Cell jp-MarkdownCell')[1:]
    return [re.split(r'<div class="jp-Cell |</section>', cell.split(">", 1)[1])[0]
            for cell in cells]


def _the_chinese_decks_are_the_english_ones_in_chinese(build: Path, stems: list[str]) -> None:
    """build/zh_CN/slides: per deck, the markdown is the catalog's Chinese, no English prose
    sentence is left, the code and outputs (every <pre>, every image) are the English
    deck's; the navigation's words and titles are Chinese and it links the Chinese decks."""
    from markdown_it import MarkdownIt
    from tools.classroom import in_language
    from tools.i18n import catalogs
    from tools.i18n.cells import notebook_msgids
    from tools import site, slide_nav
    from tools.site import notebook_summary

    render = MarkdownIt("commonmark", {"html": True}).enable("table")
    titles = [notebook_summary(in_language(NOTEBOOKS / f"{stem}.ipynb", "zh_CN"), stem)[0]
              for stem in stems]
    for stem in stems:
        english = (build / "slides" / f"{stem}.slides.html").read_text()
        chinese = (build / "zh_CN" / "slides" / f"{stem}.slides.html").read_text()
        assert '<html lang="zh">' in chinese
        assert re.findall(r"<pre.*?</pre>", chinese, flags=re.S) == \
            re.findall(r"<pre.*?</pre>", english, flags=re.S) != []
        assert re.findall(r"data:image/png;base64,[^\"']+", chinese) == \
            re.findall(r"data:image/png;base64,[^\"']+", english) != []
        zh_cells, en_cells = _markdown_cells(chinese), _markdown_cells(english)
        assert len(zh_cells) == len(en_cells) > 5
        shown, shown_en = _text("".join(zh_cells)), _text("".join(en_cells))
        table = catalogs.lookup(catalogs.page_catalog(stem))
        nb = nbformat.read(build / "executed" / f"{stem}.ipynb", as_version=4)
        prose = [m for m in notebook_msgids(nb) if not catalogs.names_only(m)]
        # the blocks on the English slides (not the speaker notes, not skipped cells)
        on_slides = [m for m in prose if _text(render.renderInline(m)) in shown_en]
        assert len(on_slides) > 0.8 * len(prose) > 10, (len(on_slides), len(prose))
        missing = [m for m in on_slides if _text(render.renderInline(table(m))) not in shown]
        assert not missing, f"{stem}: these blocks' Chinese is not on its slides: {missing}"
        sentences = [s for en in en_cells
                     for s in re.split(r"(?<=[.:;])\s", " ".join(re.sub(r"<[^>]+>", "",
                                                                          en).split()))
                     if len(re.findall(r"\b[a-z]{2,}\b", s)) >= 6]
        left = [s for s in sentences if _text(s) in shown]
        assert sentences and not left, f"{stem}: English prose on the Chinese slides: {left}"
        bar = re.search(r'<nav class="series-bar".*?</nav>', chinese).group(0)
        toc = re.search(r'<nav class="series-toc".*?</nav>', chinese).group(0)
        # the Chinese site's index where `make html` built one, else the English one
        index = re.search(r'rel="index" href="([^"]+)">全部笔记本<', bar).group(1)
        site_zh = build / "html" / "zh_CN" / "index.html"
        assert (build / "zh_CN" / "slides" / index).resolve() == (
            site_zh if site_zh.is_file() else build / "html" / "index.html").resolve()
        assert (build / "zh_CN" / "slides" / index).is_file()
        assert re.findall(r'href="([^"]+)"[^>]*>([^<]+)</a>', toc) == \
            [(f"{s}.slides.html", t) for s, t in zip(stems, titles)]
        groups = list(dict.fromkeys(site.group_name(s) for s in stems))
        assert re.findall(r"<h2>([^<]+)</h2>", toc) == [slide_nav.group_name(g, "zh_CN")
                                                        for g in groups]
        assert not set(groups) & set(re.findall(r"<h2>([^<]+)</h2>", toc))
        assert 'aria-label="目录"' in toc
        for other in stems:
            assert (build / "zh_CN" / "slides" / f"{other}.slides.html").is_file()


def _laid_out(executed: Path) -> list[str]:
    """The slide type of every cell of the deck tools.slide_layout makes of `executed`."""
    from tools.slide_layout import layout

    return [c.metadata["slideshow"]["slide_type"]
            for c in layout(nbformat.read(executed, as_version=4)).cells]


def _step_through_every_slide(context, deck) -> dict:
    """Open `deck` and go forward (reveal.js's next(): every slide and sub-slide, in order)
    to the last slide, listening to the console all the way: the slides visited, the
    deck's count, whether the last was reached, and every console error or uncaught
    exception on the way (a handler that throws on a slide change shows here)."""
    tab = context.new_page()
    watch = browser.PageWatch(tab)
    tab.goto(deck.as_uri())
    tab.wait_for_selector(".reveal.ready", timeout=30_000)
    # the module require.js loaded for the deck: the same Reveal the deck initialised
    tab.evaluate("""() => new Promise(done => require(["vendor/reveal.js/dist/reveal.js"],
                                                        R => { window.deck = R; done(); }))""")
    where = "() => { const at = deck.getIndices(); return `${at.h}/${at.v || 0}`; }"
    seen = {tab.evaluate(where)}
    for _ in range(1000):
        if tab.evaluate("() => deck.isLastSlide()"):
            break
        tab.evaluate("() => deck.next()")
        tab.wait_for_timeout(30)                 # let the slide-change handlers run
        seen.add(tab.evaluate(where))
    return {"visited": len(seen), "total": tab.evaluate("() => deck.getTotalSlides()"),
            "last": tab.evaluate("() => deck.isLastSlide()"), "errors": watch.errors}


def test_the_deck_checks_share_one_chromium_that_leaves_the_callers_event_loop_free():
    """slides.check_deck visits every deck on the process's one Chromium, run from a thread
    of its own: the caller's thread keeps no Playwright loop (papermill needs it), an error
    in the work reaches the caller, and a Chromium that has gone is launched again."""
    import asyncio

    browser.require_chromium()
    first = browser.in_shared_chromium(lambda chromium: chromium)
    assert browser.in_shared_chromium(lambda chromium: chromium) is first
    asyncio.run(asyncio.sleep(0))        # no loop of Playwright's is running in this thread

    def fails(chromium):
        raise ValueError("named in the work")
    with pytest.raises(ValueError, match="named in the work"):
        browser.in_shared_chromium(fails)

    browser.in_shared_chromium(lambda chromium: chromium.close())
    again = browser.in_shared_chromium(lambda chromium: chromium)
    assert again is not first and browser.in_shared_chromium(lambda c: c.is_connected())


@pytest.mark.docs
def test_the_chinese_student_copies_are_the_english_ones_in_chinese(tmp_path):
    """Same cells, the same stubs (so no solution leaks that the English copy keeps out),
    the markdown of the Chinese notebook, and the note in Chinese."""
    from tools.i18n.strings import translated
    from tools.classroom import STUDENT_NOTE, in_language

    make_student(tmp_path / "en")
    written = make_student(tmp_path / "zh", "zh_CN")
    assert [p.name for p in written] == [p.name for p in MASTERS]
    for path in MASTERS:
        en = nbformat.read(tmp_path / "en" / path.name, as_version=4)
        zh = nbformat.read(tmp_path / "zh" / path.name, as_version=4)
        assert [(c.cell_type, c.get("id")) for c in zh.cells] == \
            [(c.cell_type, c.get("id")) for c in en.cells]
        assert [c.source for c in zh.cells if c.cell_type == "code"] == \
            [c.source for c in en.cells if c.cell_type == "code"]
        chinese = [c.source for c in in_language(path, "zh_CN").cells
                   if c.cell_type == "markdown"]
        note = zh.cells[1].source
        assert note == translated(STUDENT_NOTE, "zh_CN") != STUDENT_NOTE
        assert [c.source for c in zh.cells if c.cell_type == "markdown"] == \
            chinese[:1] + [note] + chinese[1:]


def test_a_language_without_a_catalog_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no xx catalog"):
        make_student(tmp_path, "xx")


def test_the_chinese_decks_are_cut_where_the_english_ones_are():
    """Every notebook's Chinese deck has the English deck's pieces, in order (the marks
    carried to the translation: tools.slide_deck.carried_breaks), and no piece of its
    markdown is a block the catalog translates (so none was left English by a cut)."""
    from tools.i18n import catalogs
    from tools.i18n.cells import notebook_msgids
    from tools.slide_deck import deck_notebook
    from tools.slide_layout import layout

    cut = 0
    for path in MASTERS:
        nb = nbformat.read(path, as_version=4)
        english, chinese = layout(nb), layout(deck_notebook(nb, path.stem, "zh_CN"))
        # the same pieces (where one starts a sub-slide follows the room each text takes)
        assert [(c.cell_type, c.get("id")) for c in chinese.cells] == \
            [(c.cell_type, c.get("id")) for c in english.cells], path.stem
        prose = {m for m in notebook_msgids(nb) if not catalogs.names_only(m)}
        left = prose & set(notebook_msgids(chinese))
        assert not left, f"{path.stem}: English blocks on the Chinese slides: {left}"
        cut += sum(len(c.metadata.get("slides", {}).get("breaks", [])) for c in nb.cells
                   if c.cell_type == "markdown")
    assert cut > 10


def test_a_break_inside_a_paragraph_goes_to_the_nearest_sentence_end_of_its_translation():
    from tools.slide_deck import carried_breaks

    english = "## A heading\n\nOne line.\nTwo lines.\nThree.\nFour.\n\n- an item\n- another"
    chinese = "## 标题\n\n一行。两行。三。四。\n\n- 一项\n- 另一项"
    # cut after "Two lines." (half the paragraph), and before the list's second item
    text, breaks = carried_breaks(english, chinese, [4, 8])
    assert text.split("\n") == ["## 标题", "", "一行。两行。", "三。四。", "", "- 一项", "- 另一项"]
    assert breaks == [3, 6]
    assert carried_breaks(english, "## 标题\n\n一行两行三四\n\n- 一项\n- 另一项", [4]) == \
        ("## 标题\n\n一行两行三四\n\n- 一项\n- 另一项", [])      # no sentence end: whole


def test_a_chinese_deck_of_a_page_the_catalog_does_not_cover_is_a_clear_error():
    from tools.slide_deck import CDN, deck_html

    nb = nbformat.read(NOTEBOOKS / "01_scatter.ipynb", as_version=4)
    nb.cells.insert(3, nbformat.v4.new_markdown_cell("A paragraph no catalog holds."))
    with pytest.raises(SystemExit, match=r"01_scatter: 1 blocks have no zh_CN translation, "
                                         r"the first: 'A paragraph no catalog holds.'"):
        deck_html(nb, "01_scatter", CDN, language="zh_CN")
    with pytest.raises(SystemExit, match="01_scatter: no xx catalog"):
        deck_html(nb, "01_scatter", CDN, language="xx")
