"""No exercise is answered above itself: its measured answer (what `grade` compares the
prediction with) shows in no markdown text and no output before the exercise's question.

The rule (tests/support/reports.py, `answer_of` and `answers_shown_above`): the answer is
read from the grade's lines of an executed notebook ("measured ..."). It shows above when,
in a markdown cell or a code cell's printed or displayed text before the question (the
"## ..." heading over the solution cell, the text of that cell above the heading included),
there is
- the per-rank list, `[4, 3, 2, 1]`, whatever its spacing, when the ranks' values differ;
- the one value every rank measured, when it tells: a list of two values or more, or a
  number of 3 digits or more (3072, also written 3,072 or 3072.0, not inside 13072 or
  3072.5), or a fraction of 3 significant digits or more;
- each rank's own value on a line that names that rank, for every rank, when the values
  differ and each tells;
- in context, for answers of 2 digits or more (issue 50): the per-rank values joined by "/"
  (25/25) or as a list ([25, 25]); "model v"; rank by rank, after each "rank r" (up to the
  next rank named), "model v", "(v)" or a list of numbers summing to v (21's scores per
  step, [27, 18, 18, 18] → 81; 22's rows from each rank); for a value every rank has, one
  column of the ranks' lines that sums to it (a total told by its parts, 3 digits or more)
  and any list that sums to it (3 digits or more).
An nccl-tests table's times and bandwidths are not read (a count is never graded as a time:
a time printed as 960.0 µs is not 11's answer of 960 B); its sizes and counts are.
True/False/None, one-element lists ([16.0]) and small numbers (2, 0.75) alone are never
an answer shown: they are printed above every exercise for other reasons. So an exercise
whose answer is one small number on every rank (15's 2 calls) has nothing to look for, one
whose small numbers differ by rank (18's) only its per-rank list, and a sentence that
states the rule (a formula) is not found: the notebooks' own wording is reviewed for that.

Where it runs: every notebook test's execution at 4 ranks applies the rule to its fresh copy
(tests/support/executed_checks.py, `assert_no_answer_above`), so CI checks it from a clean
clone. Here, the rule on synthetic notebooks, and the same rule over the copies `make html`
executed (build/executed/, 4 ranks), a check of the whole series in seconds after a build;
a notebook without an executed copy, or whose copy is older than its cells, is skipped.
"""
from __future__ import annotations

import nbformat
import pytest

from conftest import NOTEBOOKS
from helpers.checks import grade
from reports import answer_of, answers_shown_above, assert_no_answer_above, shown_reports
from tools.build import EXECUTED_DIR

MASTERS = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
WITH_EXERCISE = [p for p in MASTERS
                 if any("solution" in c.metadata.get("tags", [])
                        for c in nbformat.read(p, as_version=4).cells)]


def _notebook(cells, prediction, measured):
    """A notebook: `cells` (markdown text, or ("output", text) for a code cell's output)
    above the exercise, then its question, solution and grade, as a build executes it."""
    def code(text):
        cell = nbformat.v4.new_code_cell("print(...)")
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        return cell
    nb = nbformat.v4.new_notebook()
    for cell in cells:
        nb.cells.append(code(cell[1]) if isinstance(cell, tuple)
                        else nbformat.v4.new_markdown_cell(cell))
    nb.cells.append(nbformat.v4.new_markdown_cell("## Exercise: predict, then check\n\nS?"))
    solution = nbformat.v4.new_code_cell("prediction = ...")
    solution.metadata["tags"] = ["solution"]
    graded = grade(prediction, measured, "S")
    check = nbformat.v4.new_code_cell("grade(prediction, measured, 'S')")
    check.outputs = [nbformat.v4.new_output("display_data", {
        "text/html": graded._repr_html_(), "text/plain": str(graded)})]
    nb.cells += [solution, check, code("below the exercise: 3072, [4, 3, 2, 1]")]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i}"
    return nb


