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
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from helpers.paths import REPO_ROOT
from tools import series
from tools.archive import NAME as ARCHIVE_NAME, write_archive

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


def first_sentence(text: str) -> str:
    """The first sentence of `text`, ended by a full stop (a card shows it whole)."""
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z(])", text.strip(), maxsplit=1)[0]
    sentence = sentence.rstrip(";:,. ")
    return sentence if sentence.endswith(("!", "?")) else sentence + "."


def notebook_summary(nb: nbformat.NotebookNode, stem: str) -> tuple[str, str]:
    """(title, summary): the '# ' heading (else `stem`) and the first sentence of the first
    'What you will learn' item ("" without one)."""
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    title = re.search(r"^# (.+)$", text, flags=re.M)
    learn = re.search(r"What you will learn\**\s*\n- (.+?)(?:\n- |\n\n|$)", text, flags=re.S)
    summary = learn.group(1).strip() if learn else ""
    if summary[:1].isalpha():          # "what …" -> "What …", never "`dist…`" -> "Dist…"
        summary = summary[:1].upper() + summary[1:]
    summary = _plain(summary)
    return (_plain(title.group(1)) if title else stem,
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


def course_paths(kit_text: str) -> list[CoursePath]:
    """The course paths of the kit's "## Course paths" section: each paragraph that opens
    with a bold name, and the "- day N ...: notebooks" items that follow it."""
    section = re.search(r"^## Course paths\n(.*?)(?=^## |\Z)", kit_text, flags=re.M | re.S)
    paths: list[CoursePath] = []
    for block in re.split(r"\n\s*\n", section.group(1) if section else ""):
        block = " ".join(block.split())
        if opened := re.match(r"\*\*(.+?)\*\*[.,:]?\s*(.*)", block):
            rest = opened.group(2)
            numbers = _numbers(first_sentence(rest))
            # the sentence without the list it opens with: the links below show the list
            said = re.sub(r"^(?:\d{2}(?:,\s*|\s+and\s+|\s+to\s+))*\d{2},?\s*", "", rest)
            sentence = first_sentence(said[:1].upper() + said[1:])
            parts = (("", numbers),) if numbers else ()
            paths.append(CoursePath(opened.group(1).rstrip(".,:"), sentence, parts))
        elif paths and block.startswith("- "):
            days = tuple((re.match(r"([^,:]+)", item).group(1).strip(), _numbers(item))
                         for item in re.split(r"(?:^|\s)- ", block) if item.strip())
            path = paths[-1]
            paths[-1] = CoursePath(path.name, path.sentence, path.parts + days)
    return paths


def _start_here(paths: list[CoursePath], titles: dict[str, str], kit: bool, run: bool) -> str:
    """The index's "Start here": how to run the series, then the kit's course paths, each
    notebook a link to its page (where it has one)."""
    pages = {stem[:2]: stem for stem in titles}
    lines = ["## Start here\n"]
    if run:
        lines.append(f"New here? [Run it yourself]({RUN_STEM}.md): what you need, the runnable "
                     f"series to download, and which hardware gives NCCL.\n")
    if not paths:
        return "\n".join(lines)
    where = f'the <a href="{KIT_STEM}.html#course-paths">instructor\'s kit</a>' if kit \
        else "the instructor's kit"
    lines.append(f'<p class="series-paths-lead">Three ways through the series, from {where}'
                 f'; or pick any card below.</p>' if len(paths) == 3 else
                 f'<p class="series-paths-lead">The course paths of {where}.</p>')
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
               run: bool = False) -> str:
    """index.md: "Start here" (the run page if staged, the kit's course paths), a card per
    notebook under its group's heading, the hidden toctrees (one per group) that make the
    sidebar, and a link to the instructor's kit if it is staged."""
    parts = [f"# {TITLE}\n\n{LEAD}\n"]
    if kit:
        parts.append(f"Teaching this? The [instructor's kit]({KIT_STEM}.md): course paths, "
                     f"minutes, difficulty, learning outcomes.\n")
    if run or paths:
        parts.append(_start_here(paths or [], {e.stem: e.title for e in entries}, kit, run))
    for group, members in grouped(entries):
        cards = []
        for entry in members:
            picture = (f'<img src="_static/thumbs/{entry.stem}.png" alt="">'
                       if entry.stem in thumbs else '<div class="series-nothumb">no plot</div>')
            cards.append(f'<a class="series-card" href="{entry.stem}.html">{picture}'
                         f'<span class="series-card-title">{html.escape(entry.title)}</span>'
                         f'<span class="series-card-text">'
                         f'{html.escape(summaries.get(entry.stem, ""))}</span></a>')
        parts.append(f"## {group}\n\n<div class=\"series-cards\">\n{chr(10).join(cards)}\n"
                     f"</div>\n")
        toc = "\n".join(e.stem for e in members)
        parts.append(f"```{{toctree}}\n:hidden:\n:caption: {group}\n\n{toc}\n```\n")
    parts.append(f'<p class="series-stamp">Computed with {html.escape(stamp)}</p>\n')
    return "\n".join(parts)


