"""The Chinese edition's catalogs (tools/i18n): complete, in step with the English, true to
its markup and its glossary, and applied to the notebooks without touching their code."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest

from tools import glossary, site
from tools.i18n import catalogs, readme
from tools.i18n.cells import notebook_msgids, translate_cell, translate_notebook, units
from tools.pages import comment_summaries

pytestmark = pytest.mark.docs

CATALOGS = sorted(catalogs.catalog_dir().glob("*.po"))
PAGES = {path.stem: path for path in catalogs.pages()}
_CODE = re.compile(r"`[^`]+`")
_URL = re.compile(r"\]\(([^)\s]+)\)|<(https?://[^>]+)>")


@pytest.fixture(scope="module")
def pots(tmp_path_factory) -> dict[str, set[tuple[str | None, str]]]:
    """(context, msgid) of every entry extracted from every page now, by page: Sphinx's
    (context None) and the fold lines (catalogs.FOLD_CONTEXT)."""
    pot_dir = catalogs.extract(tmp_path_factory.mktemp("i18n"))
    return {pot.stem: {(m.context, m.id) for m in catalogs.read(pot) if m.id}
            for pot in pot_dir.glob("*.pot")}


def translated(path: Path):
    return [m for m in catalogs.read(path) if m.id and m.string and not m.fuzzy]


def test_there_are_catalogs_and_each_names_a_page_of_the_site_or_the_readme(pots):
    """A page of the site, the site's own strings, or README.md's quick start (readme)."""
    assert CATALOGS, "no catalog under locales/zh_CN/LC_MESSAGES"
    assert {path.stem for path in CATALOGS} <= set(pots)
    assert readme.STEM in pots and readme.STEM in {path.stem for path in CATALOGS}


@pytest.mark.parametrize("path", CATALOGS, ids=lambda p: p.stem)
def test_every_entry_is_translated_and_none_is_fuzzy(path):
    left = [f"{state}: {msgid}" for state, msgid in catalogs.problems(catalogs.read(path))]
    assert not left, f"{path.stem}: {len(left)} entries a reader sees in English:\n" + \
        "\n".join(left)


@pytest.mark.parametrize("path", CATALOGS, ids=lambda p: p.stem)
def test_every_catalog_follows_the_english_page(path, pots):
    ours = {(m.context, m.id) for m in catalogs.read(path) if m.id}
    new, gone = sorted(pots[path.stem] - ours), sorted(ours - pots[path.stem])
    assert not new and not gone, (
        f"{path.stem}: run `make i18n-update`, then translate; new in the English: {new}; "
        f"no longer there: {gone}")


@pytest.mark.parametrize("stem", sorted(PAGES))
def test_a_notebooks_blocks_are_the_msgids_sphinx_extracts(stem, pots):
    nb = nbformat.read(PAGES[stem], as_version=4)
    assert set(notebook_msgids(nb)) == {msgid for context, msgid in pots[stem] if not context}


@pytest.mark.parametrize("stem", sorted(PAGES))
def test_a_notebooks_fold_lines_are_its_code_fold_entries(stem, pots):
    """The comment a folded plumbing cell shows (tools.pages) is an entry of its own."""
    nb = nbformat.read(PAGES[stem], as_version=4)
    assert set(comment_summaries(nb)) == \
        {msgid for context, msgid in pots[stem] if context == catalogs.FOLD_CONTEXT}


@pytest.mark.parametrize("path", [p for p in CATALOGS if p.stem in PAGES], ids=lambda p: p.stem)
def test_the_chinese_notebook_has_the_english_code_and_no_english_block(path):
    english = nbformat.read(PAGES[path.stem], as_version=4)
    catalog = catalogs.read(path)
    chinese, done, missing = translate_notebook(english, catalog)
    assert done > 0 and not missing, missing
    assert [(c.cell_type, c.get("id")) for c in chinese.cells] == \
        [(c.cell_type, c.get("id")) for c in english.cells]
    for zh, en in zip(chinese.cells, english.cells):
        if en.cell_type == "code":
            assert (zh.source, zh.outputs, zh.metadata) == (en.source, en.outputs, en.metadata)
    strings = {m.string for m in catalog if m.id}
    blocks = [u.msgid for c in chinese.cells if c.cell_type == "markdown"
              for u in units(c.source)]
    assert blocks and all(block in strings for block in blocks)


MARKDOWN_PAGES = {site.KIT_STEM: site.KIT_PAGE, site.RUN_STEM: site.RUN_PAGE}


@pytest.mark.parametrize("stem", sorted(MARKDOWN_PAGES))
def test_a_markdown_pages_blocks_are_the_msgids_sphinx_extracts(stem, pots):
    source = MARKDOWN_PAGES[stem].read_text(encoding="utf-8")
    assert {u.msgid for u in units(source)} == {msgid for _, msgid in pots[stem]}


@pytest.mark.parametrize("path", [p for p in CATALOGS if p.stem in MARKDOWN_PAGES],
                         ids=lambda p: p.stem)
def test_the_chinese_markdown_page_keeps_its_code_blocks_and_no_english_block(path):
    source = MARKDOWN_PAGES[path.stem].read_text(encoding="utf-8")
    chinese, done, missing = translate_cell(source, catalogs.lookup(catalogs.read(path)))
    assert done > 0 and not missing, missing
    fences = re.compile(r"^```.*?^```", re.S | re.M)
    assert fences.findall(chinese) == fences.findall(source)


_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def english_blocks(markdown: str) -> list[str]:
    """The blocks of `markdown` (code fences aside) that are English prose: no CJK letter
    and four or more English words outside code spans and link targets."""
    return [u.msgid for u in units(markdown) if not _CJK.search(u.msgid)
            and len(re.findall(r"[A-Za-z]{2,}", re.sub(r"`[^`]*`|\]\([^)]*\)", " ", u.msgid)))
            >= 4]


def test_the_english_prose_check_finds_an_english_paragraph_only():
    assert english_blocks("## 快速上手\n\nBoth create it when missing.\n\n```bash\n"
                          "make html   # creates .venv, installs, executes\n```\n") == \
        ["Both create it when missing."]
    assert english_blocks("`make lab` `make html` `make test` `make lint`\n\n- **pip**：安装\n") \
        == []


def test_the_readme_catalog_follows_the_quick_start_of_readme_md():
    section = readme.quick_start(readme.README.read_text(encoding="utf-8"))
    ours = [m.id for m in catalogs.read(catalogs.catalog_dir() / "readme.po") if m.id]
    assert ours == [u.msgid for u in units(section)], \
        "readme.po lags README.md's quick start: run `make i18n-update`, then translate"


def test_readme_zh_cn_md_is_what_the_tool_writes_now():
    text, missing = readme.chinese()
    assert not missing, f"README.zh-CN.md would show in English: {missing}"
    assert readme.README_ZH.read_text(encoding="utf-8") == text, (
        f"{readme.README_ZH.name} is not what `python -m tools.i18n readme` writes from "
        "README.md now: run `make i18n-update` (and translate what it marks)")


def test_readme_zh_cn_md_has_the_english_code_and_no_english_paragraph():
    chinese = readme.README_ZH.read_text(encoding="utf-8")
    section = readme.quick_start(readme.README.read_text(encoding="utf-8"))
    assert _FENCE.findall(section) and _FENCE.findall(chinese) == _FENCE.findall(section)
    assert english_blocks(chinese) == [], f"{readme.README_ZH.name} holds English prose"
    assert "make lab-zh" in chinese and "build/html/zh_CN/index.html" in chinese


def test_an_english_edit_of_the_quick_start_shows_in_english_until_translated(
        tmp_path, monkeypatch):
    english = readme.README.read_text(encoding="utf-8")
    edited = units(readme.quick_start(english))[-1]
    assert edited.raw.endswith(".") and edited.raw in english
    changed = tmp_path / "README.md"
    changed.write_text(english.replace(edited.raw, edited.raw[:-1] + ", again.", 1),
                       encoding="utf-8")
    monkeypatch.setattr(readme, "README", changed)
    text, missing = readme.chinese()
    assert missing == [edited.msgid[:-1] + ", again."]
    assert text != readme.README_ZH.read_text(encoding="utf-8")
    assert english_blocks(text) == missing


def test_the_quick_start_ends_at_the_next_heading_not_at_one_in_code():
    text = "# T\n\n## Quick start\n\n```\n## not a heading\n```\n\nA b.\n\n## Next\n\nx\n"
    assert readme.quick_start(text) == "## Quick start\n\n```\n## not a heading\n```\n\nA b.\n"
    with pytest.raises(ValueError, match="no section headed '## Quick start'"):
        readme.quick_start("# T\n\n## Install\n")


@pytest.mark.parametrize("path", CATALOGS, ids=lambda p: p.stem)
def test_a_translation_keeps_the_code_and_the_links_of_its_english(path):
    lost = []
    for message in translated(path):
        kept = set(_CODE.findall(message.id)) - set(_CODE.findall(message.string))
        links = {a or b for a, b in _URL.findall(message.id)}
        kept |= {url for url in links if url not in message.string}
        if kept:
            lost.append(f"{sorted(kept)} in: {message.id}")
    assert not lost, f"{path.stem}:\n" + "\n".join(lost)


def _rendered(markdown: str) -> tuple[int, int]:
    """(links, asterisks left as text outside code) of `markdown` rendered as MyST does."""
    from tools.i18n.cells import _MD

    html = _MD.renderInline(markdown)
    return html.count("<a "), re.sub(r"<code>.*?</code>", "", html).count("*")


@pytest.mark.parametrize("path", CATALOGS, ids=lambda p: p.stem)
def test_a_translation_renders_the_emphasis_and_links_of_its_english(path):
    """CommonMark closes a `*` before a CJK letter only after a letter: "*如何？*一节"
    shows its asterisks. No asterisk may show that the English does not show."""
    broken = []
    for message in translated(path):
        (links, stars), (zh_links, zh_stars) = _rendered(message.id), _rendered(message.string)
        if zh_links != links or zh_stars > stars:
            broken.append(f"links {links} → {zh_links}, asterisks shown {stars} → {zh_stars}: "
                          f"{message.string}")
    assert not broken, f"{path.stem}:\n" + "\n".join(broken)


def test_the_emphasis_check_sees_asterisks_commonmark_leaves():
    assert _rendered("*How fast is it?* below") == (0, 0)
    assert _rendered("下面的*速度如何？*一节") == (0, 2)
    assert _rendered("[文档](https://x.org) 的 *这一节*") == (1, 0)


def _terms_in(english: str) -> list[glossary.Term]:
    """The glossary's terms in `english` outside code, longest first: a term inside a
    longer one ("activation" in "activation recomputation") is the longer one's."""
    prose, found = _CODE.sub(" ", english), []
    for term in sorted(glossary.load(), key=lambda t: -len(t.english)):
        pattern = rf"(?<![\w-]){re.escape(term.english)}(s|es)?(?![\w-])"
        if re.search(pattern, prose, re.I):
            found.append(term)
            prose = re.sub(pattern, " ", prose, flags=re.I)
    return found