def test_a_number_of_3_digits_is_found_as_a_whole_token_above_the_question():
    measured = [3072] * 4
    for shown in ("column-parallel backward all_reduce 1 3072", "S = 3,072 B", "3072.0 bytes"):
        assert answers_shown_above(_notebook([("output", shown)], measured, measured)) == \
            ["cell c0: 3072"], shown
    found = answers_shown_above(_notebook(["one all_reduce of 3072 bytes"], measured, measured))
    assert found == ["cell c0: 3072"]                          # in markdown too
    for other in ("13072 B", "3072.5", "x3072", "30720", "3 072"):
        assert not answers_shown_above(_notebook([("output", other)], measured, measured)), other
    assert not answers_shown_above(_notebook([], measured, measured))   # below: not above


def test_an_nccl_tests_tables_sizes_count_and_its_times_do_not():
    from helpers.bench.figures import nccl_tests_tables       # 11's folded tables

    def tables(size, time_us, busbw):
        return repr(nccl_tests_tables([{
            "bytes": size, "count": size // 4, "dtype": "float32", "op": "sum", "root": None,
            "time_us": time_us, "algbw": 0.01, "busbw": busbw, "collective": "all_reduce",
            "world_size": 4, "backend": "gloo"}]))
    measured = [960] * 4
    for size, time_us, busbw in [(1024, 960.0, 0.5), (1024, 960.04, 960.0), (64, 12.5, 960)]:
        shown = tables(size, time_us, busbw)
        assert f"{time_us:.1f}" in shown or "busbw 960 GB/s" in shown
        assert not answers_shown_above(_notebook([("output", shown)], measured, measured)), shown
    for shown in (tables(960, 12.5, 0.5), tables(3840, 960.0, 0.5)):    # the size, the count
        assert answers_shown_above(_notebook([("output", shown)], measured, measured)) == \
            ["cell c0: 960"], shown


def test_the_per_rank_list_is_found_whatever_its_spacing_a_small_number_alone_is_not():
    measured = [4, 3, 2, 1]
    for shown in ("1F1B in flight per rank: [4, 3, 2, 1]", "[4,3,2,1]", "[ 4, 3,  2, 1 ]"):
        assert answers_shown_above(_notebook([("output", shown)], measured, measured)) == \
            ["cell c0: [4, 3, 2, 1]"], shown
    for shown in ("[1, 2, 3, 4]", "4 3 2 1", "rank 0 4\nrank 1 3"):
        assert not answers_shown_above(_notebook([("output", shown)], measured, measured)), shown
    small = [2] * 4                                            # 15's exercise: 2 calls
    assert answer_of(shown_reports(_notebook([], small, small))[0]).anywhere == []
    assert not answers_shown_above(_notebook([("output", "2 calls, [2, 2]")], small, small))


def test_the_question_cell_above_its_heading_counts_and_values_rank_by_rank():
    measured = [3072] * 2
    nb = _notebook([], measured, measured)
    nb.cells[0].source = "A sentence that tells: 3072.\n\n## Exercise: predict, then check"
    assert answers_shown_above(nb) == ["cell c0: 3072"]
    groups = [[0, 2], [1, 3], [0, 2], [1, 3]]                  # 14's dp groups
    lines = "\n".join(f"rank {r}: dp group {g}" for r, g in enumerate(groups))
    assert answers_shown_above(_notebook([("output", lines)], groups, groups)) == [
        "cell c0: rank by rank, rank 0 [0, 2], rank 1 [1, 3], rank 2 [0, 2], rank 3 [1, 3]"]
    inputs = "\n".join(f"rank {r}: holds {g}" for r, g in enumerate(groups[1:] + groups[:1]))
    assert not answers_shown_above(_notebook([("output", inputs)], groups, groups))


def _ranks(template: str, values) -> tuple:
    """A code cell's output: `template` formatted with each rank and its value."""
    return ("output", "\n".join(template.format(r=r, v=v) for r, v in enumerate(values)))


