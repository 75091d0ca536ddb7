"""Sphinx configuration of the series' site (tools.site copies it beside the pages).

The notebooks arrive executed (tools.build runs them with real engines and its own
incremental stamps), so MyST-NB only renders them: nb_execution_mode = "off".
Everything the pages load is on disk: they open from file:// with the network cut.
"""
from __future__ import annotations

from IPython.lib.lexers import IPython3Lexer
from pygments.lexer import bygroups, inherit, using
from pygments.token import Keyword, Operator, Text

project = "NCCL collectives, rank by rank"
html_title = "nccl-notebooks"   # after each page's own title: "05 · all_reduce — nccl-notebooks"
author = "nccl-notebooks"
copyright = "the nccl-notebooks authors"

extensions = ["myst_nb", "sphinx_copybutton"]
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
html_theme_options = {
    "use_download_button": True,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "show_navbar_depth": 1,
}
html_context = {"default_mode": "light"}
copybutton_exclude = ".linenos, .gp, .go"


class PxLexer(IPython3Lexer):
    """IPython, with the body of a `%%px` cell highlighted as Python (the body of an
    unknown cell magic is plain text to IPython's own lexer)."""

    name = "IPython3 with %%px"
    tokens = {"root": [(r"(?s)(\s*)(%%)(px\b)([^\n]*\n)(.*)",
                        bygroups(Text, Operator, Keyword, Text, using(IPython3Lexer))),
                       inherit]}


def setup(app):
    app.add_lexer("ipython3", PxLexer)
