"""The book: executed notebooks rendered by Sphinx, MyST-NB and sphinx-book-theme.

`render(executed, html_dir, thumbs_dir)` stages the pages (tools.pages), the index (a card
per notebook under its group's heading, from notebooks/series.toml; its picture from
thumbs_dir) and book/ (conf.py, _static/) in a temporary folder, runs sphinx-build there,
and only then puts the new site in html_dir's place: a failed render leaves the old site
whole. The theme gives the sidebar of the series, the in-page contents, search that works
from disk, dark mode, copy buttons and each page's download (the executed notebook, as it
ran: see `_restore_downloads`). The instructor's kit (docs/kit/README.md) is one more page,
linked from the index; the answer key beside it is never staged (`KIT_PAGE` is the only file
of docs/kit/ that goes in). "Run it yourself" (docs/run.md) is another, linked from the
index and from the top of every page (book/conf.py), beside the runnable series' zip
(tools.archive), which is written into the new site before it takes build/html's place. The
index opens with "Start here": the kit's course paths, read from its "Course paths" section
(`course_paths`).
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import nbformat

from helpers.paths import REPO_ROOT
from tools import series
from tools.archive import NAME as ARCHIVE_NAME, write_archive
from tools.i18n import po
from tools.i18n.strings import N_, translated

BOOK_DIR = REPO_ROOT / "book"
KIT_PAGE = REPO_ROOT / "docs" / "kit" / "README.md"   # the kit's page; never answers.md
KIT_STEM = "kit"
RUN_PAGE = REPO_ROOT / "docs" / "run.md"
RUN_STEM = "run"
TITLE = "NCCL collectives, rank by rank"
LEAD = ("One notebook per collective, then the parallelism built from them: the scheme "
        "beside what every rank really held, checked against a NumPy model.")
# The groups' headings, each notebook's and their order: notebooks/series.toml (tools.series).
# A page whose number is not in the series (a test's tiny notebook) goes under OTHER_GROUP.
OTHER_GROUP = "More"
SPHINX_TIMEOUT_S = 600
# The site's languages: English at the root of html/, each other one in html/<language>/,
# its text from locales/<language>/ (tools.i18n), the code and every output the run's own.
LANGUAGES = ("en", "zh_CN")
Translate = Callable[[str], "str | None"]      # msgid -> msgstr, None where there is none


@dataclass(frozen=True)
class Entry:
    stem: str
    title: str


def group_name(stem: str, entries: dict[str, series.Notebook] | None = None) -> str:
    """The heading a page goes under: that of the series' notebook of its number (`entries`,
    default notebooks/series.toml), else OTHER_GROUP."""
    entries = series.load() if entries is None else entries
    by_number = {entry.number: entry.group for entry in entries.values()}
    return by_number.get(stem[:2], OTHER_GROUP)


def grouped(pages: list[Entry], entries: dict[str, series.Notebook] | None = None
            ) -> list[tuple[str, list[Entry]]]:
    """Pages under their group's heading, the groups in series order, then OTHER_GROUP."""
    entries = series.load() if entries is None else entries
    order = series.groups(entries) + [OTHER_GROUP]
    groups = {name: [p for p in pages if group_name(p.stem, entries) == name] for name in order}
    return [(name, members) for name, members in groups.items() if members]


def _plain(markdown: str) -> str:
    return " ".join(markdown.replace("`", "").replace("*", "").split()).rstrip(";.")


_CJK = re.compile(r"[\u3400-\u9fff]")


def first_sentence(text: str) -> str:
    """The first sentence of `text`, ended by a full stop (a card shows it whole): "。" ends
    a Chinese one."""
    if _CJK.search(text):
        sentence = re.split(r"(?<=[。！？])", text.strip(), maxsplit=1)[0]
        sentence = sentence.rstrip("；：，;:, ")
        return sentence if sentence.endswith(("。", "！", "？")) else sentence + "。"
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text.strip(), maxsplit=1)[0]
    sentence = sentence.rstrip(";:,. ")
    return sentence if sentence.endswith(("!", "?")) else sentence + "."


