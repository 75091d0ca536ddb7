"""The book (tools.site: Sphinx + MyST-NB + sphinx-book-theme), opened from disk in
headless Chromium with the network cut, as a reader would open it.

Three tiny notebooks (no engines; numbers 01, 02 and 09, so two groups) are built with
`python -m tools.build` into a temporary folder. What the toolchain was chosen for is
checked here, on the pages it wrote: the sidebar of the series, previous / next, search
(with a snippet of each page), titles, the download of each notebook and of the runnable
series, the run page linked from the top of every page, "Start here" with the kit's course
paths, whole card texts, a contents column that long headings do not cut, dark mode, copy
buttons, a phone-width layout without horizontal scroll, and exercises whose answer stays
folded until asked for.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest

import browser
from conftest import REPO
from tools import archive, kit, site

STEMS = ["01_tiny", "02_tiny", "09_tiny"]
ANSWER = "prediction = [42 * 1001]"
VERDICT = "Your prediction of the answer, against what each rank measured"
LONG_WORDS = " ".join(["ALLREDUCE_reduce_scatter_then_all_gather"] * 12)
# 02's first "What you will learn" item: two sentences, the first long (its card shows it).
LEARN_02 = ("what a card says when the item is long: the first sentence of it, whole, "
            "however many lines it takes on a narrow card, never cut in the middle of a "
            "word, with `code` in it. A second sentence the card leaves out")
CARD_02 = ("What a card says when the item is long: the first sentence of it, whole, "
           "however many lines it takes on a narrow card, never cut in the middle of a "
           "word, with code in it.")
# 09's sections: headings as long as 15's, 18's and 26's, with a long `literal` in some
# (they widened the contents column past its edge: "A rank dies in the mid").
HEADINGS = ["Train, then save with `torch.distributed.checkpoint`",
            "A rank dies in the middle of a step",
            "The same stages through `torch.distributed.pipelining`",
            "`dcp.async_save`: training goes on while the checkpoint is written",
            "Pitfall, run for real: forgetting to divide by `world_size`"]
SCHEME = ("import matplotlib.pyplot as plt\n\nscheme_figure = plt.figure(figsize=(10, 3.2))\n"
          "plt.plot([0, 1], [0, 1])\nplt.show()")
THUMBNAIL = ("import matplotlib.pyplot as plt\n\nplt.figure(figsize=(3, 2))\n"
             "plt.plot([0, 1], [1, 0])\nplt.show()")


def _tiny(stem: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    learn = LEARN_02 if stem == "02_tiny" else "a line"
    picture = nbformat.v4.new_code_cell(THUMBNAIL)     # the card's picture: the first plot
    picture.metadata["tags"] = ["thumbnail"]          # tagged, as tools.slide_marks writes it
    cells = [nbformat.v4.new_markdown_cell(f"# {stem[:2]} · tiny `{stem}`\n\n"
                                           f"**What you will learn**\n- {learn}"),
             nbformat.v4.new_code_cell(f"print('hello from {stem}')\nprint({LONG_WORDS!r})"),
             picture]
    if stem == "09_tiny":
        cells += [nbformat.v4.new_markdown_cell(f"## {heading}\n\nWords under it.")
                  for heading in HEADINGS]
        scheme = nbformat.v4.new_code_cell(SCHEME)     # the picture under the title
        scheme.metadata["tags"] = ["scheme"]
        cells.insert(1, scheme)
    if stem == "01_tiny":
        solution = nbformat.v4.new_code_cell(ANSWER)
        solution.metadata["tags"] = ["solution"]
        cells += [nbformat.v4.new_markdown_cell("## Exercise\n\nWhat is the answer?"),
                  solution,
                  # the check prints the verdict; its source does not hold it
                  nbformat.v4.new_code_cell(f"print({VERDICT[::-1]!r}[::-1])\n"
                                            "print('!thgir sknar llA'[::-1])"),
                  nbformat.v4.new_markdown_cell("## What to remember\n\n- the answer")]
    nb.cells = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


@pytest.fixture(scope="module")
def html_dir(tmp_path_factory) -> Path:
    browser.require_chromium()
    tmp = tmp_path_factory.mktemp("site")
    for stem in STEMS:
        nbformat.write(_tiny(stem), tmp / f"{stem}.ipynb")
    env = {**os.environ, "TUTORIAL_BUILD_DIR": str(tmp / "build")}
    done = subprocess.run([sys.executable, "-m", "tools.build",
                           *(str(tmp / f"{s}.ipynb") for s in STEMS)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp / "build" / "html"


@pytest.fixture(scope="module")
def chromium():
    with browser.chromium() as b:
        yield b


@pytest.fixture
def tab(chromium):
    """A page in a context with the network cut; fails the test on a script error or a
    request that leaves the disk."""
    context = chromium.new_context(viewport=browser.VIEWPORT)
    foreign = browser.block_network(context)
    page = context.new_page()
    watch = browser.PageWatch(page)
    yield page
    context.close()
    assert not foreign, f"requests that left the disk: {foreign}"
    assert not watch.errors, watch.errors


def _name(url: str) -> str:
    return Path(urlparse(url).path).name


NAV_JS = """() => ({
  sidebar: [...document.querySelectorAll('nav.bd-docs-nav a.reference')].map(a => a.href),
  captions: [...document.querySelectorAll('nav.bd-docs-nav p.caption')]
            .map(p => p.textContent.trim()),
  current: [...document.querySelectorAll('nav.bd-docs-nav li.current > a')].map(a => a.href),
  prev: [...document.querySelectorAll('a.left-prev')].map(a => a.href),
  next: [...document.querySelectorAll('a.right-next')].map(a => a.href),
  cards: [...document.querySelectorAll('a.series-card')].map(a => a.href),
  title: document.title,
  h1: document.querySelector('h1').innerText,
  download: [...document.querySelectorAll('a[href$=".ipynb"]')].map(a => a.href),
  copy: document.querySelectorAll('button.copybtn').length,
})"""


def test_the_sidebar_opens_every_page_in_order_and_marks_the_current_one(html_dir, tab):
    visited: dict[str, dict] = {}
    queue = ["index.html"]
    while queue:
        name = queue.pop()
        if name in visited:
            continue
        assert (html_dir / name).is_file(), f"a link to the missing {name}"
        tab.goto((html_dir / name).as_uri(), wait_until="load")
        nav = visited[name] = tab.evaluate(NAV_JS)
        queue += [_name(url) for url in nav["sidebar"] + nav["prev"] + nav["next"] + nav["cards"]]
    order = [f"{s}.html" for s in STEMS]
    groups = list(dict.fromkeys(site.group_name(s) for s in STEMS))   # the series' headings
    assert [_name(u) for u in visited["index.html"]["cards"]] == order
    assert set(visited) == {"index.html", *order}, "a page is not reachable from the index"
    for i, name in enumerate(order):
        nav = visited[name]
        assert [_name(u) for u in nav["sidebar"]] == ["index.html", *order], nav["sidebar"]
        assert nav["captions"] == groups and len(groups) == 2, nav["captions"]
        assert [_name(u) for u in nav["current"]] == [name], f"{name}: {nav['current']}"
        assert [_name(u) for u in nav["prev"]] == [(["index.html"] + order)[i]], name
        assert [_name(u) for u in nav["next"]] == order[i + 1:i + 2], name


def test_every_page_title_is_its_notebook_heading(html_dir, tab):
    for stem in STEMS:
        tab.goto((html_dir / f"{stem}.html").as_uri(), wait_until="load")
        nav = tab.evaluate(NAV_JS)
        heading = f"{stem[:2]} · tiny {stem}"
        assert nav["title"].startswith(heading + " "), nav["title"]
        assert nav["h1"].replace("#", "").strip() == heading, nav["h1"]


def test_each_page_offers_its_notebook_as_it_ran_and_copy_buttons(html_dir, tab):
    tab.goto((html_dir / "02_tiny.html").as_uri(), wait_until="load")
    nav = tab.evaluate(NAV_JS)
    downloads = {_name(u) for u in nav["download"]}
    assert downloads == {"02_tiny.ipynb"}, nav["download"]
    ran = nbformat.read(html_dir / "_sources" / "02_tiny.ipynb", as_version=4)
    assert "hello from 02_tiny" in ran.cells[1].outputs[0].text
    assert nav["copy"] >= 1, "no copy button on the code cells"


@pytest.mark.parametrize("folder", ["", "zh_CN"])    # the Chinese site's search: jieba's
def test_search_finds_a_page_from_disk(html_dir, tab, folder):
    tab.goto((html_dir / folder / "search.html").as_uri() + "?q=hello", wait_until="load")
    tab.wait_for_selector("#search-results li a", timeout=20_000)
    found = tab.eval_on_selector_all("#search-results li a", "els => els.map(a => a.href)")
    assert {_name(u) for u in found} >= {f"{s}.html" for s in STEMS}, found


def test_dark_mode_switches_and_is_remembered(html_dir, tab):
    tab.goto((html_dir / "01_tiny.html").as_uri(), wait_until="load")
    assert tab.evaluate("document.documentElement.dataset.theme") == "light"
    tab.click("button.theme-switch-button")
    tab.click("button.theme-change-button[data-mode=dark]")
    assert tab.evaluate("document.documentElement.dataset.theme") == "dark"
    tab.goto((html_dir / "02_tiny.html").as_uri(), wait_until="load")
    assert tab.evaluate("document.documentElement.dataset.theme") == "dark"


def test_an_exercise_shows_the_question_and_folds_its_answer_and_check(html_dir, tab):
    tab.goto((html_dir / "01_tiny.html").as_uri(), wait_until="load")
    text = browser.visible_text(tab, "article")
    assert "What is the answer?" in text and "✎ Your prediction" in text
    assert ANSWER not in text and VERDICT not in text and "All ranks right!" not in text
    for fold, inside in [("Show answer", ANSWER), ("Show the check", VERDICT)]:
        tab.get_by_text(fold).click()
        tab.wait_for_function(f"() => ({browser.VISIBLE_TEXT_JS})(document.body)"
                              f".includes({inside!r})", timeout=10_000)
    text = browser.visible_text(tab, "article")
    assert ANSWER in text and VERDICT in text and "All ranks right!" in text


@pytest.mark.parametrize("stem", ["index", *STEMS])
def test_phone_width_has_no_horizontal_scroll_and_outputs_wrap_between_words(html_dir, chromium,
                                                                             stem):
    context = chromium.new_context(viewport={"width": 420, "height": 900})
    try:
        page = context.new_page()
        page.goto((html_dir / f"{stem}.html").as_uri(), wait_until="load")
        width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], f"{stem}.html scrolls sideways at 420 px: {width}"
        if stem != "index":
            lines = page.evaluate("""() => {
              const out = [...document.querySelectorAll('div.cell_output pre')]
                .find(p => p.innerText.includes('ALLREDUCE'));
              const range = document.createRange(); range.selectNodeContents(out);
              return [out.innerText, [...range.getClientRects()].length];
            }""")
            assert lines[1] > 2, "the long output line did not wrap"
            assert all(word == "ALLREDUCE_reduce_scatter_then_all_gather"
                       for word in lines[0].split()[3:]), "an output wrapped inside a word"
    finally:
        context.close()


@pytest.mark.parametrize("width", [1280, 420])
def test_the_visible_sidebar_button_folds_or_opens_the_series(html_dir, chromium, width):
    """On a laptop the ☰ of the article's bar folds the sidebar away; on a phone, where the
    sidebar starts hidden, it opens it as a drawer with the series' links."""
    context = chromium.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.goto((html_dir / "02_tiny.html").as_uri(), wait_until="load")
        links = "nav.bd-docs-nav a[href='09_tiny.html']"
        shown = lambda: page.eval_on_selector(
            links, "a => a.checkVisibility({visibilityProperty: true})"
                   " && a.getBoundingClientRect().right > 0")
        assert shown() is (width == 1280)
        page.click(".bd-header-article button.primary-toggle")
        page.wait_for_timeout(500)                  # the sidebar slides
        assert shown() is (width != 1280)
    finally:
        context.close()


