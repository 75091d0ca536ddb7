"""The strings the tools write themselves (a student copy's note, the site's own lines),
translated through the `site` catalog of locales/<language>/, and a page's fold lines.

    STUDENT_NOTE = N_("> **Student copy.** ...")     # marked where it is defined
    translated(STUDENT_NOTE, "zh_CN")                # the catalog's translation, else it
    fold_line("start the ranks", "05_all_reduce", "zh_CN")   # a plumbing cell's comment

`catalogs.extract` writes site.pot from every `N_("...")` under tools/ (Babel's
extractor: `catalogs.write_site_template`), so the catalog follows these strings as the
pages' catalogs follow the pages.
"""
from __future__ import annotations

import functools

from tools.i18n import po


def N_(text: str) -> str:
    """Mark `text` for the site catalog; it stays the English."""
    return text


@functools.cache
def _lookup(language: str, page: str | None = None, context: str | None = None):
    catalog = po.page_catalog(page or po.SITE, language)
    return po.lookup(catalog, context) if catalog is not None else lambda _: None


def translated(text: str, language: str | None, page: str | None = None,
               context: str | None = None) -> str:
    """`text` in `language` (None or "en": as it is), from the catalog of `page` (default:
    the site's), entries of `context`; a string the catalog lacks raises, naming it: run
    `make i18n-update` and translate it."""
    if language in (None, "en"):
        return text
    found = _lookup(language, page, context)(text)
    if found is None:
        raise KeyError(f"not in the {language} catalog of {page or po.SITE}: {text!r} "
                       "(make i18n-update, then translate it)")
    return found


def fold_line(comment: str, page: str | None, language: str | None) -> str:
    """The line a folded plumbing cell of `page` shows for its first comment, in
    `language`: its entry (context "code-fold") of the page's catalog. The code and its
    comment stay as they are."""
    return translated(comment, language, page, po.FOLD_CONTEXT)
