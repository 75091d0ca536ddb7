"""A notebook's catalog applied to its markdown cells: the notebooks for JupyterLab.

    zh, done, missing = translate_notebook(nb, catalog)

The catalog is the one Sphinx's gettext builder extracts from the same notebook
(tools/i18n/catalogs.py): an entry per paragraph, heading, list item, table cell and
directive title. Each markdown cell is parsed with the parser and settings the site uses
(markdown-it-py through myst_parser.create_md_parser, book/conf.py's colon_fence); a
block's key is its inline source with its line breaks made spaces, which is Sphinx's msgid
(`node.rawsource.replace("\n", " ").strip()`); a test holds the two equal on every page.
A translated block replaces its source lines (token.map), keeping the block's prefix
("## ", "- ", indentation); a table cell is replaced inside its row. Code cells are copied
as they are.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Callable

import nbformat
from babel.messages.catalog import Catalog
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser

from tools.i18n import po

# book/conf.py: myst_enable_extensions = ["colon_fence"]
_MD = create_md_parser(MdParserConfig(enable_extensions={"colon_fence"}), RendererHTML)
_BLOCK_OPEN = {"paragraph_open", "heading_open"}
_CELL_OPEN = {"th_open", "td_open"}


@dataclass
class Unit:
    """A translatable unit of a markdown cell: its msgid and where its source lies."""
    msgid: str
    kind: str                 # "block" (paragraph, heading, list item's paragraph) or "cell"
    start: int                # first source line (0-based)
    end: int                  # one past its last line
    raw: str                  # the inline source as written (line breaks kept)


def msgid_of(inline_content: str) -> str:
    return inline_content.replace("\n", " ").strip()


_DIRECTIVE = re.compile(r"^\{([\w-]+)\}\s*(.*)$")
_OPTION = re.compile(r"^:[\w-]+:")


def _directive_units(tok, offset: int) -> list[Unit]:
    """A MyST directive (```{name} or :::{name}): its argument (a dropdown's or admonition's
    title) and its body, parsed as markdown, at their lines. Code-like directives are left."""
    m = _DIRECTIVE.match(tok.info.strip())
    if not m or m.group(1) in ("code-cell", "code-block", "code", "math", "raw", "toctree",
                                "eval-rst", "figure", "image"):
        return []
    start = tok.map[0] + offset
    found = [Unit(m.group(2).strip(), "block", start, start + 1, m.group(2).strip())] \
        if m.group(2).strip() else []
    body = tok.content.split("\n")
    skip = 0
    while skip < len(body) and _OPTION.match(body[skip]):
        skip += 1
    found += units("\n".join(body[skip:]), start + 1 + skip)
    return found


def units(source: str, offset: int = 0) -> list[Unit]:
    """The translatable units of one markdown cell, in source order (line numbers of the
    cell; `offset`: where a directive's body starts)."""
    found = []
    tokens = _MD.parse(source)
    for i, tok in enumerate(tokens):
        if tok.type in ("colon_fence", "fence") and tok.map:
            found += _directive_units(tok, offset)
            continue
        if tok.type != "inline" or not tok.content.strip() or i == 0:
            continue
        opener = tokens[i - 1].type
        if opener in _BLOCK_OPEN and tokens[i - 1].map:
            start, end = tokens[i - 1].map
            if tokens[i - 1].markup in ("=", "-"):      # a setext heading: keep its underline
                end -= 1
            found.append(Unit(msgid_of(tok.content), "block", start + offset, end + offset,
                              tok.content))
        elif opener in _CELL_OPEN and tok.map:
            start, end = tok.map
            found.append(Unit(msgid_of(tok.content), "cell", start + offset, end + offset,
                              tok.content))
    return found


def _translate_block(lines: list[str], unit: Unit, text: str) -> list[str]:
    """The unit's source lines with `text` in place of its inline content: the first line's
    prefix ("## ", "- ", "1. ", indentation) and the continuation indent are kept."""
    first = lines[unit.start]
    head = unit.raw.split("\n", 1)[0].strip()
    at = first.find(head)
    if at < 0:
        raise ValueError(f"cannot locate {head!r} in {first!r}")
    prefix = first[:at]
    indent = " " * len(prefix) if prefix.strip(" ") else prefix
    tail = first[at + len(head):].rstrip("\n") if unit.end - unit.start == 1 else ""
    tail = tail if tail.strip(" #") == "" else ""       # a closing "##" of an ATX heading
    out = [prefix + text.split("\n")[0]] + [indent + line for line in text.split("\n")[1:]]
    out[-1] += tail
    return [line + "\n" for line in out]


def translate_cell(source: str, lookup: Callable[[str], str | None]
                   ) -> tuple[str, int, list[str]]:
    """(translated source, how many units were translated, the msgids without translation)."""
    # "\n" only, as markdown-it counts lines (splitlines would also split at U+2028)
    lines = [line + "\n" for line in source.split("\n")]
    trailing = source.endswith("\n")
    if trailing:
        lines.pop()
    done, missing = 0, []
    for unit in reversed(units(source)):
        text = lookup(unit.msgid)
        if not text:
            missing.append(unit.msgid)
            continue
        if unit.kind == "cell":
            row = lines[unit.start]
            cells = row.split("|")
            hits = [k for k, c in enumerate(cells) if c.strip() == unit.raw.strip()]
            if not hits:
                missing.append(unit.msgid)
                continue
            k = hits[0]                      # equal cells of one row translate alike
            escaped = re.sub(r"(?<!\\)\|", r"\\|", text)     # a bare | would end the cell
            cells[k] = cells[k].replace(unit.raw.strip(), escaped, 1)
            lines[unit.start] = "|".join(cells)
        else:
            lines[unit.start:unit.end] = _translate_block(lines, unit, text)
        done += 1
    out = "".join(lines)
    return (out if trailing else out[:-1]), done, missing[::-1]


def translate_notebook(nb: nbformat.NotebookNode, catalog: Catalog, language: str = "zh_CN"
                       ) -> tuple[nbformat.NotebookNode, int, list[str]]:
    """A copy of `nb` with every markdown cell translated; code cells are the same objects'
    copies, byte for byte. Returns (notebook, translated units, missing msgids)."""
    out = copy.deepcopy(nb)
    lookup = po.lookup(catalog)
    done, missing = 0, []
    for cell in out.cells:
        if cell.cell_type != "markdown":
            continue
        cell.source, n, miss = translate_cell(cell.source, lookup)
        done += n
        missing += miss
    out.metadata.setdefault("nccl_notebooks", {})["language"] = language
    return out, done, missing


def notebook_msgids(nb: nbformat.NotebookNode) -> list[str]:
    """Every msgid the notebook's markdown cells give (the same keys as Sphinx's)."""
    return [u.msgid for c in nb.cells if c.cell_type == "markdown" for u in units(c.source)]


def translated_page(nb: nbformat.NotebookNode, stem: str, language: str | None,
                    whole: bool = True) -> nbformat.NotebookNode:
    """`nb`, the page `stem`, its markdown in `language` (tools/i18n), its code cells and
    outputs as they are. A page the language's catalog does not cover whole is an error
    naming it and its blocks; with `whole` False (a site's page, a download), what the
    catalog lacks stays English, as Sphinx leaves it."""
    if language in (None, "en"):
        return nb
    catalog = po.page_catalog(stem, language)
    if catalog is None:
        if not whole:
            return nb
        raise SystemExit(f"{stem}: no {language} catalog ({po.catalog_dir(language)})")
    translation, _, missing = translate_notebook(nb, catalog, language)
    if missing and whole:
        raise SystemExit(f"{stem}: {len(missing)} blocks have no {language} translation, "
                         f"the first: {missing[0]!r} (make i18n-update)")
    return translation