def test_card_summaries_are_first_sentences_ended_by_a_stop():
    assert site.first_sentence("What X does: a, b. Then more") == "What X does: a, b."
    assert site.first_sentence("dist.new_group(ranks): some ranks. By default") == \
        "dist.new_group(ranks): some ranks."
    assert site.first_sentence("Is it? Yes") == "Is it?"
    assert site.first_sentence("one clause;") == "one clause."
    for path in sorted((REPO / "notebooks").glob("[0-9]*.ipynb")):   # every real card
        summary = site.notebook_summary(nbformat.read(path, as_version=4), path.stem)[1]
        assert re.fullmatch(r"\S.*[^\s.][.!?]", summary), (path.stem, summary)



def test_chinese_cards_are_first_sentences_from_each_pages_catalog():
    assert site.first_sentence("每个 rank 都调用 `all_reduce`。第二句。") == "每个 rank 都调用 `all_reduce`。"
    assert site.first_sentence("一句话，没有句号；") == "一句话，没有句号。"
    for path in sorted((REPO / "notebooks").glob("[0-9]*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        title, summary = site.notebook_summary(nb, path.stem,
                                               site.page_translation(path.stem, ZH))
        english = site.notebook_summary(nb, path.stem)
        assert re.fullmatch(r"\S[^。]*[^\s.。][。！？]", summary), (path.stem, summary)
        assert title.startswith(english[0][:2]) and (title, summary) != english, path.stem


def test_the_chinese_course_paths_are_the_kits_in_chinese_with_the_same_notebooks():
    kit_text = site.KIT_PAGE.read_text()
    english = site.course_paths(kit_text)
    chinese = site.course_paths(kit_text, site.page_translation(site.KIT_STEM, ZH))
    assert [[n for _, n in p.parts] for p in chinese] == [[n for _, n in p.parts] for p in english]
    for path in chinese:
        assert re.search(r"[\u4e00-\u9fff]", path.name + path.sentence), path
        assert path.sentence.endswith("。") and "**" not in path.name, path
    assert [label for p in chinese for label, _ in p.parts][2:] == \
        [f"第 {d} 天" for d in range(1, 6)]


def test_start_here_reads_the_kits_course_paths_as_the_kit_counts_them():
    """The index's course paths come from the kit's prose; tools.kit counts the minutes of
    its own list, PATHS: the two must name the same notebooks, so neither can drift."""
    paths = site.course_paths(site.KIT_PAGE.read_text())
    assert len(paths) == 3 and all(p.sentence.endswith(".") for p in paths), paths
    listed = [(p.name, label, numbers) for p in paths for label, numbers in p.parts]
    counted = [stems for _, _, _, stems in kit.PATHS]
    assert [numbers for _, _, numbers in listed] == counted, (listed, counted)
    assert [label for _, label, _ in listed] == ["", ""] + [f"day {d}" for d in range(1, 6)]


def test_start_here_on_the_index_links_the_run_page_and_each_path_s_pages(html_dir, tab):
    tab.goto((html_dir / "index.html").as_uri(), wait_until="load")
    shown = tab.evaluate("""() => ({
      headings: [...document.querySelectorAll('article h2')].map(h => h.innerText.trim()),
      names: [...document.querySelectorAll('.series-path-name')].map(p => p.innerText),
      run: [...document.querySelectorAll('article a')].filter(a => a.innerText ===
           'Run it yourself').map(a => a.getAttribute('href')),
      lecture: [...document.querySelectorAll('.series-path')][0].querySelectorAll(
           '.series-path-notebooks a, .series-path-notebooks > span').length,
      links: [...document.querySelectorAll('.series-path a')].map(a => a.getAttribute('href')),
      kit: [...document.querySelectorAll('.series-paths-lead a')].map(a => a.getAttribute('href')),
    })""")
    assert shown["headings"][0].startswith("Start here"), shown["headings"]
    assert shown["names"] == [p.name for p in site.course_paths(site.KIT_PAGE.read_text())]
    assert shown["run"] == ["run.html"] and (html_dir / "run.html").is_file()
    assert shown["lecture"] == len(kit.PATHS[0][3])
    assert set(shown["links"]) == {f"{s}.html" for s in STEMS}, shown["links"]
    assert shown["kit"] == ["kit.html#course-paths"]
    assert 'id="course-paths"' in (html_dir / "kit.html").read_text()


@pytest.mark.parametrize("stem", ["index", "01_tiny", "kit", "run"])
def test_every_page_links_the_run_page_and_the_runnable_series_at_its_top(html_dir, tab,
                                                                          stem):
    tab.goto((html_dir / f"{stem}.html").as_uri(), wait_until="load")
    top = tab.evaluate("""() => [...document.querySelectorAll(
        '.bd-header-announcement a, .bd-header-article a')]
        .filter(a => a.checkVisibility()).map(a => a.getAttribute('href'))""")
    assert {"run.html", archive.NAME} <= set(top), top
    with zipfile.ZipFile(html_dir / archive.NAME) as zipped:
        assert f"{archive.FOLDER}/notebooks/00_ranks_and_world.ipynb" in zipped.namelist()


@pytest.mark.docs
def test_the_run_page_offers_the_archive_and_says_how_to_run_it(html_dir, tab):
    tab.goto((html_dir / "run.html").as_uri(), wait_until="load")
    text = browser.visible_text(tab, "article")
    for said in ("make lab", "conda env create -f environment.yml", "Binder",
                 "one rank per GPU", "Python 3.10"):
        assert said in text, said
    assert tab.eval_on_selector_all("article a[href='nccl-notebooks.zip']", "els => els.length")
    make_help = subprocess.run(["make", "help"], cwd=REPO, capture_output=True, text=True)
    for target in re.findall(r"`make (\w[\w-]*)", (REPO / "docs" / "run.md").read_text()):
        assert f"make {target}" in make_help.stdout, target      # only the Makefile's targets


@pytest.mark.parametrize("width", [1280, 420])
def test_card_texts_are_whole_sentences_never_clipped(html_dir, chromium, width):
    context = chromium.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.goto((html_dir / "index.html").as_uri(), wait_until="load")
        cards = page.eval_on_selector_all("a.series-card .series-card-text", """els => els.map(
            e => [e.innerText, e.scrollHeight, e.clientHeight, e.scrollWidth, e.clientWidth])""")
    finally:
        context.close()
    assert len(cards) == len(STEMS)
    assert CARD_02 in [text for text, *_ in cards]
    for text, scroll_h, client_h, scroll_w, client_w in cards:
        assert scroll_h <= client_h and scroll_w <= client_w, (text, scroll_h, client_h)
        assert text.rstrip()[-1] in ".!?", text


def test_search_results_show_a_snippet_with_the_searched_word_from_disk(html_dir, tab):
    tab.goto((html_dir / "search.html").as_uri() + "?q=hello", wait_until="load")
    tab.wait_for_selector("#search-results li p.context", timeout=20_000)
    found = tab.eval_on_selector_all("#search-results li", """els => els.map(li => [
        li.querySelector('a').getAttribute('href'),
        (li.querySelector('p.context') || {innerText: ''}).innerText])""")
    snippets = {href.split("#")[0]: text for href, text in found}
    for stem in STEMS:
        assert f"hello from {stem}" in snippets.get(f"{stem}.html", ""), found


def test_the_contents_column_is_not_cut_at_1280_px(html_dir, tab):
    """Every entry of the right-hand contents, long `literal` headings too, is inside the
    column and the window, and none overflows its own box."""
    tab.goto((html_dir / "09_tiny.html").as_uri(), wait_until="load")
    entries = tab.evaluate("""() => {
      const column = document.querySelector('.bd-sidebar-secondary').getBoundingClientRect();
      return [...document.querySelectorAll('.bd-sidebar-secondary nav a')].map(a => {
        const box = a.getBoundingClientRect();
        return {text: a.innerText, right: box.right, left: box.left, column: column.right,
                window: innerWidth, scroll: a.scrollWidth, client: a.clientWidth};
      });
    }""")
    assert len(entries) >= len(HEADINGS), entries
    for entry in entries:
        assert entry["right"] <= min(entry["column"], entry["window"]) + 0.5, entry
        assert entry["scroll"] <= entry["client"], entry


def test_the_first_screen_is_the_title_the_bullets_and_the_scheme_without_its_code(html_dir,
                                                                                   chromium):
    """Issue 50, item 1: at 1280×800 the scheme cell's picture (tag `scheme`, right under
    the title) is whole on the first screen, under the bullets; its code is not on the page."""
    context = chromium.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    try:
        page.goto((html_dir / "09_tiny.html").as_uri(), wait_until="load")
        found = page.evaluate("""() => {
          const article = document.querySelector('article');
          const img = [...article.querySelectorAll('img')]
              .find(i => i.getBoundingClientRect().height > 40);
          const learn = [...article.querySelectorAll('li')].pop().getBoundingClientRect();
          const box = img.getBoundingClientRect();
          return {top: box.top, bottom: box.bottom, learned: learn.bottom,
                  code: article.innerText.includes('scheme_figure')};
        }""")
    finally:
        context.close()
    assert found["learned"] <= found["top"] and found["bottom"] <= 800, found
    assert not found["code"], "the scheme cell's code is on the page"


# ------------------------------------------------------------------ the Chinese site

ZH = "zh_CN"
SITE_PAGES = ["index", "kit", "run", "search", *STEMS]


def _switch(path: Path) -> list[str]:
    return re.findall(r'<a href="([^"]+)" class="btn btn-sm series-language"',
                      path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("stem", SITE_PAGES)
def test_every_page_links_the_same_page_in_the_other_language(html_dir, stem):
    english, chinese = html_dir / f"{stem}.html", html_dir / ZH / f"{stem}.html"
    assert _switch(english) == [f"{ZH}/{stem}.html"] and chinese.is_file()
    assert _switch(chinese) == [f"../{stem}.html"]
    assert 'lang="zh-CN"' in chinese.read_text(encoding="utf-8")[:400]


def test_the_chinese_site_says_in_chinese_what_the_tools_write(html_dir, tab):
    """The tiny pages have no catalog (their text stays English); what the tools write
    around them is Chinese: the folds, the announcement, the buttons, the index's stamp."""
    tab.goto((html_dir / ZH / "01_tiny.html").as_uri(), wait_until="load")
    said = tab.evaluate("""() => ({
        folds: [...document.querySelectorAll('details summary')].map(s => s.innerText.trim()),
        top: document.querySelector('.bd-header-announcement').innerText,
        buttons: [...document.querySelectorAll('.bd-header-article a[aria-label]')]
                 .map(a => a.getAttribute('aria-label'))})""")
    assert "显示答案" in said["folds"] and "显示检查" in said["folds"], said["folds"]
    assert "下载可运行版系列" in said["top"], said["top"]
    assert {"下载可运行版系列（.zip）", "自己动手运行"} <= set(said["buttons"]), said["buttons"]
    stamp = (html_dir / ZH / "index.html").read_text(encoding="utf-8")
    assert re.search(r'<p class="series-stamp">计算环境：torch [^<]*后端 ', stamp)


def test_the_chinese_site_offers_the_runnable_series_with_chinese_notebooks(html_dir):
    """The same files as the English zip; each notebook's markdown in Chinese, its code the
    English notebook's, byte for byte."""
    with zipfile.ZipFile(html_dir / archive.NAME) as en, \
            zipfile.ZipFile(html_dir / ZH / archive.NAME) as zh:
        assert en.namelist() == zh.namelist()
        name = f"{archive.FOLDER}/notebooks/05_all_reduce.ipynb"
        english, chinese = (nbformat.reads(z.read(name).decode(), as_version=4) for z in (en, zh))
        assert re.search(r"[\u4e00-\u9fff]", zh.read(f"{archive.FOLDER}/ARCHIVE.md").decode())
    assert [c.source for c in chinese.cells if c.cell_type == "code"] == \
        [c.source for c in english.cells if c.cell_type == "code"]
    assert re.search(r"[\u4e00-\u9fff]", chinese.cells[0].source)
