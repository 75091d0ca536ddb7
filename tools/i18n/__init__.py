"""The Chinese edition from one source: the English notebooks and pages, and a gettext
catalog per page under locales/zh_CN/LC_MESSAGES/ (docs/glossary-zh.md fixes the terms).

    python -m tools.i18n update [--add PAGE ...]   catalogs follow the English (make i18n-update)
    python -m tools.i18n notebooks                 build/zh_CN/: notebooks/, kit.md, run.md
                                                   (make notebooks-zh)
    python -m tools.i18n status                    per page: translated, fuzzy, untranslated

catalogs.py extracts (Sphinx's gettext builder) and merges (Babel); cells.py applies a
catalog to a notebook's markdown cells; strings.py translates the tools' own strings
(marked N_) through the `site` catalog.
"""