def test_lists_per_rank_that_sum_to_each_ranks_answer_are_found():
    """Issue 50: 21 printed each rank's scores per step, [27, 18, 18, 18], the answer 81 their
    sum; 22 the rows each rank receives from each rank, summing to its answer."""
    measured = [81] * 4
    steps = _ranks("rank {r}: tokens [0, 1]; scores computed at each step {v}",
                   [[27, 18, 18, 18]] * 4)
    assert answers_shown_above(_notebook([steps], measured, measured)) == [
        "cell c0: rank by rank, " + ", ".join(f"rank {r} 81 (a list that sums to it)"
                                              for r in range(4))]
    received = [25, 20, 20, 23]
    lists = _ranks("rank {r}: sends [5, 4] rows, receives {v}", [[5, 8, 5, 7], [4, 4, 6, 6],
                                                               [5, 5, 4, 6], [5, 6, 7, 5]])
    assert answers_shown_above(_notebook([lists], received, received)) == [
        "cell c0: rank by rank, rank 0 25 (a list that sums to it), rank 1 20 (a list that "
        "sums to it), rank 2 20 (a list that sums to it), rank 3 23 (a list that sums to it)"]
    for shown in (_ranks("rank {r}: scores computed at each step {v}", [[27, 0, 0, 0]] * 4),
                  _ranks("rank {r}: scores {v}", [[27, 18, 18, 18]] * 3 + [[27, 18, 18]]),
                  ("output", "every rank: [27, 18, 18, 18]"),          # 81: not rank by rank
                  _ranks("rank {r}: holds [81, 3]", [None] * 4)):     # 81 in it, not its sum
        assert not answers_shown_above(_notebook([shown], measured, measured)), shown
    small = [2] * 4                                # a small answer: lists of 1s by chance
    assert not answers_shown_above(_notebook([_ranks("rank {r}: {v}", [[1, 1]] * 4)], small,
                                             small))
    big = [300] * 4                                # a distinctive sum tells anywhere
    assert answers_shown_above(_notebook([("output", "per step [100, 200]")], big, big)) == [
        "cell c0: a list that sums to 300"]
    assert not answers_shown_above(_notebook([("output", "per step [100, 201]")], big, big))


def test_the_ranks_values_summing_to_a_total_every_rank_measured_are_found():
    """A total (the same on every rank) told by its parts, one per rank, in one column."""
    total = [3072] * 4
    parts = _ranks("rank {r}: {v} B sent, 2 calls", [768] * 4)
    assert answers_shown_above(_notebook([parts], total, total)) == [
        "cell c0: the ranks' values, summing to 3072"]
    for shown in (_ranks("rank {r}: {v} B sent", [700] * 4),
                  _ranks("rank {r}: {v} B sent", [768] * 3)):           # a rank missing
        assert not answers_shown_above(_notebook([shown], total, total)), shown
    # a count of 2 digits is too often a sum by chance: 26's rows (0, 25), (25, 50)
    rows = [25, 25]
    starts = _ranks("rank {r}: holds rows {v}", [(0, 25), (25, 50)])
    assert not answers_shown_above(_notebook([starts], rows, rows))


def test_a_model_value_a_value_in_brackets_and_slashes_are_found():
    """25's self-check printed "halving_doubling 36 (model 36)"; 26 "0–24 (25)" per rank
    and, in its introduction, "25/25 at 2"."""
    measured = [36] * 4
    shown = _ranks("rank {r} ✓  ring 36 (model 36), tree 48 (model 48)", [None] * 4)
    assert answers_shown_above(_notebook([shown], measured, measured)) == [
        "cell c0: model 36", "cell c0: rank by rank, " + ", ".join(
            f"rank {r} 36 (model)" for r in range(4))]
    for other in ("ring 36.5 (model 36.5)", "model 360", "model 3.6", "(model 48) 36"):
        assert not answers_shown_above(_notebook([("output", other)], measured, measured)), \
            other
    rows = [25, 25]
    held = ("output", "loaded at 2 ranks: rank 0: 0–24 (25), rank 1: 25–49 (25)")
    assert answers_shown_above(_notebook([held], rows, rows)) == [
        "cell c0: rank by rank, rank 0 25 ((v)), rank 1 25 ((v))"]
    one_rank = ("output", "rank 0: 0–24 (25), rank 1: 25–49 (24)")
    assert not answers_shown_above(_notebook([one_rank], rows, rows))
    assert answers_shown_above(_notebook(["rows 13/13/13/11 at 4, 25/25 at 2"], rows, rows)) \
        == ["cell c0: 25/25"]
    for other in ("125/25", "25/250", "25/25/25", "2.25/25"):
        assert not answers_shown_above(_notebook([other], rows, rows)), other
    uneven = [13, 13, 13, 11]
    assert answers_shown_above(_notebook(["13/13/13/11 at 4 ranks"], uneven, uneven)) == [
        "cell c0: 13/13/13/11"]
    assert answers_shown_above(_notebook([("output", "[25, 25]")], rows, rows)) == [
        "cell c0: [25, 25]"]
    small = [2, 2]                                 # 2/2, (2), model 2: too common to tell
    assert not answers_shown_above(_notebook(["2/2 (2), model 2, [2, 2]"], small, small))


