"""The catalogs: extracted by Sphinx's gettext builder, kept by Babel.

    pots = extract(folder)               # a .pot per page of the site, from the English
    changed = update(pots)               # every catalog of locales/zh_CN follows them
    changed = update(pots, add=["05_all_reduce"])     # and one more page to translate
    problems(catalog)                    # its untranslated and fuzzy entries

The pages are staged as the site stages them (tools.site.stage) from the notebooks as
committed, so a msgid is exactly what the site's Chinese build looks up. Settings: one
catalog per page (gettext_compact off), no "#: file:line" lines (an edit moves no other
entry) and no uuids. Babel (Sphinx's own dependency, and the engine of sphinx-intl) merges:
an English edit turns that entry fuzzy with its old translation kept (the catalog's diff
shows the old English), while every other entry and every other catalog stays as it was.
Babel 2.19 would write the old English as `#| msgid` lines, but wraps them at 76 columns
into lines no reader parses, so the catalogs carry none.
"""
from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import write_po

from helpers.paths import REPO_ROOT
from tools import series
from tools.i18n.po import (FOLD_CONTEXT, LANGUAGE, LOCALES, SITE, catalog_dir,  # noqa: F401
                           lookup, page_catalog, read)

GETTEXT_SETTINGS = ("gettext_compact=0", "gettext_location=0", "gettext_uuid=0")
STAMP = "the English sources"          # the index's stamp line: raw HTML, never extracted
_WORD = re.compile(r"[A-Za-z]{3,}")
# Words of a number or a formula, that stay as written: units, and functions (⌈log₂ n⌉).
NOT_WORDS = {"KiB", "MiB", "GiB", "TiB", "log", "exp", "min", "max", "sqrt"}


def pages() -> list[Path]:
    """The series' notebooks, in series order."""
    return [series.NOTEBOOK_DIR / f"{stem}.ipynb" for stem in series.load()]


def extract(folder: Path, notebooks: list[Path] | None = None) -> Path:
    """Stage the site's pages in `folder`/src and write a .pot per page to `folder`/pot,
    site.pot of the tools' own strings (tools/i18n/strings.py) and readme.pot of README.md's
    quick start; returns the folder."""
    from tools import site

    notebooks = pages() if notebooks is None else notebooks
    src, pot = folder / "src", folder / "pot"
    site.stage(notebooks, src, folder / "thumbs", STAMP)
    cmd = [sys.executable, "-m", "sphinx", "-b", "gettext", "-q", "-d", str(folder / "doctrees"),
           *(f"-D{setting}" for setting in GETTEXT_SETTINGS), str(src), str(pot)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=site.SPHINX_TIMEOUT_S)
    if run.returncode != 0:
        raise RuntimeError(f"sphinx gettext exited {run.returncode}:\n{run.stderr[-3000:]}")
    (pot / "sphinx.pot").unlink(missing_ok=True)      # the theme's own strings, not ours
    add_fold_lines(pot, notebooks)
    write_site_template(pot)
    write_readme_template(pot)
    return pot


def add_fold_lines(pot_dir: Path, notebooks: list[Path]) -> None:
    """Each notebook's fold lines that are prose (tools.pages.comment_summaries: a plumbing
    cell's first comment) into its .pot, with the context FOLD_CONTEXT: the page shows
    them, Sphinx does not see them (they are cell metadata by then)."""
    import nbformat

    from tools.pages import comment_summaries

    for notebook in notebooks:
        path = pot_dir / f"{notebook.stem}.pot"
        lines = comment_summaries(nbformat.read(notebook, as_version=4))
        if not lines or not path.is_file():
            continue
        template = read(path, None)
        for line in lines:
            template.add(line, context=FOLD_CONTEXT)
        _write_template(template, path)


def write_site_template(pot_dir: Path) -> Path:
    """site.pot: every string marked N_ in tools/, in order of the files."""
    template = Catalog(project="nccl-notebooks", fuzzy=False)
    marked = extract_from_dir(str(REPO_ROOT / "tools"), keywords={"N_": None})
    for _, _, message, _, _ in marked:
        template.add(message)
    return _write_template(template, pot_dir / f"{SITE}.pot")