def _block(markdown: str) -> str:
    """A markdown block as its catalog entry's msgid: its lines joined by spaces."""
    return " ".join(line.strip() for line in markdown.strip().splitlines())


def _in(translate: Translate | None, markdown: str) -> str:
    """`markdown` through `translate` (None, or no entry: as it is)."""
    return (translate(_block(markdown)) if translate else None) or markdown


def notebook_summary(nb: nbformat.NotebookNode, stem: str,
                     translate: Translate | None = None) -> tuple[str, str]:
    """(title, summary): the '# ' heading (else `stem`) and the first sentence of the first
    'What you will learn' item ("" without one); through `translate`, the page's catalog."""
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    title = re.search(r"^# (.+)$", text, flags=re.M)
    learn = re.search(r"What you will learn\**\s*\n- (.+?)(?:\n- |\n\n|$)", text, flags=re.S)
    summary = _in(translate, learn.group(1)).strip() if learn else ""
    if summary[:1].isalpha():          # "what …" -> "What …", never "`dist…`" -> "Dist…"
        summary = summary[:1].upper() + summary[1:]
    summary = _plain(summary)
    return (_plain(_in(translate, title.group(1))) if title else stem,
            first_sentence(summary) if summary else "")


@dataclass(frozen=True)
class CoursePath:
    """A course path of the kit: its name, its first sentence, its notebooks (two-digit
    numbers) by part: one part without a label, or one per day ("day 1", ...)."""

    name: str
    sentence: str
    parts: tuple[tuple[str, tuple[str, ...]], ...]


def _numbers(text: str) -> tuple[str, ...]:
    """The notebooks a piece of the kit names, in order: "05", "00 to 09"; what stands in
    parentheses (asides: "after 10 and 11") is left out."""
    text = re.sub(r"\([^()]*\)", "", text)
    found: list[str] = []
    for first, last in re.findall(r"\b(\d{2})\b(?:\s+to\s+(\d{2})\b)?", text):
        for number in range(int(first), int(last or first) + 1):
            if f"{number:02d}" not in found:
                found.append(f"{number:02d}")
    return tuple(found)


def course_paths(kit_text: str, translate: Translate | None = None) -> list[CoursePath]:
    """The course paths of the kit's "## Course paths" section: each paragraph that opens
    with a bold name, and the "- day N ...: notebooks" items that follow it. The notebooks
    are read from the English; names, sentences and days through `translate` (the kit's
    catalog), when given."""
    section = re.search(r"^## Course paths\n(.*?)(?=^## |\Z)", kit_text, flags=re.M | re.S)
    paths: list[CoursePath] = []
    for block in re.split(r"\n\s*\n", section.group(1) if section else ""):
        block = " ".join(block.split())
        if opened := re.match(r"\*\*(.+?)\*\*[.,:]?\s*(.*)", block):
            rest = opened.group(2)
            numbers = _numbers(first_sentence(rest))
            said = _in(translate, block)
            name, said = re.match(r"\*\*(.+?)\*\*[.,:。，：]?\s*(.*)", said).groups()
            # the sentence without the list it opens with: the links below show the list
            said = re.sub(r"^(?:\d{2}(?:,\s*|\s+and\s+|\s+to\s+))*\d{2},?\s*", "", said)
            sentence = first_sentence(said[:1].upper() + said[1:])
            parts = (("", numbers),) if numbers else ()
            paths.append(CoursePath(name.rstrip(".,:。，："), sentence, parts))
        elif paths and block.startswith("- "):
            items = [item for item in re.split(r"(?:^|\s)- ", block) if item.strip()]
            days = tuple((re.match(r"([^,:，：]+)", _in(translate, item)).group(1).strip(),
                          _numbers(item)) for item in items)
            path = paths[-1]
            paths[-1] = CoursePath(path.name, path.sentence, path.parts + days)
    return paths


