"""The Reports (helpers.checks.Report) a run notebook displayed, read back from their HTML.

    reports = shown_reports(nb)                 # every one, in cell order
    reports = shown_reports(nb, "c17")          # those of one cell
    reports[0].oks == [True] * 4                # every verdict, hidden ones too
    reports[0].by_rank() == {0: True, ...}      # the verdicts that name a rank
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass

_BLOCK = re.compile(r'<pre class="nccl-report" data-oks="([^"]*)">(.*?)</pre>', re.S)
_TITLE = re.compile(r"^<b>(.*?)</b>\n", re.S)
_VERDICT = re.compile(r'<span class="verdict" data-rank="([^"]*)" data-ok="([^"]*)"[^>]*>'
                      r"(.*?)\n</span>", re.S)
_NOTE = re.compile(r"<span>(.*?)\n</span>", re.S)


@dataclass
class Shown:
    cell: str
    title: str | None
    oks: list                      # True / False / None, one per verdict
    verdicts: list                 # (who, ok, line as printed): "0" or a label for who
    notes: list                    # the lines that are not verdicts

    def by_rank(self) -> dict[int, bool | None]:
        """rank → ok, for the verdicts labelled with a rank."""
        return {int(who): ok for who, ok, _ in self.verdicts if who.isdigit()}

    def lines(self) -> list[str]:
        return [line for _, _, line in self.verdicts]


def _parse(cell_id: str, page: str) -> list[Shown]:
    found = []
    for oks, body in _BLOCK.findall(page):
        title = _TITLE.match(body)
        found.append(Shown(
            cell=cell_id, title=html.unescape(title.group(1)) if title else None,
            oks=json.loads(html.unescape(oks)),
            verdicts=[(html.unescape(who), json.loads(ok), html.unescape(text))
                      for who, ok, text in _VERDICT.findall(body)],
            notes=[html.unescape(text) for text in _NOTE.findall(body)]))
    return found


def shown_reports(nb, cell_id: str | None = None) -> list[Shown]:
    """Every Report the executed notebook displayed (or only cell `cell_id`'s), in order."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code" or (cell_id is not None and cell.get("id") != cell_id):
            continue
        for out in cell.get("outputs", []):
            page = out.get("data", {}).get("text/html")
            if page:
                found += _parse(cell.get("id", ""), "".join(page))
    return found


def assert_all_pass(nb, n_ranks: int) -> list[Shown]:
    """Every Report the notebook showed is all ✓ (no ✗ anywhere on the page), and each
    rank has a ✓ verdict; the Reports, for the notebook's own checks."""
    from notebook_runner import notebook_text

    assert "✗" not in notebook_text(nb)
    reports = shown_reports(nb)
    assert reports, "the notebook showed no Report"
    for shown in reports:
        assert all(ok is True for ok in shown.oks), (shown.cell, shown.title, shown.lines())
    for rank in range(n_ranks):
        assert any(shown.by_rank().get(rank) is True for shown in reports), \
            f"no ✓ for rank {rank}"
    return reports


def exercise(reports: list[Shown]) -> Shown:
    """The exercise's grade: the one Report titled "Your prediction ..."."""
    [graded] = [s for s in reports if (s.title or "").startswith("Your prediction")]
    return graded
