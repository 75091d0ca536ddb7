"""The catalogs as the site, the notebooks and the tools read them: where they are, one read,
one msgid -> msgstr lookup. The bottom of tools/i18n: it imports no tool, so anything may
import it (tools.i18n.catalogs, which extracts and updates them, sits on top).

    lookup(page_catalog("05_all_reduce"))("What the picture shows")      # '图中所示'
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po

from helpers.paths import REPO_ROOT

LANGUAGE = "zh_CN"
LOCALES = REPO_ROOT / "locales"
SITE = "site"                          # the catalog of the tools' own strings (strings.py)
FOLD_CONTEXT = "code-fold"             # a plumbing cell's comment, as its fold line shows it


def catalog_dir(language: str = LANGUAGE, locales: Path = LOCALES) -> Path:
    return locales / language / "LC_MESSAGES"


def read(path: Path, language: str = LANGUAGE) -> Catalog:
    with open(path, "rb") as handle:
        return read_po(handle, locale=language)


def page_catalog(page: str, language: str = LANGUAGE) -> Catalog | None:
    """The `language` catalog of `page` (a notebook's stem, kit, run, site), or None."""
    path = catalog_dir(language) / f"{page}.po"
    return read(path, language) if path.is_file() else None


def lookup(catalog: Catalog, context: str | None = None) -> Callable[[str], str | None]:
    """msgid -> msgstr of the entries of `context` (None: the pages' text), never a fuzzy or
    empty one (as Sphinx's compiled .mo)."""
    table = {m.id: m.string for m in catalog
             if m.id and m.string and not m.fuzzy and m.context == context}
    return table.get
