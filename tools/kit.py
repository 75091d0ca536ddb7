"""The instructor's kit: minutes, difficulty and prerequisites per notebook, the course
paths, and each notebook's learning outcomes, written into docs/kit/README.md by
`python -m tools.kit --write`.

What each figure comes from:
- words, code lines and exercises: counted in the notebooks' sources (notebooks/);
- run time and slides: papermill's measured duration of each executed copy (build/executed,
  made by `make html`) and the number of slides its deck has, kept in docs/kit/measured.json
  so that a checkout without a build still has them (`--write` refreshes them from the
  executed copies that exist);
- minutes: run time (measured) + reading and code time at stated rates + a stated time per
  checked exercise (models: no human walkthrough was timed);
- prerequisites ("needs") and learning outcomes: notebooks/series.toml (tools.series), the
  headings of the outcomes: each notebook's title.
`python -m tools.kit --check` exits 1 when the table or the outcomes in the page are stale,
or when notebooks/series.toml does not describe notebooks/ (the error names the notebook).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import textwrap
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import nbformat

from helpers.paths import REPO_ROOT
from tools import build, series
from tools.exercises import is_solution

KIT_DIR = REPO_ROOT / "docs" / "kit"
PAGE = KIT_DIR / "README.md"
MEASURED = KIT_DIR / "measured.json"
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
BEGIN = "<!-- kit:begin: written by `python -m tools.kit --write` -->"
END = "<!-- kit:end -->"
OUTCOMES_BEGIN = ("<!-- outcomes:begin: written by `python -m tools.kit --write` from "
                  "notebooks/series.toml -->")
OUTCOMES_END = "<!-- outcomes:end -->"

# The rates of the model. Prose: Brysbaert, "How many words do we read per minute? A review
# and meta-analysis of reading rate", J. Memory and Language 109 (2019) 104047: 238 words
# a minute, silent reading of English non-fiction. Code and exercises: our own figures.
PROSE_WPM = 238
CODE_LINES_PER_MIN = 10
MINUTES_PER_EXERCISE = 5

# The difficulty rule: the latest notebook a notebook needs. Up to 06 (one collective at a
# time): introductory; 07-14 (collectives combined, point-to-point, measured, grouped):
# intermediate; 15 or later (a parallel training step): advanced.
INTERMEDIATE_FROM, ADVANCED_FROM = 7, 15

# The course paths: (name, minutes available, what is counted, the notebooks in order).
# "walkthrough": presented, exercises set as homework; "lab": with the checked exercises.
# A week: five days of two 2-hour sessions.
PATHS: list[tuple[str, int, str, tuple[str, ...]]] = [
    ("90-minute lecture", 90, "walkthrough", ("00", "01", "02", "03", "05", "06", "07")),
    ("3-hour lab", 180, "lab", ("00", "01", "02", "03", "05", "06", "07", "09", "10")),
    ("week, day 1", 240, "lab", ("00", "01", "02", "03", "04", "05", "06", "07", "08", "09")),
    ("week, day 2", 240, "lab", ("10", "11", "25", "12", "13")),
    ("week, day 3", 240, "lab", ("14", "15", "16", "17", "19")),
    ("week, day 4", 240, "lab", ("18", "20", "21", "22")),
    ("week, day 5", 240, "lab", ("23", "24", "26", "28", "27")),
]
MORE_EXERCISES = re.compile(r"^(\*\*More exercises\*\*|#+ (More e|E)xercises)\s*$", re.I)


@dataclass(frozen=True)
class Counts:
    """What a notebook's source holds."""

    stem: str
    words: int
    code_lines: int
    exercises: int        # checked exercises (a cell tagged `solution`)
    more_exercises: int   # numbered items of its "More exercises" list


