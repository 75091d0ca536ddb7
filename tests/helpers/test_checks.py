"""Report: a check's verdicts that display themselves and read as a list of verdicts."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO
from helpers.checks import Report


def test_lines_verdicts_and_display():
    shown = Report().add(0, True, "tensor = [3.0]").line("rank 1 ✗  tensor = [4.0]", False)
    shown.note("1 of 2 ranks right.")
    assert str(shown).splitlines() == ["rank 0 ✓  tensor = [3.0]", "rank 1 ✗  tensor = [4.0]",
                                       "1 of 2 ranks right."]
    assert repr(shown) == str(shown)
    assert shown == [True, False] and shown[1] is False and list(shown) == [True, False]
    assert not shown and len(shown) == 2
    page = shown._repr_html_()
    assert page.count("\n</span>") == 3 and "rank 1 ✗  tensor = [4.0]" in page


def test_a_note_alone_is_not_a_pass_and_a_hidden_verdict_counts():
    assert not Report().note("✎ Fill in your prediction first")
    hidden = Report().note("✗ the ranks kept 2 states").verdict(False).verdict(False)
    assert hidden == [False, False] and str(hidden) == "✗ the ranks kept 2 states"
    assert Report().add(0, True) and Report().add(0, True) == Report().add(0, True)


def test_the_module_does_not_hide_the_report_checker():
    code = ("import helpers.checks\nfrom helpers import report\n"
            "assert callable(report) and report.__module__ == 'helpers.checks', report")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