def write_readme_template(pot_dir: Path) -> Path:
    """readme.pot: the blocks of README.md's quick start (tools/i18n/readme.py), parsed as
    the notebooks' markdown is; README is no page of the site, so Sphinx never sees it."""
    from tools.i18n import readme
    from tools.i18n.cells import units

    template = Catalog(project="nccl-notebooks", fuzzy=False)
    for unit in units(readme.quick_start(readme.README.read_text(encoding="utf-8"))):
        template.add(unit.msgid)
    return _write_template(template, pot_dir / f"{readme.STEM}.pot")


def _write_template(template: Catalog, path: Path) -> Path:
    with open(path, "wb") as handle:
        write_po(handle, template, width=0, omit_header=False)
    return path


def _text(catalog: Catalog) -> bytes:
    """The catalog as the file holds it: one line per msgid and msgstr, however long."""
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=0)
    return buffer.getvalue()


def holds_no_prose(msgid: str) -> bool:
    """A number, a unit, code or a formula (`1.88 GB`, `` `x` ``): nothing to translate."""
    words = _WORD.findall(re.sub(r"`[^`]*`|\$[^$]*\$", "", msgid))
    return all(word in NOT_WORDS for word in words)


def update(pot_dir: Path, add: list[str] = (), language: str = LANGUAGE,
           locales: Path = LOCALES) -> list[str]:
    """Bring every catalog of `language` (and a new one for each page in `add`) to the
    .pot files; an entry that holds no prose gets its English as its translation. Returns
    the names of the catalogs written: one whose text would not change is left alone."""
    out = catalog_dir(language, locales)
    templates = {pot.stem: pot for pot in pot_dir.glob("*.pot")}
    unknown = sorted(set(add) - set(templates))
    if unknown:
        raise ValueError(f"no page named {unknown}; the pages: {sorted(templates)}")
    names = sorted({p.stem for p in out.glob("*.po") if p.stem in templates} | set(add))
    changed = []
    for name in names:
        template, path = read(templates[name], language), out / f"{name}.po"
        catalog = read(path, language) if path.is_file() else new_catalog(name, language)
        catalog.update(template, update_creation_date=False)
        catalog.obsolete.clear()                 # git keeps the history
        for message in catalog:
            message.flags.discard("python-format")     # Babel's guess from "40 % of"
            if message.id and holds_no_prose(message.id) and (message.fuzzy
                                                              or not message.string):
                message.string = message.id         # a number's fuzzy match is another
                message.flags.discard("fuzzy")      # number: its own English is right
        text = _text(catalog)
        if not path.is_file() or path.read_bytes() != text:
            out.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text)
            changed.append(path.name)
    return changed


def new_catalog(page: str, language: str = LANGUAGE) -> Catalog:
    """An empty catalog of `page`, its header saying what it is and where its terms are."""
    catalog = Catalog(locale=language, project="nccl-notebooks", fuzzy=False,
                      copyright_holder="the nccl-notebooks authors",
                      msgid_bugs_address="", last_translator="", language_team="")
    catalog.header_comment = (f"# {page}: the {language} catalog of this page of "
                              "nccl-notebooks.\n# Terms: docs/glossary-zh.md. Kept in step "
                              "with the English by: python -m tools.i18n update")
    return catalog


def names_only(msgid: str) -> bool:
    """Names a translation may keep as they are (`NVLink`, `Llama-3-8B`, `ZeRO-1`, `GPU`):
    outside code, every word of three letters or more has a digit or two capitals; a word
    like "Measured" or "the" is English to translate."""
    words = re.findall(r"[A-Za-z][\w.-]*", re.sub(r"`[^`]*`|\$[^$]*\$", "", msgid))
    return all(re.search(r"\d|[A-Z].*[A-Z]", word)
               or re.sub(r"[^A-Za-z]", "", word) in NOT_WORDS
               for word in words if len(word) >= 3)


def problems(catalog: Catalog) -> list[tuple[str, str]]:
    """(state, msgid) of each entry a reader would see in English: untranslated (empty, or
    the English itself where it holds prose, not only names) or fuzzy (its English
    changed since)."""
    found = []
    for message in catalog:
        if not message.id:
            continue
        if message.fuzzy:
            found.append(("fuzzy", message.id))
        elif not message.string or (message.string == message.id
                                    and not names_only(message.id)):
            found.append(("untranslated", message.id))
    return found