@pytest.mark.parametrize("path", CATALOGS, ids=lambda p: p.stem)
def test_a_translation_uses_the_glossarys_rendering_of_each_term(path):
    off = [f"{t.english} → {t.chinese}: {m.string}" for m in translated(path)
           for t in _terms_in(m.id) if t.chinese not in m.string]
    assert not off, f"{path.stem}:\n" + "\n".join(off)


def test_the_glossary_check_finds_a_term_outside_code_only():
    assert [t.english for t in _terms_in("Each rank joins the process group.")] == \
        ["process group", "rank"]
    assert [t.english for t in _terms_in("Activation recomputation saves activations")] == \
        ["activation recomputation", "activation"]
    assert [t.english for t in _terms_in("a micro-batch")] == ["micro-batch"]
    assert _terms_in("`rank` and `bucket`") == []


@pytest.mark.parametrize("msgid, none", [
    ("1.88 GB", True), ("`x` → `y`", True), ("$O(n)$ bytes", False),
    ("42.9 ms", True), ("What the picture shows", False), ("05 · `all_reduce`", True),
    ("1 GiB", True), ("8 H100s, NVLink", False)])
def test_an_entry_without_prose_needs_no_translation(msgid, none):
    assert catalogs.holds_no_prose(msgid) is none


@pytest.mark.parametrize("msgid, names", [
    ("NVLink", True), ("Llama-3-8B", True), ("ZeRO-3 / FSDP", True), ("8 H100s, NVLink", True),
    ("Binder", False), ("Measured", False), ("the ring model", False), ("dtype", False),
    ("H100s, GPU", True),
    ("`float32` or more", False)])