THREE_WAYS = N_("Three ways through the series, from {kit}; or pick any card below.")
PATHS_OF = N_("The course paths of {kit}.")
THE_KIT = N_("the instructor's kit")
NO_PLOT = N_("no plot")
COMPUTED_WITH = N_("Computed with {stamp}")


def _start_here(paths: list[CoursePath], titles: dict[str, str], kit: bool, run: bool,
                language: str | None = None) -> str:
    """The index's "Start here": how to run the series, then the kit's course paths, each
    notebook a link to its page (where it has one). Its markdown is translated by Sphinx,
    its HTML here (`language`)."""
    pages = {stem[:2]: stem for stem in titles}
    lines = ["## Start here\n"]
    if run:
        lines.append(f"New here? [Run it yourself]({RUN_STEM}.md): what you need, the runnable "
                     f"series to download, and which hardware gives NCCL.\n")
    if not paths:
        return "\n".join(lines)
    the_kit = html.escape(translated(THE_KIT, language))
    where = f'<a href="{KIT_STEM}.html#course-paths">{the_kit}</a>' if kit else the_kit
    lead = translated(THREE_WAYS if len(paths) == 3 else PATHS_OF, language)
    lines.append(f'<p class="series-paths-lead">{lead.format(kit=where)}</p>')
    html_paths = []
    for path in paths:
        rows = []
        for label, numbers in path.parts:
            links = " ".join(
                f'<a href="{pages[n]}.html" title="{html.escape(titles[pages[n]])}">{n}</a>'
                if n in pages else f"<span>{n}</span>" for n in numbers)
            head = f'<span class="series-path-day">{html.escape(label)}</span> ' if label else ""
            rows.append(f'<p class="series-path-notebooks">{head}{links}</p>')
        sentence = html.escape(path.sentence)
        sentence = re.sub(r"`([^`]+)`", r"<code>\1</code>", sentence)
        html_paths.append(f'<div class="series-path"><p class="series-path-name">'
                          f'{html.escape(path.name)}</p><p class="series-path-text">{sentence}'
                          f'</p>{"".join(rows)}</div>')
    lines.append(f'<div class="series-paths">{"".join(html_paths)}</div>\n')
    return "\n".join(lines)


def index_page(entries: list[Entry], summaries: dict[str, str], thumbs: set[str],
               stamp: str, kit: bool = False, paths: list[CoursePath] | None = None,
               run: bool = False, language: str | None = None) -> str:
    """index.md: "Start here" (the run page if staged, the kit's course paths), a card per
    notebook under its group's heading, the hidden toctrees (one per group) that make the
    sidebar, and a link to the instructor's kit if it is staged. The markdown is English
    (Sphinx translates it), the HTML in `language`."""
    parts = [f"# {TITLE}\n\n{LEAD}\n"]
    if kit:
        parts.append(f"Teaching this? The [instructor's kit]({KIT_STEM}.md): course paths, "
                     f"minutes, difficulty, learning outcomes.\n")
    if run or paths:
        parts.append(_start_here(paths or [], {e.stem: e.title for e in entries}, kit, run,
                                 language))
    for group, members in grouped(entries):
        cards = []
        for entry in members:
            picture = (f'<img src="_static/thumbs/{entry.stem}.png" alt="">'
                       if entry.stem in thumbs else
                       f'<div class="series-nothumb">{translated(NO_PLOT, language)}</div>')
            cards.append(f'<a class="series-card" href="{entry.stem}.html">{picture}'
                         f'<span class="series-card-title">{html.escape(entry.title)}</span>'
                         f'<span class="series-card-text">'
                         f'{html.escape(summaries.get(entry.stem, ""))}</span></a>')
        parts.append(f"## {group}\n\n<div class=\"series-cards\">\n{chr(10).join(cards)}\n"
                     f"</div>\n")
        toc = "\n".join(e.stem for e in members)
        parts.append(f"```{{toctree}}\n:hidden:\n:caption: {group}\n\n{toc}\n```\n")
    computed = translated(COMPUTED_WITH, language).format(stamp=html.escape(stamp))
    parts.append(f'<p class="series-stamp">{computed}</p>\n')
    return "\n".join(parts)


