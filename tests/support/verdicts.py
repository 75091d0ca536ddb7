"""A Report's verdicts read as data (helpers.checks.Report), so a test asserts who was
checked, the verdict and the values, not a whole printed line (a copy edit keeps it green).

    line = verdict(report, "broadcast")      # the one verdict labelled "broadcast"
    line.ok is True and "median miss" in line.text
"""
from __future__ import annotations

from helpers.checks import Line, Report


def verdict(report: Report, who: int | str) -> Line:
    """The one verdict of `report` for rank `who` (an int) or label `who` (a str, compared
    without the padding that aligns labels in a column)."""
    found = [line for line in report.lines if line.counted and (
        line.rank == who if isinstance(who, int)
        else isinstance(line.rank, str) and line.rank.strip() == who)]
    assert len(found) == 1, f"{len(found)} verdicts for {who!r}: {report}"
    return found[0]
