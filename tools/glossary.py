"""The Chinese edition's glossary (docs/glossary-zh.md): one rendering per term.

    terms = load()          # [Term("process group", "进程组", ("blog", "Playbook"), ""), ...]

The catalogs of the Chinese edition are checked against it: an entry whose English holds
a term must hold the term's rendering.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from helpers.paths import REPO_ROOT

GLOSSARY = REPO_ROOT / "docs" / "glossary-zh.md"
SOURCES = ("blog", "Playbook", "d2l", "JupyterLab")
HEADER = ["English", "中文", "source", "note"]


@dataclass(frozen=True)
class Term:
    english: str
    chinese: str
    sources: tuple[str, ...]
    note: str


class GlossaryError(ValueError):
    """A row of the glossary that is not one term, one rendering and known sources."""


def load(path: Path = GLOSSARY) -> list[Term]:
    """The glossary's table, row by row; a GlossaryError names a bad row."""
    rows = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.startswith("|")]
    if not rows or _cells(rows[0]) != HEADER:
        raise GlossaryError(f"{path.name}: the table must start with | {' | '.join(HEADER)} |")
    terms = []
    for line in rows[2:]:                      # after the header and its --- line
        cells = _cells(line)
        if len(cells) != len(HEADER) or not cells[0] or not cells[1]:
            raise GlossaryError(f"{path.name}: not a term and its rendering: {line}")
        sources = tuple(s.strip() for s in cells[2].split(",") if s.strip())
        unknown = [s for s in sources if s not in SOURCES]
        if unknown:
            raise GlossaryError(f"{path.name}: {cells[0]!r} names unknown sources {unknown}")
        terms.append(Term(cells[0], cells[1], sources, cells[3]))
    return terms


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]