def kit_page(source: Path) -> str:
    """The kit's page for the book: not in the sidebar's toctrees (orphan), linked from
    the index."""
    return "---\norphan: true\n---\n\n" + source.read_text(encoding="utf-8")


def run_page(source: Path) -> str:
    """The "Run it yourself" page: outside the sidebar's toctrees, linked from every page."""
    return "---\norphan: true\n---\n\n" + source.read_text(encoding="utf-8")


LANGUAGE_NAMES = {"en": "English", "zh_CN": "中文"}      # each in its own language
SWITCH_TITLES = {"en": N_("This page in English"), "zh_CN": N_("This page in Chinese")}
ANNOUNCEMENT = N_('A page\'s notebook needs the series\' helpers: <a href="{archive}">download '
                  'the runnable series (.zip)</a> · <a href="{run}.html">run it yourself</a>')
SITE_STRINGS = {
    "copyright": N_("the nccl-notebooks authors"),
    "archive_title": N_("Download the runnable series (.zip): the notebooks and helpers/, to "
                        "run with make lab"),
    "archive_label": N_("Download the runnable series (.zip)"),
    "run_title": N_("Run it yourself: what you need, the series, which hardware gives NCCL"),
    "run_label": N_("Run it yourself"),
}


def site_strings(language: str | None) -> dict:
    """What book/conf.py and its templates say, in `language` (series-strings.json)."""
    strings = {key: translated(text, language) for key, text in SITE_STRINGS.items()}
    return {**strings, "project": translated(TITLE, language, page="index"),
            "announcement": translated(ANNOUNCEMENT, language).format(archive=ARCHIVE_NAME,
                                                                     run=RUN_STEM),
            "language_name": LANGUAGE_NAMES,
            "switch_title": {other: translated(title, language)
                             for other, title in SWITCH_TITLES.items()}}


def page_translation(page: str, language: str | None) -> Translate | None:
    """msgid -> msgstr of `page`'s catalog in `language` (None: English, or no catalog)."""
    catalog = po.page_catalog(page, language) if language not in (None, "en") else None
    return po.lookup(catalog) if catalog is not None else None


def stage_locales(src: Path, language: str) -> None:
    """The catalogs of `language` into src/locales, where conf.py's locale_dirs looks (Sphinx
    compiles them there: nothing is written into the repository's locales/)."""
    target = src / "locales" / language / "LC_MESSAGES"
    target.mkdir(parents=True)
    for path in po.catalog_dir(language).glob("*.po"):
        shutil.copy2(path, target / path.name)


def stage(executed: list[Path], src: Path, thumbs_dir: Path, stamp: str,
          kit_source: Path | None = None, run_source: Path | None = None,
          language: str | None = None) -> list[Entry]:
    """Write the book's sources into src: book/, a page per executed notebook, the kit's
    page (kit_source, default KIT_PAGE, if it exists), the run page (run_source, default
    RUN_PAGE, if it exists) and the index; for a `language`, its catalogs too. The markdown
    stays English (Sphinx translates it); what the tools write (cards, folds) is in
    `language`."""
    from tools.pages import as_page

    kit_source = KIT_PAGE if kit_source is None else kit_source
    run_source = RUN_PAGE if run_source is None else run_source
    shutil.copytree(BOOK_DIR, src, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "series-strings.json").write_text(json.dumps(site_strings(language),
                                                        ensure_ascii=False), encoding="utf-8")
    if language not in (None, "en"):
        stage_locales(src, language)
    entries, summaries, thumbs = [], {}, set()
    for path in executed:
        nb = nbformat.read(path, as_version=4)
        title, summary = notebook_summary(nb, path.stem, page_translation(path.stem, language))
        entries.append(Entry(path.stem, title))
        summaries[path.stem] = summary
        nbformat.write(as_page(nb, language, path.stem), src / path.name)
        thumb = thumbs_dir / f"{path.stem}.png"
        if thumb.is_file():
            (src / "_static" / "thumbs").mkdir(parents=True, exist_ok=True)
            shutil.copy2(thumb, src / "_static" / "thumbs" / thumb.name)
            thumbs.add(path.stem)
    paths = []
    if kit_source.is_file():
        (src / f"{KIT_STEM}.md").write_text(kit_page(kit_source), encoding="utf-8")
        paths = course_paths(kit_source.read_text(encoding="utf-8"),
                             page_translation(KIT_STEM, language))
    if run_source.is_file():
        (src / f"{RUN_STEM}.md").write_text(run_page(run_source), encoding="utf-8")
    (src / "index.md").write_text(index_page(entries, summaries, thumbs, stamp,
                                             kit=kit_source.is_file(), paths=paths,
                                             run=run_source.is_file(), language=language),
                                  encoding="utf-8")
    return entries


