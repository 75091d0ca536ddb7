"""The "At scale (model)" box of notebooks 05–27: a markdown cell, id and tag `at-scale`,
placed after the text under the page's scheme picture (PLACES), its table computed by
helpers.scale.at_scale from the series' own models.

    python -m tools.at_scale --write [notebooks/]   # write (or replace) every box
    python -m tools.at_scale --check [notebooks/]   # exit 1 naming each notebook whose
                                                    # box is missing, moved or edited
"""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from helpers.paths import REPO_ROOT
from helpers.scale.at_scale import Box
from helpers.scale.at_scale_training import boxes

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
CELL_ID = TAG = "at-scale"
HEADING = "**At scale (model).**"
WIDTH = 92          # the notebooks' markdown is wrapped at about this width

# Per notebook: the id of the cell the box follows (the text under the page's scheme picture,
# "What the picture shows"),
# the headings of the sections that measure this run, and the line that points at them.
PLACES: dict[str, tuple[str, tuple[str, ...], str]] = {
    **{f"{n:02d}": ("c04", ("The call",), "*{0}* below runs it on this run's ranks; "
                    "notebook 11 times it at every size.") for n in range(5, 10)},
    "10": ("c04", ("What it costs: 2(n − 1)/n of the tensor per rank",
                   "How fast is it against gloo's own?"),
           "*{0}* below measures this run's bytes, and *{1}* its time."),
    "11": ("scheme-text", ("Bus bandwidth against size", "The α-β model, measured"),
           "*{0}* below plots this run's busbw; *{1}* fits this run's α and β."),
    "12": ("scheme-text", ("The survey",),
           "*{0}* below shows which dtypes this run's backend accepts."),
    "13": ("scheme-text", ("5 · A collective that only some ranks call",),
           "*{0}* below runs such a hang on this run's ranks, into the start cell's short "
           "timeout."),
    "14": ("c04", ("Bytes: how many, and where they go",),
           "*{0}* below measures this run's hierarchical all_reduce, phase by phase."),
    "15": ("c04", ("Bytes per step", "How fast is it against torch's?"),
           "*{0}* below measures this run's bytes, and *{1}* its time."),
    "16": ("c04", ("Communication per step", "Memory per rank"),
           "*{0}* and *{1}* below measure this run's."),
    "17": ("cell-06", ("Collectives and bytes, layer by layer",),
           "*{0}* below counts this run's calls and measures its bytes."),
    "18": ("cell-06", ("The bubble, measured",), "*{0}* below measures this run's bubble."),
    "19": ("cell-04", ("The step's bytes, measured",),
           "*{0}* below measures this run's bytes, group by group."),
    "20": ("c06", ("Collectives and bytes",),
           "*{0}* below counts this run's calls and measures its bytes."),
    "21": ("cell-06", ("Bytes on the wire",), "*{0}* below measures this run's bytes."),
    "22": ("cell-06", ("Bytes per rank",),
           "*{0}* below measures this run's bytes, for uneven splits."),
    "23": ("cell-04", ("The same with DDP and `no_sync()`",
                       "Compressed gradients: DDP communication hooks"),
           "*{0}* and *{1}* below measure this run's calls and bytes."),
    "24": ("picture-text", ("The bubble of each schedule: actions of fixed length",),
           "*{0}* below measures this run's bubble, in the formula's own conditions."),
    "25": ("c04", ("Time: a size sweep, and the crossover",),
           "*{0}* below times this run's algorithms and finds the measured crossover."),
    "26": ("cell-04", ("Train, then save with `torch.distributed.checkpoint`",),
           "*{0}* below measures this run's checkpoint, file by file."),
    "27": ("p27-picture", ("Predicted, then checked",
                                "GPU clusters, from published links (model)"),
           "*{0}* below holds the planner against this run; *{1}* ranks every "
           "configuration of Llama-3-70B on 64 H100s."),
    "28": ("scheme-text", ("1 · A rank that never calls",),
           "*{0}* below runs such a hang on this run's ranks and reads every rank's dump."),
}


def markdown(box: Box) -> str:
    """The box as the cell's markdown: heading and intro, table, sources, pointer."""
    after, headings, pointer = PLACES[box.stem]
    sources = "; ".join(f"{f.name}, {f.shown}: {f.source}" for f in box.figures)
    sources = f"Sources: {sources}." if sources else "Sources: none; no hardware figure."
    return "\n\n".join([_wrap(f"{HEADING} {box.intro}"), box.table(), _wrap(sources),
                        _wrap(f"Model: {box.model}; nothing here ran."),
                        _wrap(pointer.format(*headings))])


def _wrap(text: str) -> str:
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def cell(stem: str) -> dict[str, Any]:
    """The markdown cell of notebook `stem`'s box, as nbformat 4 stores it."""
    text = markdown(boxes()[stem]())
    return {"cell_type": "markdown", "id": CELL_ID,
            "metadata": {"slideshow": {"slide_type": "subslide"}, "tags": [TAG]},
            "source": text.splitlines(keepends=True)}


def with_box(nb: dict[str, Any], stem: str) -> dict[str, Any]:
    """`nb` with its box (re)placed right after PLACES' cell; ValueError when that cell
    is not there."""
    after = PLACES[stem][0]
    old = next((c for c in nb["cells"] if c.get("id") == CELL_ID), None)
    cells = [c for c in nb["cells"] if c.get("id") != CELL_ID]
    ids = [c.get("id") for c in cells]
    if after not in ids:
        raise ValueError(f"notebook {stem} has no cell {after!r} to put its box after")
    at = ids.index(after) + 1
    box = cell(stem)
    if old is not None:     # its slide metadata, as set in the notebook, is kept
        box["metadata"] = {**old.get("metadata", {}), "tags": [TAG]}
    return {**nb, "cells": cells[:at] + [box] + cells[at:]}


def notebooks(folder: Path) -> dict[str, Path]:
    """Notebook number → path, for the numbers that have a box."""
    found = {p.name[:2]: p for p in sorted(Path(folder).glob("[0-9][0-9]_*.ipynb"))}
    return {stem: found[stem] for stem in PLACES if stem in found}


def _dump(nb: dict[str, Any]) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def stale(folder: Path = NOTEBOOK_DIR) -> list[str]:
    """The notebooks whose box differs from what `--write` would write (or is missing)."""
    out = []
    for stem, path in notebooks(folder).items():
        nb = json.loads(path.read_text())
        if _dump(with_box(nb, stem)) != _dump(nb):
            out.append(path.name)
    return out


def write(folder: Path = NOTEBOOK_DIR) -> list[str]:
    """Write every box; the notebooks changed."""
    changed = []
    for stem, path in notebooks(folder).items():
        before = path.read_text()
        after = _dump(with_box(json.loads(before), stem))
        if after != before:
            path.write_text(after)
            changed.append(path.name)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=NOTEBOOK_DIR)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    missing = sorted(set(PLACES) - set(notebooks(args.folder)))
    if missing:
        print(f"no notebook {', '.join(missing)} in {args.folder}", file=sys.stderr)
        return 1
    if args.write:
        changed = write(args.folder)
        print(f"wrote the box of {len(changed)} notebook(s): {', '.join(changed) or 'none'}")
        return 0
    bad = stale(args.folder)
    if bad:
        print(f"the At scale box differs from `python -m tools.at_scale --write` in: "
              f"{', '.join(bad)}", file=sys.stderr)
        return 1
    print(f"every At scale box is up to date ({len(PLACES)} notebooks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