def count(path: Path) -> Counts:
    nb = nbformat.read(path, as_version=4)
    words = sum(len(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    code = sum(1 for c in nb.cells if c.cell_type == "code"
               for line in c.source.splitlines() if line.strip())
    exercises = sum(1 for c in nb.cells if is_solution(c))
    return Counts(path.stem, words, code, exercises, _more_exercises(nb))


def _more_exercises(nb: nbformat.NotebookNode) -> int:
    items, listing = 0, False
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if MORE_EXERCISES.match(line.strip()):
                listing = True
            elif line.startswith("#"):
                listing = False
            elif listing and re.match(r"^\d+\. ", line):
                items += 1
    return items


def from_executed(executed: Path) -> dict[str, str | float | int]:
    """What an executed copy gives: papermill's measured duration, when that run ended, and
    how many slides and sub-slides its deck has (tools.slide_layout lays the deck out from
    the executed cells, plots included)."""
    from tools.slide_layout import layout

    nb = nbformat.read(executed, as_version=4)
    meta = nb.metadata.get("papermill", {})
    if meta.get("duration") is None:
        raise ValueError(f"{executed} has no papermill duration: was it run by tools.build?")
    kinds = [c.metadata.get("slideshow", {}).get("slide_type") for c in layout(nb).cells]
    return {"run_s": round(float(meta["duration"]), 1), "ended": meta["end_time"][:16],
            "slides": sum(kind in ("slide", "subslide") for kind in kinds)}


def prerequisites(entries: dict[str, series.Notebook] | None = None
                  ) -> dict[str, tuple[str, ...]]:
    """Each notebook's number ("05") → the numbers of the notebooks it needs
    (notebooks/series.toml, default; or `entries`)."""
    entries = series.load() if entries is None else entries
    return {entry.number: entry.needs for entry in entries.values()}


def difficulty(stem: str, entries: dict[str, series.Notebook] | None = None) -> str:
    needs = [int(n) for n in prerequisites(entries)[stem[:2]]]
    latest = max(needs, default=-1)
    if latest >= ADVANCED_FROM:
        return "advanced"
    return "intermediate" if latest >= INTERMEDIATE_FROM else "introductory"


def minutes(counts: Counts, run_s: float) -> dict[str, int]:
    """The model's minutes: run + prose + code (walkthrough), + exercises (lab)."""
    walk = run_s / 60 + counts.words / PROSE_WPM + counts.code_lines / CODE_LINES_PER_MIN
    lab = walk + counts.exercises * MINUTES_PER_EXERCISE
    return {"walkthrough": math.ceil(walk), "lab": math.ceil(lab)}


def notebooks(root: Path = NOTEBOOK_DIR) -> list[Path]:
    return sorted(root.glob("[0-9][0-9]_*.ipynb"))


def table(sources: list[Path], measured: dict[str, dict],
          entries: dict[str, series.Notebook] | None = None) -> str:
    """The generated block: one row per notebook, then the course paths' totals."""
    entries = series.load() if entries is None else entries
    needed = prerequisites(entries)
    missing = [p.stem for p in sources if p.stem not in measured]
    if missing:
        raise ValueError(f"no measured run time for {missing}: run `make html`, then "
                         "`python -m tools.kit --write`")
    rows = ["| notebook | difficulty: needs | walk-through (min) | lab (min) | run (s) | words "
            "| code lines | exercises | slides |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    per_stem = per_notebook(sources, measured)
    for path in sources:
        c, run, m = count(path), measured[path.stem], per_stem[path.stem[:2]]
        needs = ", ".join(needed[path.stem[:2]]) or "nothing"
        rows.append(f"| {path.stem.replace('_', ' ')} | {difficulty(path.stem, entries)}: "
                    f"{needs} | "
                    f"{m['walkthrough']} | {m['lab']} | {run['run_s']:.1f} | {c.words:,} | "
                    f"{c.code_lines} | {c.exercises} + {c.more_exercises} | {run['slides']} |")
    total = {k: sum(m[k] for m in per_stem.values()) for k in ("walkthrough", "lab")}
    rows.append(f"| all {len(sources)} | | {total['walkthrough']} | {total['lab']} "
                f"| | | | | |")
    ended = sorted(run["ended"] for stem, run in measured.items()
                   if stem in {p.stem for p in sources})
    legend = ("walkthrough and lab: the model's minutes; run: measured (papermill's duration);"
              " words, code lines and exercises (checked + \"More exercises\"): counted in "
              "`notebooks/`; slides: slides and sub-slides of the deck `make slides` lays out "
              "from the executed copy (not in the minutes). Run times and slides: of the "
              f"executed copies whose runs ended between {ended[0]} and {ended[-1]} UTC "
              "(`docs/kit/measured.json`).")
    rows += ["", textwrap.fill(legend, width=92, break_on_hyphens=False), "",
             "| course path | notebooks | counted | model minutes | available |",
             "|---|---|---|--:|--:|"]
    for name, (got, budget) in path_totals(per_stem).items():
        kind, stems = next((k, s) for n, _, k, s in PATHS if n == name)
        rows.append(f"| {name} | {', '.join(stems)} | {kind} | {got} | {budget} |")
    return "\n".join(rows)


def per_notebook(sources: list[Path], measured: dict[str, dict]) -> dict[str, dict[str, int]]:
    """Each notebook's model minutes, by number ("05")."""
    return {p.stem[:2]: minutes(count(p), measured[p.stem]["run_s"]) for p in sources}


def path_totals(per_stem: dict[str, dict[str, int]]) -> dict[str, tuple[int, int]]:
    """Each course path's model minutes and the minutes it has."""
    return {name: (sum(per_stem[s][kind] for s in stems), budget)
            for name, budget, kind, stems in PATHS}


def read_measured(path: Path = MEASURED) -> dict[str, dict]:
    return json.loads(path.read_text()) if path.is_file() else {}


def refresh_measured(executed_dir: Path, sources: list[Path],
                     measured: dict[str, dict]) -> dict[str, dict]:
    """The run times of the executed copies that exist, the kept ones for the others."""
    fresh = dict(measured)
    for path in sources:
        copy = executed_dir / path.name
        if copy.is_file():
            fresh[path.stem] = from_executed(copy)
    return {stem: fresh[stem] for stem in sorted(fresh) if stem in {p.stem for p in sources}}


def executed_is_current(notebook: Path) -> bool:
    """Whether build/executed holds a run of the notebook as it is now (tools.build's
    stamp: the notebook, the helpers it imports and the settings). `make html` sets
    TUTORIAL_WARM_START itself (1, or 0 with COLD=1): a stamp of either counts, as does one
    made with the settings at hand."""
    stamp = build.STAMP_DIR / f"{notebook.stem}.sha256"
    if not ((build.EXECUTED_DIR / notebook.name).is_file() and stamp.is_file()):
        return False
    return stamp.read_text() in {build.fingerprint(notebook),
                                 *(_fingerprint_as_built(notebook, warm) for warm in "10")}


def _fingerprint_as_built(notebook: Path, warm: str) -> str:
    saved = os.environ.get("TUTORIAL_WARM_START")
    os.environ["TUTORIAL_WARM_START"] = warm
    try:
        return build.fingerprint(notebook)
    finally:
        if saved is None:
            del os.environ["TUTORIAL_WARM_START"]
        else:
            os.environ["TUTORIAL_WARM_START"] = saved


def outcomes(sources: list[Path], entries: dict[str, series.Notebook] | None = None) -> str:
    """The generated outcomes: per notebook, its title as a heading, then its outcomes
    (notebooks/series.toml), one item each, ";" between them and "." after the last."""
    from tools.site import notebook_summary

    entries = series.load() if entries is None else entries
    parts = []
    for path in sources:
        title = notebook_summary(nbformat.read(path, as_version=4), path.stem)[0]
        items = entries[path.stem].outcomes
        ends = [";"] * (len(items) - 1) + ["."]
        parts.append(f"### {title}\n\n" + "\n".join(
            textwrap.fill(item + end, width=92, initial_indent="- ", subsequent_indent="  ",
                          break_on_hyphens=False, break_long_words=False)
            for item, end in zip(items, ends)))
    return "\n\n".join(parts)


def _between(page: str, begin: str, end: str, block: str) -> str:
    if begin not in page or end not in page:
        raise ValueError(f"the kit's page lacks the markers {begin!r} ... {end!r}")
    head, rest = page.split(begin, 1)
    return f"{head}{begin}\n{block}\n{end}{rest.split(end, 1)[1]}"


def with_table(page: str, block: str) -> str:
    """`page` with the block between BEGIN and END replaced by `block`."""
    return _between(page, BEGIN, END, block)


def with_outcomes(page: str, block: str) -> str:
    """`page` with the block between OUTCOMES_BEGIN and OUTCOMES_END replaced by `block`."""
    return _between(page, OUTCOMES_BEGIN, OUTCOMES_END, block)


def written(page: str, sources: list[Path], measured: dict[str, dict],
            entries: dict[str, series.Notebook] | None = None) -> str:
    """The page as `--write` writes it: its table and its outcomes regenerated."""
    entries = series.load() if entries is None else entries
    return with_outcomes(with_table(page, table(sources, measured, entries)),
                         outcomes(sources, entries))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--write", action="store_true",
                      help="refresh measured.json from build/executed, rewrite the table")
    what.add_argument("--check", action="store_true", help="exit 1 if the table is stale")
    args = parser.parse_args(argv)
    sources = notebooks()
    try:
        entries = series.load(NOTEBOOK_DIR)
    except series.SeriesError as err:
        print(err, file=sys.stderr)
        return 1
    measured = read_measured()
    if args.write:
        measured = refresh_measured(build.EXECUTED_DIR, sources, measured)
        MEASURED.write_text(json.dumps(measured, indent=1) + "\n")
        behind = [p.stem for p in sources if not executed_is_current(p)]
        if behind:
            print(f"not executed since they changed (their run times and slides are older): "
                  f"{', '.join(behind)}; `make html` first for fresh ones", file=sys.stderr)
    page = PAGE.read_text()
    try:
        wanted = written(page, sources, measured, entries)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 1
    if args.write:
        PAGE.write_text(wanted)
        print(f"{PAGE.relative_to(REPO_ROOT)} and {MEASURED.name}: "
              f"{len(sources)} notebooks, {datetime.now():%Y-%m-%d %H:%M}")
        return 0
    if wanted != page:
        print(f"{PAGE} is stale (its table or its outcomes): run "
              f"`python -m tools.kit --write`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