def _restore_downloads(executed: list[Path], out: Path, language: str | None = None) -> None:
    """The download button offers _sources/<page>.ipynb: the notebook as it ran, not the
    page's folded copy; in `language`, its markdown translated (code and outputs as run)."""
    from tools.i18n.cells import translated_page

    for path in executed:
        source = out / "_sources" / path.name
        if not source.parent.is_dir():
            continue
        if language in (None, "en"):
            shutil.copy2(path, source)
        else:
            nbformat.write(translated_page(nbformat.read(path, as_version=4), path.stem,
                                           language, whole=False), source)


# jieba (Chinese search) says on stderr that it builds or loads its dictionary: not a problem
_NOT_PROBLEMS = re.compile(r"^(?:Building prefix dict|Loading model|Dumping model|Prefix dict)")


def _sphinx(src: Path, out: Path, doctrees: Path, language: str, languages: tuple) -> None:
    """sphinx-build of src into out, in `language`; the switch links `languages`."""
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "1", "-d", str(doctrees),
           "-D", f"language={language}", "-A", f"series_languages={','.join(languages)}",
           str(src), str(out)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=SPHINX_TIMEOUT_S,
                         env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    if run.returncode != 0:
        raise RuntimeError(f"sphinx-build ({language}) exited {run.returncode}:\n"
                           f"{(run.stdout + run.stderr)[-4000:]}")
    said = "\n".join(line for line in run.stderr.splitlines()
                     if line.strip() and not _NOT_PROBLEMS.match(line))
    if said:
        print(said[-2000:], file=sys.stderr)


def render(executed: list[Path], html_dir: Path, thumbs_dir: Path,
           stamp: str | Mapping[str, str], kit_source: Path | None = None,
           languages: tuple[str, ...] = LANGUAGES) -> None:
    """Build the book of `executed` (executed notebooks, in series order) and the kit's
    page (kit_source, default KIT_PAGE) into html_dir: English there, each other language
    of `languages` in html_dir/<language>; `stamp`: one line, or one per language."""
    html_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=html_dir.parent, prefix=".site-") as tmp:
        out = Path(tmp) / "html"
        for language in languages:
            src = Path(tmp) / f"src-{language}"
            line = stamp if isinstance(stamp, str) else stamp[language]
            stage(executed, src, thumbs_dir, line, kit_source, language=language)
            built = out if language == "en" else out / language
            _sphinx(src, built, Path(tmp) / f"doctrees-{language}", language, languages)
            _restore_downloads(executed, built, language)
            write_archive(built / ARCHIVE_NAME, language=language)
        for page in out.rglob("*"):        # readable by others, like the rest of build/
            page.chmod(0o755 if page.is_dir() else 0o644)
        old = Path(tmp) / "old"
        if html_dir.exists():
            os.replace(html_dir, old)
        try:
            os.replace(out, html_dir)
        except OSError:
            if old.exists():
                os.replace(old, html_dir)       # the old site back, whole
            raise
