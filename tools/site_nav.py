"""Series navigation for the built pages (tools.build) and the slides (tools.classroom).

Every page gets a bar (previous · all notebooks · next) at its top and bottom and the
series' contents, grouped, with the page itself marked (aria-current="page"). The block
sits between NAV_START and NAV_END so a later build can rewrite it in pages it did not
execute again (the order or the set of pages may have changed). Plain links and inline
CSS: it works from disk with no network.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

NAV_START, NAV_END = "<!-- series-nav -->", "<!-- /series-nav -->"
# (heading, first, last notebook number): the seed's collectives, beyond them, parallelism.
GROUPS = [("Collectives", 0, 7), ("Beyond the collectives", 8, 13), ("Parallelism", 14, 19)]
OTHER_GROUP = "More"

NAV_STYLE = """
.series-bar,.series-toc{font-family:system-ui,sans-serif;font-size:.92rem;line-height:1.4}
.series-bar{display:flex;justify-content:space-between;gap:1rem;padding:.5rem 1rem;
  margin:0 auto;max-width:70rem;border-bottom:1px solid #d0d7de}
.series-bar.bottom{border-bottom:0;border-top:1px solid #d0d7de}
.series-bar a,.series-toc a{color:#0b5cad;text-decoration:none}
.series-bar a:hover,.series-toc a:hover{text-decoration:underline}
.series-bar .none{color:#8c959f}
.series-toc{max-width:70rem;margin:1rem auto;padding:0 1rem;display:grid;gap:1rem;
  grid-template-columns:repeat(auto-fill,minmax(16rem,1fr))}
.series-toc h2{font-size:1rem;margin:.2rem 0}
.series-toc ol{margin:0;padding-left:0;list-style:none}
.series-toc a[aria-current=page]{font-weight:bold;color:#c2410c}
"""


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


def _link(entry: Entry | None, rel: str, suffix: str) -> str:
    arrow_before, arrow_after = ("← ", "") if rel == "prev" else ("", " →")
    if entry is None:
        return f'<span class="none">{arrow_before}{"first" if rel == "prev" else "last"}' \
               f" notebook{arrow_after}</span>"
    return (f'<a rel="{rel}" href="{entry.stem}{suffix}">'
            f"{arrow_before}{html.escape(entry.title)}{arrow_after}</a>")


def bar(entries: list[Entry], current: str, index_href: str = "index.html",
        suffix: str = ".html", position: str = "top", contents_link: bool = True) -> str:
    stems = [e.stem for e in entries]
    i = stems.index(current)
    prev = entries[i - 1] if i > 0 else None
    nxt = entries[i + 1] if i + 1 < len(entries) else None
    return (f'<nav class="series-bar {position}" aria-label="series">'
            f'{_link(prev, "prev", suffix)}'
            f'<a rel="index" href="{index_href}">All notebooks</a>'
            f'{CONTENTS_LINK if contents_link else ""}'
            f'{_link(nxt, "next", suffix)}</nav>')


def contents(entries: list[Entry], current: str | None, suffix: str = ".html") -> str:
    """The grouped table of contents; `current` (a stem, or None on the index) is marked."""
    parts = ['<nav class="series-toc" id="series-contents" aria-label="contents">']
    for name, members in grouped(entries):
        marked = ' aria-current="page"'
        items = "".join(
            f'<li><a href="{e.stem}{suffix}"{marked if e.stem == current else ""}>'
            f"{html.escape(e.title)}</a></li>" for e in members)
        parts.append(f"<div class=\"group\"><h2>{html.escape(name)}</h2><ol>{items}</ol></div>")
    return "".join(parts) + "</nav>"


def page_nav(entries: list[Entry], current: str) -> tuple[str, str]:
    """(block for the top of the body, block for its end) of page `current`."""
    top = f"{NAV_START}<style>{NAV_STYLE}</style>{bar(entries, current)}{NAV_END}"
    bottom = (f"{NAV_START}{bar(entries, current, position='bottom')}"
              f"{contents(entries, current)}{NAV_END}")
    return top, bottom


CONTENTS_LINK = '<a href="#series-contents">Contents</a>'
_BLOCK = re.compile(re.escape(NAV_START) + ".*?" + re.escape(NAV_END), flags=re.S)


def with_nav(page: str, entries: list[Entry], current: str) -> str:
    """`page` with its navigation blocks (re)written after <body> and before </body>."""
    page = _BLOCK.sub("", page)
    top, bottom = page_nav(entries, current)
    body = re.search(r"<body[^>]*>", page)
    if body is None or "</body>" not in page:
        raise ValueError(f"page {current} has no <body> … </body> to put the navigation in")
    page = page[:body.end()] + top + page[body.end():]
    end = page.rindex("</body>")
    return page[:end] + bottom + page[end:]


SLIDE_STYLE = ".reveal .series-bar{font-size:18px}.reveal .series-toc{font-size:15px;" \
              "text-align:left}.reveal .series-toc h2{font-size:17px;text-transform:none}"


def with_slide_nav(page: str, entries: list[Entry], current: str,
                   index_href: str = "../html/index.html") -> str:
    """Slides `page` with the bar and the contents (to the other decks) on its title slide.

    No "#series-contents" link: reveal.js reads the URL's fragment as a slide number.
    """
    page = _BLOCK.sub("", page)
    start = page.find('<div class="slides">')
    end = page.find("</section>", start)
    if start < 0 or end < 0:
        raise ValueError(f"slides {current} have no first <section> to put the navigation in")
    block = (f"{NAV_START}<style>{NAV_STYLE}{SLIDE_STYLE}</style>"
             f"{bar(entries, current, index_href, '.slides.html', contents_link=False)}"
             f"{contents(entries, current, '.slides.html')}{NAV_END}")
    return page[:end] + block + page[end:]


def renavigate(html_dir: Path, entries: list[Entry]) -> None:
    """Rewrite the navigation of every page of `entries` in html_dir (atomically)."""
    from helpers.runtime.files import atomic_write

    for entry in entries:
        path = html_dir / f"{entry.stem}.html"
        old = path.read_text(encoding="utf-8")
        new = with_nav(old, entries, entry.stem)
        if new != old:
            atomic_write(path, new)
