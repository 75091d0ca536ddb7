"""What every notebook test checks of the copy it executed, whatever the notebook.

`notebook_runner.execute` calls `check_executed` after each execution. The checks run in
the notebook's own test file (tests/notebooks/test_<stem>.py), at one world size, the
series' default (4 ranks, as `make html` and `make slides` run it) or the one its test runs
where that is another (CHECKED_AT), so each notebook is checked once per suite, not again
where another test runs it (on MPI or Slurm engines, at start-up, in a shared session):
- no exercise is answered above its question (reports.assert_no_answer_above);
- its deck fits a 1280×720 projector on every slide, reads at the sizes the room needs and
  runs without a console error (slides.check_deck, headless Chromium);
- its page shows no engine header, machine path, deprecation warning or raw ipyparallel
  error (page_checks.assert_clean_page);
- every figure it shows reads at 1280 px: text ≥ 9 px as displayed, labels inside their
  shapes, legends off the data (figure_checks.check_figures);
- its page, built as make html builds it and measured in Chromium at 1280×800, gives code +
  output at most 45 % of its height and figures at least 15 %
  (page_checks.assert_proportions).
"""
from __future__ import annotations

import os
from pathlib import Path

import nbformat

DEFAULT_RANKS = 4
CHECKED_AT = {"13_debugging": 3}      # its test runs it at 3 ranks only


def checked_here(notebook: Path, parameters: dict) -> bool:
    """True for the execution at which `notebook` is held to the rules: in its own test
    file, at the world size of CHECKED_AT (the parameter, else $TUTORIAL_RANKS, else 4)."""
    ranks = CHECKED_AT.get(notebook.stem, DEFAULT_RANKS)
    world = parameters.get("n_ranks") or os.environ.get("TUTORIAL_RANKS") or DEFAULT_RANKS
    own = os.environ.get("PYTEST_CURRENT_TEST", "").startswith(
        f"tests/notebooks/test_{notebook.stem}.py::")
    return own and str(world).strip() == str(ranks) and notebook.stem[:2].isdigit()


def check_executed(notebook: Path, nb: nbformat.NotebookNode, parameters: dict) -> None:
    """Fail when the executed copy of `notebook` breaks a rule of the whole series."""
    if not checked_here(notebook, parameters):
        return
    from figure_checks import check_figures            # issue 50: figures read at 1280 px
    from page_checks import assert_clean_page, assert_proportions   # issue 50: the page
    from reports import assert_no_answer_above        # issue 28: ask before telling
    from slides import check_deck                      # issue 28: decks that fit the room

    assert_no_answer_above(nb, notebook.stem)
    assert_clean_page(nb, notebook.stem)
    check_figures(nb, notebook.stem)
    check_deck(notebook.stem, nb)
    assert_proportions(nb, notebook.stem)
