"""Every figure an executed notebook shows reads at 1280 px (issue 50, item 5).

A Figure's PNG output carries its audit in the output's metadata (helpers.figures.audit:
`install()`, registered in the kernel); an animation's player carries the audit of its
first and last frames in `data-figure-audit` (helpers.figures.animation). Each must be
there, with its smallest text ≥ MIN_TEXT_PX in displayed px, no label out of its shape
and no legend over data. `check_figures(nb, stem)` is called by
executed_checks.check_executed.
"""
from __future__ import annotations

import html
import json
import re

import nbformat

from helpers.figures.audit import METADATA_KEY, FigureAudit

PLAYER = re.compile(r'<div class="nccl-animation(?: [^"]*)?"[^>]*>')
AUDIT_ATTR = re.compile(r'data-figure-audit="([^"]*)"')


def figure_audits(nb: nbformat.NotebookNode) -> list[tuple[str, dict | None]]:
    """(where, audit or None) for every PNG output and every animation player."""
    found = []
    for index, cell in enumerate(nb.cells):
        where = f"cell {index} ({cell.get('id', '?')})"
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data:
                meta = output.get("metadata", {}).get("image/png", {})
                found.append((where, meta.get(METADATA_KEY)))
            page = data.get("text/html", "")
            page = "".join(page) if isinstance(page, list) else page
            for player in PLAYER.findall(page):
                attr = AUDIT_ATTR.search(player)
                found.append((f"{where}, animation",
                              json.loads(html.unescape(attr.group(1))) if attr else None))
    return found


def check_figures(nb: nbformat.NotebookNode, stem: str) -> None:
    """Fail, naming each figure and its problem, where a figure of `nb` is unaudited or
    breaks a rule."""
    failures = []
    for where, audit in figure_audits(nb):
        if audit is None:
            failures.append(f"{where}: no figure audit (the kernel did not run "
                            "helpers.figures.audit.install(): tools.execute.AUDIT_ARGUMENTS)")
            continue
        failures += [f"{where}: {problem}" for problem in FigureAudit(**audit).problems()]
    assert not failures, f"{stem}: figures that do not read at 1280 px:\n" + "\n".join(failures)