def test_a_translation_may_keep_names_but_not_english_words(msgid, names):
    assert catalogs.names_only(msgid) is names
    catalog = catalogs.Catalog(locale="zh_CN")
    catalog.add(msgid, msgid)
    assert (catalogs.problems(catalog) == []) is names


def test_one_edited_sentence_is_one_fuzzy_entry_of_one_catalog(tmp_path):
    """Also: every other catalog is exactly what the update writes (none is changed)."""
    locales = tmp_path / "locales"
    shutil.copytree(catalogs.LOCALES, locales)
    page = "05_all_reduce"
    nb = nbformat.read(PAGES[page], as_version=4)
    before = catalogs.read(catalogs.catalog_dir(locales=locales) / f"{page}.po")
    done = {m.id for m in before if m.id and m.string}
    cell, first = next((c, u) for c in nb.cells if c.cell_type == "markdown"
                       for u in units(c.source) if u.msgid in done and len(u.msgid.split()) > 8
                       and u.raw.endswith(".") and u.raw in c.source)
    cell.source = cell.source.replace(first.raw, first.raw[:-1] + ", again.", 1)
    edited = tmp_path / "nb" / f"{page}.ipynb"
    edited.parent.mkdir()
    nbformat.write(nb, edited)
    notebooks = [edited if path.stem == page else path for path in catalogs.pages()]
    changed = catalogs.update(catalogs.extract(tmp_path / "x", notebooks), locales=locales)
    after = catalogs.read(catalogs.catalog_dir(locales=locales) / f"{page}.po")
    assert changed == [f"{page}.po"]
    fuzzy = [m for m in after if m.id and m.fuzzy]
    assert len(fuzzy) == 1 and fuzzy[0].id == first.msgid[:-1] + ", again."
    assert fuzzy[0].string == before[first.msgid].string      # the old Chinese, to edit
    assert {m.id for m in after if m.id} - {fuzzy[0].id} == \
        {m.id for m in before if m.id} - {first.msgid}
    left = {(state, msgid) for state, msgid in catalogs.problems(before)
            if not catalogs.holds_no_prose(msgid)}        # the update fills those
    assert set(catalogs.problems(after)) == left | {("fuzzy", fuzzy[0].id)}


