"""Sphinx configuration of the series' site (tools.site copies it beside the pages).

The notebooks arrive executed (tools.build runs them with real engines and its own
incremental stamps), so MyST-NB only renders them: nb_execution_mode = "off".
Everything the pages load is on disk: they open from file:// with the network cut.

Every page says at its top how to run the series (the theme's `announcement`) and has the
runnable series' zip beside its own download (`article_header_end`: _templates/); tools.site
stages run.md and writes the zip. Search results show a snippet from disk: Sphinx fetch()es
a page to cut its snippet, which file:// refuses, so its summaries stay off and every page's
text goes into one script, _static/series-search-texts.js (`_keep_text`, `_write_texts`),
that series.js loads on the search page and cuts the snippets from.

Each language is a build of its own (tools.site.render: `-D language=zh_CN`, into html/zh_CN/),
of the same English pages: Sphinx translates their text with the catalogs that the staging
copies into locales/ (one per page: gettext_compact off), so a heading keeps its English id
and the language switch (_templates/series-language.html) keeps the reader's place. The
lines the tools write for a language (announcement, buttons, project) come staged in
series-strings.json.
"""
from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes
from IPython.lib.lexers import IPython3Lexer
from pygments.lexer import bygroups, inherit, using
from pygments.token import Keyword, Operator, Text

# tools.site.site_strings, in the language of this build (written by tools.site.stage)
STRINGS_FILE = Path(__file__).parent / "series-strings.json"
STRINGS = json.loads(STRINGS_FILE.read_text(encoding="utf-8"))

project = STRINGS["project"]
html_title = "nccl-notebooks"   # after each page's own title: "05 · all_reduce — nccl-notebooks"
author = "nccl-notebooks"
copyright = STRINGS["copyright"]
locale_dirs = ["locales"]        # filled by the staging for a language other than English
gettext_compact = False          # a catalog per page, named as the page

extensions = ["myst_nb", "sphinx_copybutton", "sphinx_design"]   # design: folded "In detail"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence"]
suppress_warnings = ["myst.header",       # notebooks start at "#", sections at "##"
                    "misc.highlighting_failure"]   # tracebacks a helper reshaped: shown plain

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_css_files = ["series.css"]
html_js_files = ["series.js"]
html_copy_source = True                 # the download button's .ipynb
html_show_sourcelink = False
html_last_updated_fmt = None
html_show_search_summary = False      # summaries are fetch()ed: refused from file://
templates_path = ["_templates"]
ARCHIVE = "nccl-notebooks.zip"         # tools.archive.NAME, at the site's root (tools.site)
SEARCH_TEXTS = "series-search-texts.js"
html_theme_options = {
    "announcement": STRINGS["announcement"],
    "article_header_end": ["series-archive-button.html", "series-language.html",
                           "article-header-buttons.html"],
    "use_download_button": True,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "show_navbar_depth": 1,
}
html_context = {"default_mode": "light", "series": STRINGS}
copybutton_exclude = ".linenos, .gp, .go"


class PxLexer(IPython3Lexer):
    """IPython, with the body of a `%%px` cell highlighted as Python (the body of an
    unknown cell magic is plain text to IPython's own lexer)."""

    name = "IPython3 with %%px"
    tokens = {"root": [(r"(?s)(\s*)(%%)(px\b)([^\n]*\n)(.*)",
                        bygroups(Text, Operator, Keyword, Text, using(IPython3Lexer))),
                       inherit]}


SKIPPED_TEXT = (nodes.raw, nodes.comment, nodes.substitution_definition)


def _keep_text(app, pagename, templatename, context, doctree) -> None:
    """The words a reader can find on the page: its text nodes, not raw HTML."""
    if doctree is None:
        return
    words = (str(node) for node in doctree.findall(nodes.Text)
             if not any(isinstance(up, SKIPPED_TEXT) for up in _ancestors(node)))
    app.series_texts[pagename] = " ".join(" ".join(words).split())


def _ancestors(node):
    while node.parent is not None:
        node = node.parent
        yield node


def _write_texts(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        target = Path(app.outdir) / "_static" / SEARCH_TEXTS
        target.write_text("window.SERIES_SEARCH_TEXTS = "
                          + json.dumps(app.series_texts, ensure_ascii=False) + ";\n",
                          encoding="utf-8")


def _chinese_search():
    """Sphinx's Chinese search (jieba), with the JS stemmer its index was made with.

    Sphinx 9.0 stems the Latin words of a Chinese page with the English stemmer, but its
    language_data.js then says `window.Stemmer = ChineseStemmer`, which does not exist: every
    search of a Chinese site fails ("ChineseStemmer is not defined", sphinx-doc/sphinx#14229;
    fixed upstream by #14416, after 9.0.4). This is the same language, its stemmer's code
    inlined and named as that fix names it; registered with Sphinx's add_search_language."""
    import sphinx.search
    from sphinx.search.zh import SearchChinese

    scripts = Path(sphinx.search.__file__).parent / "minified-js"

    class SeriesChinese(SearchChinese):
        js_stemmer_rawcode = None
        js_stemmer_code = "\n".join(
            [(scripts / name).read_text(encoding="utf-8")
             for name in ("base-stemmer.js", SearchChinese.js_stemmer_rawcode)]
            + ["window.Stemmer = EnglishStemmer;"])

    return SeriesChinese


def setup(app):
    app.add_lexer("ipython3", PxLexer)
    app.add_search_language(_chinese_search())
    app.series_texts = {}
    app.connect("html-page-context", _keep_text)
    app.connect("build-finished", _write_texts)
