"""The series' one table, notebooks/series.toml: per notebook, by its file stem, its group on
the site, the notebooks it needs, its card's figure and its learning outcomes (the file's
own comment says what each field means). tools.site, tools.kit and the tests read it here;
the number of notebooks is the number of its entries, never a literal.

`load()` checks the table against notebooks/ and raises SeriesError naming the stem and the
field: a notebook without an entry, an entry without its notebook, a field missing, of the
wrong type or unknown, a need that is not an earlier notebook, a group split in two.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from helpers.paths import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
TABLE_NAME = "series.toml"
STEM = re.compile(r"\d\d_[a-z0-9_]+")
NUMBER = re.compile(r"\d\d")
HOW = "docs/ARCHITECTURE.md, \"Add a notebook\""


class SeriesError(ValueError):
    """notebooks/series.toml does not describe notebooks/: the message says where."""


@dataclass(frozen=True)
class Notebook:
    """One entry of the table."""

    stem: str
    group: str
    needs: tuple[str, ...]
    thumbnail: str
    outcomes: tuple[str, ...]

    @property
    def number(self) -> str:
        return self.stem[:2]


def _text(where: str, field: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SeriesError(f"{where}.{field}: a non-empty string, not {value!r}")
    return value


def _texts(where: str, field: str, value: object, pattern: re.Pattern | None = None,
           empty: bool = True) -> tuple[str, ...]:
    if not isinstance(value, list) or (not empty and not value):
        raise SeriesError(f"{where}.{field}: a list{'' if empty else ' of one item or more'}"
                          f" of strings, not {value!r}")
    for item in value:
        if pattern is not None and not (isinstance(item, str) and pattern.fullmatch(item)):
            raise SeriesError(f"{where}.{field}: {item!r} is not a notebook number "
                              f"(two digits, as \"07\")")
        _text(where, field, item)
    return tuple(value)


def _entry(stem: str, fields: object, where: str) -> Notebook:
    if not isinstance(fields, dict):
        raise SeriesError(f"{where}: [{stem}] is not a table of fields")
    wanted = {"group", "needs", "thumbnail", "outcomes"}
    if missing := sorted(wanted - set(fields)):
        raise SeriesError(f"{where}: [{stem}] has no {', '.join(missing)}")
    if unknown := sorted(set(fields) - wanted):
        raise SeriesError(f"{where}: [{stem}] has unknown fields {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(wanted))})")
    at = f"{where}: [{stem}]"
    return Notebook(stem, _text(at, "group", fields["group"]),
                    _texts(at, "needs", fields["needs"], NUMBER),
                    _text(at, "thumbnail", fields["thumbnail"]),
                    _texts(at, "outcomes", fields["outcomes"], empty=False))


def _read(path: Path) -> dict:
    try:
        with path.open("rb") as source:
            return tomllib.load(source)
    except FileNotFoundError:
        raise SeriesError(f"{path}: missing (the series' table: {HOW})") from None
    except tomllib.TOMLDecodeError as err:
        raise SeriesError(f"{path}: not valid TOML: {err}") from None


def load(notebook_dir: Path = NOTEBOOK_DIR) -> dict[str, Notebook]:
    """stem → its entry, in series order (by number), checked against the notebooks of
    `notebook_dir` (its [0-9][0-9]_*.ipynb) and against itself."""
    path = notebook_dir / TABLE_NAME
    where = f"{notebook_dir.name}/{TABLE_NAME}"
    raw = _read(path)
    files = {p.stem for p in notebook_dir.glob("[0-9][0-9]_*.ipynb")}
    if unlisted := sorted(files - set(raw)):
        raise SeriesError(f"{', '.join(f'{notebook_dir.name}/{s}.ipynb' for s in unlisted)}: "
                          f"no entry in {where} (add [{unlisted[0]}] with group, needs, "
                          f"thumbnail and outcomes: {HOW})")
    for stem in raw:
        if not STEM.fullmatch(stem):
            raise SeriesError(f"{where}: [{stem}] is not a notebook stem (\"07_name\")")
    if orphans := sorted(set(raw) - files):
        raise SeriesError(f"{where}: [{orphans[0]}] names {notebook_dir.name}/{orphans[0]}"
                          f".ipynb, which does not exist")
    entries = {stem: _entry(stem, raw[stem], where) for stem in sorted(raw)}
    numbers: dict[str, str] = {}
    for entry in entries.values():
        if entry.number in numbers:
            raise SeriesError(f"{where}: [{numbers[entry.number]}] and [{entry.stem}] have "
                              f"the same number")
        numbers[entry.number] = entry.stem
    for entry in entries.values():
        later = [n for n in entry.needs if n not in numbers or n >= entry.number]
        if later:
            raise SeriesError(f"{where}: [{entry.stem}].needs: {', '.join(later)} is not an "
                              f"earlier notebook of the series")
    seen: list[str] = []
    for entry in entries.values():
        if entry.group in seen and seen[-1] != entry.group:
            raise SeriesError(f"{where}: [{entry.stem}].group: {entry.group!r} again after "
                              f"{seen[-1]!r}: a group's notebooks are consecutive")
        if entry.group not in seen:
            seen.append(entry.group)
    return entries


def groups(entries: dict[str, Notebook]) -> list[str]:
    """The groups' headings, in series order."""
    return list(dict.fromkeys(entry.group for entry in entries.values()))


def main() -> int:
    """`python -m tools.series`: check the table, print one line per notebook."""
    import sys

    try:
        entries = load()
    except SeriesError as err:
        print(err, file=sys.stderr)
        return 1
    for entry in entries.values():
        print(f"{entry.stem}: {entry.group}; needs {', '.join(entry.needs) or 'nothing'}; "
              f"{len(entry.outcomes)} outcomes")
    print(f"{len(entries)} notebooks in {len(groups(entries))} groups")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