def test_a_changed_number_takes_its_own_english_not_a_fuzzy_neighbour(tmp_path):
    from babel.messages.pofile import write_po

    pot, locales = tmp_path / "pot", tmp_path / "locales"
    pot.mkdir()
    for folder, entries in ((pot, {"3,022": "", "What the picture shows": ""}),
                            (catalogs.catalog_dir(locales=locales),
                             {"3,021": "3,021", "What the picture shows": "图中所示"})):
        catalog = catalogs.Catalog(locale="zh_CN")
        for msgid, msgstr in entries.items():
            catalog.add(msgid, msgstr)
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ("page.pot" if folder == pot else "page.po"), "wb") as handle:
            write_po(handle, catalog)
    assert catalogs.update(pot, locales=locales) == ["page.po"]
    updated = catalogs.read(catalogs.catalog_dir(locales=locales) / "page.po")
    assert updated["3,022"].string == "3,022" and not updated["3,022"].fuzzy
    assert updated["What the picture shows"].string == "图中所示"
    assert catalogs.update(pot, locales=locales) == []          # a second update: nothing


def test_the_chinese_edition_is_written_into_a_new_folder_and_drops_a_page_gone(tmp_path):
    from tools.i18n.__main__ import notebooks

    out = tmp_path / "build" / "zh_CN"                  # nothing of it exists yet
    lines = notebooks(out)
    pages = {p.stem for p in CATALOGS}
    assert {p.stem for p in (out / "notebooks").glob("*.ipynb")} == pages & set(PAGES)
    assert (out / "kit.md").is_file() == ("kit" in pages)
    assert all(" 0 in English" in line for line in lines if "blocks in Chinese" in line)
    (out / "notebooks" / "99_gone.ipynb").write_text("{}")
    notebooks(out)
    assert not (out / "notebooks" / "99_gone.ipynb").exists()


@pytest.mark.parametrize("source, table, expected", [
    ("Title\n=====\n\na b\n", {"Title": "标题", "a b": "甲 乙"}, "标题\n=====\n\n甲 乙\n"),
    ("## Head ##\n- item one\n  goes on\n", {"Head": "标题", "item one goes on": "一项"},
     "## 标题 ##\n- 一项\n"),
    ("| p | q |\n|---|---|\n| x | q |\n", {"p": "甲 \\| 乙", "q": "q", "x": "X|Y"},
     "| 甲 \\| 乙 | q |\n|---|---|\n| X\\|Y | q |\n"),
    ("a b", {"a b": "甲 乙"}, "甲 乙"),
])
def test_a_cell_keeps_its_markdown_around_each_translation(source, table, expected):
    assert translate_cell(source, table.get)[0] == expected


def test_an_unknown_page_is_refused_with_the_pages_there_are(tmp_path):
    pot = tmp_path / "pot"
    pot.mkdir()
    (pot / "05_all_reduce.pot").write_text('msgid ""\nmsgstr ""\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"no page named \['05_all_reduc'\].*05_all_reduce"):
        catalogs.update(pot, add=["05_all_reduc"], locales=tmp_path / "locales")
