"""The book: executed notebooks rendered by Sphinx, MyST-NB and sphinx-book-theme.

`render(executed, html_dir, thumbs_dir)` stages the pages (tools.pages), the index (a card
per notebook, its picture from thumbs_dir) and book/ (conf.py, _static/) in a temporary
folder, runs sphinx-build there, and only then puts the new site in html_dir's place: a
failed render leaves the old site whole. The theme gives the sidebar of the series, the
in-page contents, search that works from disk, dark mode, copy buttons and each page's
download (the executed notebook, as it ran: see `_restore_downloads`). The instructor's kit
(docs/kit/README.md) is one more page, linked from the index; the answer key beside it is
never staged (`KIT_PAGE` is the only file of docs/kit/ that goes in).
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

BOOK_DIR = REPO_ROOT / "book"
KIT_PAGE = REPO_ROOT / "docs" / "kit" / "README.md"   # the kit's page; never answers.md
KIT_STEM = "kit"
TITLE = "NCCL collectives, rank by rank"
LEAD = ("One notebook per collective, then the parallelism built from them: the scheme "
        "beside what every rank really held, checked against a NumPy model.")
# (heading, first, last notebook number): the seed's collectives, beyond them, parallelism,
# then a transformer block split by heads, sequence, context and experts, then a step
# fitted in memory and time, then the algorithms, failures and a plan at scale.
GROUPS = [("Collectives", 0, 7), ("Beyond the collectives", 8, 13), ("Parallelism", 14, 19),
          ("A transformer block, split", 20, 22),
          ("Fitting a step in memory and time", 23, 24),
          ("Choosing, surviving, planning", 25, 27)]
OTHER_GROUP = "More"
SPHINX_TIMEOUT_S = 600


@dataclass(frozen=True)
class Entry:
    stem: str
    title: str


def group_name(stem: str) -> str:
    number = int(stem[:2]) if stem[:2].isdigit() else None
    for name, first, last in GROUPS:
        if number is not None and first <= number <= last:
            return name
    return OTHER_GROUP


def grouped(entries: list[Entry]) -> list[tuple[str, list[Entry]]]:
    """Entries under their group's heading, in series order (GROUPS, then OTHER_GROUP)."""
    order = [name for name, _, _ in GROUPS] + [OTHER_GROUP]
    groups = {name: [e for e in entries if group_name(e.stem) == name] for name in order}
    return [(name, members) for name, members in groups.items() if members]


def _plain(markdown: str) -> str:
    return " ".join(markdown.replace("`", "").replace("*", "").split()).rstrip(";.")


def notebook_summary(nb: nbformat.NotebookNode, stem: str) -> tuple[str, str]:
    """(title, one-line summary): the '# ' heading (else `stem`) and the first 'What you will
    learn' item."""
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    title = re.search(r"^# (.+)$", text, flags=re.M)
    learn = re.search(r"What you will learn\**\s*\n- (.+?)(?:\n- |\n\n|$)", text, flags=re.S)
    summary = learn.group(1).strip() if learn else ""
    if summary[:1].isalpha():          # "what …" -> "What …", never "`dist…`" -> "Dist…"
        summary = summary[:1].upper() + summary[1:]
    return (_plain(title.group(1)) if title else stem, _plain(summary))


def index_page(entries: list[Entry], summaries: dict[str, str], thumbs: set[str],
               stamp: str, kit: bool = False) -> str:
    """index.md: a card per notebook under its group's heading, the hidden toctrees (one
    per group) that make the sidebar, and a link to the instructor's kit if it is staged."""
    parts = [f"# {TITLE}\n\n{LEAD}\n"]
    if kit:
        parts.append(f"Teaching this? The [instructor's kit]({KIT_STEM}.md): course paths, "
                     f"minutes, difficulty, learning outcomes.\n")
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


def _stage(executed: list[Path], src: Path, thumbs_dir: Path, stamp: str,
           kit_source: Path | None = None) -> list[Entry]:
    """Write the book's sources into src: book/, a page per executed notebook, the kit's
    page (kit_source, default KIT_PAGE, if it exists) and the index."""
    from tools.pages import as_page

    kit_source = KIT_PAGE if kit_source is None else kit_source
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
    if kit_source.is_file():
        (src / f"{KIT_STEM}.md").write_text(kit_page(kit_source), encoding="utf-8")
    (src / "index.md").write_text(index_page(entries, summaries, thumbs, stamp,
                                             kit=kit_source.is_file()), encoding="utf-8")
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
        _stage(executed, src, thumbs_dir, stamp, kit_source)
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