def kit_page(source: Path) -> str:
    """The kit's page for the book: not in the sidebar's toctrees (orphan), linked from
    the index."""
    return "---\norphan: true\n---\n\n" + source.read_text(encoding="utf-8")


def run_page(source: Path) -> str:
    """The "Run it yourself" page: outside the sidebar's toctrees, linked from every page."""
    return "---\norphan: true\n---\n\n" + source.read_text(encoding="utf-8")


def stage(executed: list[Path], src: Path, thumbs_dir: Path, stamp: str,
           kit_source: Path | None = None, run_source: Path | None = None) -> list[Entry]:
    """Write the book's sources into src: book/, a page per executed notebook, the kit's
    page (kit_source, default KIT_PAGE, if it exists), the run page (run_source, default
    RUN_PAGE, if it exists) and the index."""
    from tools.pages import as_page

    kit_source = KIT_PAGE if kit_source is None else kit_source
    run_source = RUN_PAGE if run_source is None else run_source
    shutil.copytree(BOOK_DIR, src, ignore=shutil.ignore_patterns("__pycache__"))
    entries, summaries, thumbs = [], {}, set()
    for path in executed:
        nb = nbformat.read(path, as_version=4)
        title, summary = notebook_summary(nb, path.stem)
        entries.append(Entry(path.stem, title))
        summaries[path.stem] = summary
        nbformat.write(as_page(nb), src / path.name)
        thumb = thumbs_dir / f"{path.stem}.png"
        if thumb.is_file():
            (src / "_static" / "thumbs").mkdir(parents=True, exist_ok=True)
            shutil.copy2(thumb, src / "_static" / "thumbs" / thumb.name)
            thumbs.add(path.stem)
    paths = []
    if kit_source.is_file():
        (src / f"{KIT_STEM}.md").write_text(kit_page(kit_source), encoding="utf-8")
        paths = course_paths(kit_source.read_text(encoding="utf-8"))
    if run_source.is_file():
        (src / f"{RUN_STEM}.md").write_text(run_page(run_source), encoding="utf-8")
    (src / "index.md").write_text(index_page(entries, summaries, thumbs, stamp,
                                             kit=kit_source.is_file(), paths=paths,
                                             run=run_source.is_file()), encoding="utf-8")
    return entries


def _restore_downloads(executed: list[Path], out: Path) -> None:
    """The download button offers _sources/<page>.ipynb: the notebook as it ran, not the
    page's folded copy."""
    for path in executed:
        source = out / "_sources" / path.name
        if source.parent.is_dir():
            shutil.copy2(path, source)


def render(executed: list[Path], html_dir: Path, thumbs_dir: Path, stamp: str,
           kit_source: Path | None = None) -> None:
    """Build the book of `executed` (executed notebooks, in series order) and the kit's
    page (kit_source, default KIT_PAGE) into html_dir."""
    html_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=html_dir.parent, prefix=".site-") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "html"
        stage(executed, src, thumbs_dir, stamp, kit_source)
        cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-j", "1",
               "-d", str(Path(tmp) / "doctrees"), str(src), str(out)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=SPHINX_TIMEOUT_S,
                             env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
        if run.returncode != 0:
            raise RuntimeError(f"sphinx-build exited {run.returncode}:\n"
                               f"{(run.stdout + run.stderr)[-4000:]}")
        if run.stderr.strip():
            print(run.stderr.strip()[-2000:], file=sys.stderr)
        _restore_downloads(executed, out)
        write_archive(out / ARCHIVE_NAME)
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
