"""Series navigation on the slides (tools.classroom): the title slide of every deck gets a
bar (previous deck · the book's index · next deck), and a sub-slide of the title's stack,
after the title's own sub-slides (its picture), the series' contents, grouped, with the
deck itself marked (aria-current="page"). The book pages (tools.site) have Sphinx's own
navigation; reveal.js decks have none, hence this. Plain links and inline CSS: it works
from disk with no network.
"""
from __future__ import annotations

import html

from tools.i18n.strings import N_, translated
from tools.site import Entry, grouped

FIRST, LAST, ALL = N_("first notebook"), N_("last notebook"), N_("All notebooks")
SERIES, CONTENTS = N_("series"), N_("contents")      # the bars' aria-labels

NAV_STYLE = """
.series-bar,.series-toc{font-family:system-ui,sans-serif;font-size:.92rem;line-height:1.4}
.series-bar{display:flex;justify-content:space-between;gap:1rem;padding:.5rem 1rem;
  margin:0 auto;max-width:70rem;border-bottom:1px solid #d0d7de}
.series-bar a,.series-toc a{color:#0b5cad;text-decoration:none}
.series-bar a:hover,.series-toc a:hover{text-decoration:underline}
.series-bar .none{color:#8c959f}
.series-toc{max-width:70rem;margin:1rem auto;padding:0 1rem;display:grid;gap:1rem;
  grid-template-columns:repeat(auto-fill,minmax(16rem,1fr))}
.series-toc h2{font-size:1rem;margin:.2rem 0}
.series-toc ol{margin:0;padding-left:0;list-style:none}
.series-toc a[aria-current=page]{font-weight:bold;color:#c2410c}
"""


def _link(entry: Entry | None, rel: str, suffix: str, language: str | None) -> str:
    arrow_before, arrow_after = ("← ", "") if rel == "prev" else ("", " →")
    if entry is None:
        end = translated(FIRST if rel == "prev" else LAST, language)
        return f'<span class="none">{arrow_before}{end}{arrow_after}</span>'
    return (f'<a rel="{rel}" href="{entry.stem}{suffix}">'
            f"{arrow_before}{html.escape(entry.title)}{arrow_after}</a>")


def bar(entries: list[Entry], current: str, index_href: str, suffix: str,
        language: str | None = None) -> str:
    """Previous deck · the book's index · next deck; its words in `language`."""
    stems = [e.stem for e in entries]
    i = stems.index(current)
    prev = entries[i - 1] if i > 0 else None
    nxt = entries[i + 1] if i + 1 < len(entries) else None
    return (f'<nav class="series-bar" aria-label="{translated(SERIES, language)}">'
            f'{_link(prev, "prev", suffix, language)}'
            f'<a rel="index" href="{index_href}">{translated(ALL, language)}</a>'
            f'{_link(nxt, "next", suffix, language)}</nav>')


def group_name(name: str, language: str | None) -> str:
    """A group's name (notebooks/series.toml) in `language`, as the index page's catalog
    has it; a name it lacks raises, naming it."""
    return translated(name, language, page="index")


def contents(entries: list[Entry], current: str, suffix: str,
             language: str | None = None) -> str:
    """The grouped table of contents, `current` (a stem) marked; the groups' names in
    `language` (as the index page has them: its catalog)."""
    parts = ['<nav class="series-toc" id="series-contents" '
             f'aria-label="{translated(CONTENTS, language)}">']
    for name, members in grouped(entries):
        name = group_name(name, language)
        marked = ' aria-current="page"'
        items = "".join(
            f'<li><a href="{e.stem}{suffix}"{marked if e.stem == current else ""}>'
            f"{html.escape(e.title)}</a></li>" for e in members)
        parts.append(f"<div class=\"group\"><h2>{html.escape(name)}</h2><ol>{items}</ol></div>")
    return "".join(parts) + "</nav>"


SLIDE_STYLE = ".reveal .series-bar{font-size:20px;margin:0 0 12px}" \
              ".reveal .series-toc{font-size:16px;" \
              "text-align:left;margin:0;grid-template-columns:repeat(4,1fr);max-width:none}" \
              ".reveal .series-toc h2{font-size:18px;text-transform:none}" \
              ".reveal .series-toc li{margin:0}"


def with_slide_nav(page: str, entries: list[Entry], current: str,
                   index_href: str = "../html/index.html", language: str | None = None) -> str:
    """Slides `page` with the bar on its title slide (above the title) and the contents (to
    the other decks) on a sub-slide of their own, the last below the title slide (the
    title's own sub-slides, the rest of its bullets, come first); their words in
    `language`."""
    start = page.find('<div class="slides">')
    first = page.find("<section", start)
    first = page.find("<section", first + 1)          # the title's (vertical) slide
    opened = page.find(">", first) + 1
    end = page.find("</section>", opened)
    if start < 0 or first < 0 or end < 0:
        raise ValueError(f"slides {current} have no first <section> to put the navigation in")
    last = end + len("</section>")                    # the title stack's last sub-slide
    while page[last:].lstrip().startswith("<section"):
        last = page.find("</section>", last) + len("</section>")
    return (page[:opened] + f"<style>{NAV_STYLE}{SLIDE_STYLE}</style>"
            + bar(entries, current, index_href, ".slides.html", language) + page[opened:last]
            + "<section>" + contents(entries, current, ".slides.html", language) + "</section>"
            + page[last:])
