"""The strings the tools write themselves (a student copy's note, later the site's own
lines), translated through the `site` catalog of locales/<language>/.

    STUDENT_NOTE = N_("> **Student copy.** ...")     # marked where it is defined
    translated(STUDENT_NOTE, "zh_CN")                # the catalog's translation, else it

`catalogs.extract` writes site.pot from every `N_("...")` under tools/ (Babel's
extractor: `catalogs.write_site_template`), so the catalog follows these strings as the
pages' catalogs follow the pages.
"""
from __future__ import annotations

import functools

from tools.i18n import catalogs

CATALOG = catalogs.SITE


def N_(text: str) -> str:
    """Mark `text` for the site catalog; it stays the English."""
    return text


@functools.cache
def _lookup(language: str):
    catalog = catalogs.page_catalog(CATALOG, language)
    return catalogs.lookup(catalog) if catalog is not None else lambda _: None


def translated(text: str, language: str | None) -> str:
    """`text` in `language` (None or "en": as it is); a string the catalog lacks raises,
    naming it: run `make i18n-update` and translate it."""
    if language in (None, "en"):
        return text
    found = _lookup(language)(text)
    if found is None:
        raise KeyError(f"not in the {language} {CATALOG} catalog: {text!r} "
                       "(make i18n-update, then translate it)")
    return found