def test_the_notebook_tests_hook_reads_the_measured_answer_whatever_the_prediction():
    """What `check_executed` applies to every notebook test's executed copy: the answer
    comes from the grade's "measured ..." lines, so a wrong prediction (of the right form)
    finds the same leak as the right one; a clean notebook passes."""
    measured = [4, 3, 2, 1]
    for prediction in (measured, [1, 1, 1, 1], [4, 3, 2, None]):
        leaky = _notebook([("output", "in flight per rank: [4, 3, 2, 1]")], prediction, measured)
        with pytest.raises(AssertionError, match=r"cell c0: \[4, 3, 2, 1\]"):
            assert_no_answer_above(leaky, "leaky")
        assert_no_answer_above(_notebook([("output", "[1, 2, 3, 4]")], prediction, measured),
                               "clean")
    assert_no_answer_above(nbformat.v4.new_notebook(), "no exercise")
    # The limit: a prediction of the wrong form is answered with the form to give, and no
    # value measured shows; the notebook tests run the masters' solutions, all of them ✓.
    wrong_form = shown_reports(_notebook([], 7, measured))[0]
    assert "give a list of 4 values" in " ".join(wrong_form.lines())
    assert answer_of(wrong_form).anywhere == [] and answer_of(wrong_form).by_rank == {}


@pytest.mark.parametrize("current, parameters, ranks_env, checked", [
    ("tests/notebooks/test_05_all_reduce.py::test_all_reduce_notebook[4] (call)",
     {"n_ranks": 4}, None, True),
    ("tests/notebooks/test_05_all_reduce.py::test_all_reduce_notebook[2] (call)",
     {"n_ranks": 2}, None, False),
    ("tests/runtime/test_mpi_launcher.py::test_all_reduce_notebook_runs_unchanged (call)",
     {"n_ranks": 4}, None, False),                   # another test's run of 05
    ("tests/notebooks/test_05_all_reduce.py::test_default (call)", {}, None, True),
    ("tests/notebooks/test_05_all_reduce.py::test_from_the_environment (call)", {}, "2", False),
    ("tests/notebooks/test_13_debugging.py::test_mismatched (setup)", {"n_ranks": 3}, None,
     True),                                          # 13 is checked where it runs, at 3
])
def test_a_notebook_is_held_to_the_rules_once_in_its_own_test_file(
        monkeypatch, current, parameters, ranks_env, checked):
    from pathlib import Path

    from executed_checks import checked_here

    monkeypatch.setenv("PYTEST_CURRENT_TEST", current)
    if ranks_env is None:
        monkeypatch.delenv("TUTORIAL_RANKS", raising=False)
    else:
        monkeypatch.setenv("TUTORIAL_RANKS", ranks_env)
    stem = current.split("test_", 1)[1].split(".py", 1)[0]
    assert checked_here(Path(f"notebooks/{stem}.ipynb"), parameters) is checked


def test_an_unanswered_exercise_has_no_answer_to_look_for():
    measured = [3072] * 4
    assert answers_shown_above(_notebook([("output", "3072")], None, measured)) == []


@pytest.mark.parametrize("path", WITH_EXERCISE, ids=lambda p: p.stem)
def test_no_exercise_is_answered_above_itself(path):
    executed = EXECUTED_DIR / path.name
    if not executed.is_file():
        pytest.skip(f"no executed copy in {EXECUTED_DIR}: run `make html`")
    nb = nbformat.read(executed, as_version=4)
    master = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    if [c.source for c in cells] != [c.source for c in master.cells]:
        pytest.skip(f"{executed} is older than {path.name}: run `make html`")
    assert shown_reports(nb), f"{executed} shows no Report: not executed?"
    assert_no_answer_above(nb, path.stem)
