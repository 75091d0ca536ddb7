"""Report (a check's verdicts that display themselves and read as a list of verdicts) and
grade (an exercise's prediction against what each rank measured).

Whole printed lines are asserted here on purpose: the Report's lines are what every
notebook shows a reader, so their form is the behaviour under test."""
from __future__ import annotations

import numpy as np
import torch

from helpers.checks import Report, grade, mark


def _reduce_record(afters):
    """A reduce to rank 0 on 3 ranks: only rank 0's tensor is defined after it."""
    return {"collective": "reduce", "backend": "gloo", "world_size": 3, "dtype": "float32",
            "params": {"dst": 0},
            "ranks": [{"rank": r, "before": {"tensor": [float(r)]}, "after": a}
                      for r, a in enumerate(afters)]}


def test_lines_verdicts_and_display():
    shown = Report().add(0, True, "tensor = [3.0]").add(1, False, "tensor = [4.0]")
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


def test_a_label_in_place_of_the_rank_and_the_marks():
    shown = Report().add("bytes", True, "960").add("count", 0, "61")
    assert str(shown).splitlines() == ["bytes ✓  960", "count ✗  61"]
    assert shown.oks == [True, False] and shown.oks[1] is False
    assert [mark(True), mark(False), mark(None), mark(1)] == ["✓", "✗", "✎", "✓"]


def test_grade_asks_for_a_prediction_first():
    for blank in (None, ..., [..., ...]):
        verdict = grade(blank, [1, 2], "x")
        assert verdict.oks == [None, None] and not verdict
        assert str(verdict).splitlines()[1:] == [
            "✎ Fill in your prediction first (one value per rank, None where it is not "
            "defined or not passed), then run this cell again."]
    assert grade({"a": ...}, {"a": 1, "b": 2}, "x").oks == [None, None]


def test_grade_per_rank_lines_and_the_summary():
    right = grade([1, 2.0], [1, 2], "calls")
    assert right == [True, True]
    assert str(right).splitlines() == [
        "Your prediction of calls, against what each rank measured",
        "rank 0 ✓  predicted 1   measured 1", "rank 1 ✓  predicted 2.0   measured 2",
        "All ranks right!"]
    wrong = grade([1, 3], [1, 2], "calls")
    assert wrong == [True, False] and not wrong
    assert "rank 1 ✗  predicted 3   measured 2" in str(wrong).splitlines()
    assert str(wrong).splitlines()[-1] == "1 of 2 ranks right."
    page = wrong._repr_html_()
    assert page.startswith('<pre class="nccl-report" data-oks="[true, false]">')
    assert page.count("✓") == 1


def test_grade_the_wrong_number_of_entries():
    for short in ([1], [1, 2, 3]):
        verdict = grade(short, [1, 2], "x")
        assert verdict == [False]
        assert "one per rank" in str(verdict) and "for 2 ranks" in str(verdict)
    assert "1 entry for 2 ranks" in str(grade([1], [1, 2], "x"))
    assert grade([5], {"a": 5}, "x") == [False] and "give a dict" in str(grade([5], {"a": 5}, "x"))


def test_grade_numbers_lists_and_tensors():
    assert grade([[3]], [[3.0]], "x") and grade([3.0004], [3.0], "x")
    assert not grade([3.01], [3.0], "x")
    assert grade([3.01], [3.0], "x", rel_tol=0.01) and not grade([3.01], [3.0], "x", rel_tol=1e-3)
    assert not grade([1001], [1000], "bytes")        # ints: exactly, whatever rel_tol
    assert grade([float("nan")], [float("nan")], "x") and not grade([0.0], [None], "x")
    assert grade([None], [None], "x") and not grade([None], [0.0], "x")
    nested = [[[1], [2]], None]
    assert grade(nested, [[[1.0], [2.0]], None], "gather_list")
    assert not grade([[1, 2], None], [[[1], [2]], None], "gather_list")
    assert not grade([[[1], [2]], [[1], [2]]], [[[1], [2]], None], "gather_list")
    assert grade([[1.0, 2.0], 5], [torch.tensor([1.0, 2.0]), np.int64(5)], "x")
    assert not grade([[1.0, 2.0]], [torch.tensor([1.0, 2.5])], "x")
    assert grade([True, "gloo"], [True, "gloo"], "x") and not grade(["nccl"], ["gloo"], "x")
    assert grade([{"a": 1}], [{"a": 1.0}], "x") and not grade([{"a": 1}], [{"b": 1}], "x")


def test_grade_a_record_leaves_the_undefined_ranks_to_none():
    rec = _reduce_record([{"tensor": [3.0]}, {"tensor": [9.0]}, {"tensor": [2.0]}])
    assert grade([[3.0], None, None], rec, "tensor") == [True, True, True]
    told = grade([[3], [1.0], None], rec, "tensor")     # rank 1 is not defined by reduce
    assert told == [True, False, True]
    lines = str(told).splitlines()
    assert lines[2] == ("rank 1 ✗  predicted [1.0]   measured [9.0]  (not defined by the API: "
                        "predict None; no program may rely on it)")
    assert lines[-1] == "2 of 3 ranks right."
    assert not grade([[4.0], None, None], rec, "tensor")
    assert not grade([[3.0], [9.0], [2.0]], rec, "tensor")  # what was measured: still undefined
    dotted = grade([[3.0], ..., None], rec, "tensor")
    assert dotted == [True, False, True] and "(fill this one in)" in str(dotted)
    afters = [[3.0], [9.0], [2.0]]                      # a list: name the undefined ranks
    assert grade([[3.0], None, None], afters, "tensor", undefined=[1, 2])
    assert not grade([[3.0], None, None], afters, "tensor")


def test_grade_named_values():
    measured = {"bytes": 960, "count": 60, "busbw / algbw": 0.75}
    right = grade({"bytes": 960, "count": 240 // 4, "busbw / algbw": 3 / 4}, measured, "row")
    assert right == [True, True, True]
    assert str(right).splitlines()[1:] == ["bytes         ✓  predicted 960   measured 960",
                                           "count         ✓  predicted 60   measured 60",
                                           "busbw / algbw ✓  predicted 0.75   measured 0.75",
                                           "All right!"]
    assert grade({"bytes": 992, "count": 60, "busbw / algbw": 0.75}, measured, "row") == \
        [False, True, True]
    missing = grade({"bytes": 960, "count": 60}, measured, "row")
    assert missing == [True, True, False] and "(fill this one in)" in str(missing)
    extra = grade(dict(measured, size=1), measured, "row")
    assert extra == [True, True, True, False] and "not measured" in str(extra)
    assert grade([960, 60, 0.75], measured, "row") == [False]


def test_the_verdicts_read_back_from_the_html_a_notebook_shows():
    import nbformat

    from reports import shown_reports

    shown = Report("a <title>").add(0, True, "a<b").add("slot 1", False, "x").note("n & m")
    shown.verdict(None)
    cell = nbformat.v4.new_code_cell("verdicts")
    cell["id"] = "c1"
    cell.outputs = [nbformat.v4.new_output("display_data", {"text/html": shown._repr_html_(),
                                                            "text/plain": str(shown)})]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x"), cell])
    [read] = shown_reports(nb)
    assert (read.cell, read.title, read.oks) == ("c1", "a <title>", [True, False, None])
    assert read.verdicts == [("0", True, "rank 0 ✓  a<b"), ("slot 1", False, "slot 1 ✗  x")]
    assert read.notes == ["n & m"] and read.by_rank() == {0: True}
    assert shown_reports(nb, "c0") == [] and len(shown_reports(nb, "c1")) == 1


def _refusal(verdict) -> str:
    """The one line of a refused form: its sentence (a ✗ labelled "prediction")."""
    assert verdict == [False] and verdict.lines[0].rank == "prediction", str(verdict)
    return verdict.lines[0].text


def test_grade_accepts_one_value_per_rank_a_scalar_for_a_one_element_tensor():
    avg = [[16.0]] * 4                                  # 05: every rank's tensor [16.0]
    for natural in ([[16.0]] * 4, [16.0] * 4, [16] * 4, (16.0, 16.0, 16.0, 16.0)):
        assert grade(natural, avg, "tensor") == [True] * 4, natural
    lines = str(grade([16.0] * 4, avg, "tensor")).splitlines()
    assert lines[1] == "rank 0 ✓  predicted 16.0   measured [16.0]"
    assert grade([16.0] * 4, [torch.tensor([16.0])] * 4, "tensor") == [True] * 4
    assert grade([torch.tensor([16.0])] * 4, avg, "tensor") == [True] * 4
    assert grade(np.array([16.0] * 4), avg, "tensor") == [True] * 4
    assert grade([2.0], [[[2.0]]], "x") == [True]        # a 1×1 tensor: its one value
    wrong = grade([15.0] * 4, avg, "tensor")
    assert wrong == [False] * 4 and "(give" not in str(wrong)   # the right form, wrong value
    assert not grade([[1, 2], None], [[[1], [2]], None], "gather_list")  # only the whole


def test_grade_accepts_one_value_for_all_ranks_where_they_agree():
    for scalar in (2, 2.0, np.int64(2), torch.tensor(2)):
        assert grade(scalar, [2, 2, 2, 2], "calls") == [True] * 4, scalar  # 15, 17: a scalar
    assert grade(3, [2, 2, 2, 2], "calls") == [False] * 4
    assert "rank 3 ✗  predicted 3   measured 2" in str(grade(3, [2, 2, 2, 2], "calls"))
    assert grade(16.0, [[16.0]] * 4, "tensor") == [True] * 4     # 05: one value for all
    assert grade([16.0], [[16.0]] * 4, "tensor") == [True] * 4   # the one tensor, for all
    gathered = [[0.0, 1.0, 2.0, 3.0]] * 4                # each rank's list is n long too
    assert grade([0.0, 1.0, 2.0, 3.0], gathered, "output") == [True] * 4
    assert grade([[0.0, 1.0, 2.0, 3.0]] * 4, gathered, "output") == [True] * 4
    rec = {"collective": "all_reduce", "backend": "gloo", "world_size": 2, "dtype": "float32",
           "params": {"op": "SUM"},
           "ranks": [{"rank": r, "before": {"tensor": [float(r)]}, "after": {"tensor": [1.0]}}
                     for r in range(2)]}
    assert grade(1.0, rec, "tensor") == [True, True]


def test_grade_refuses_a_single_value_where_the_ranks_differ_with_a_sentence():
    said = _refusal(grade(4, [4, 3, 2, 1], "in flight"))   # 18: one number per rank
    assert said == ("one value for all ranks is graded only where every rank measures the "
                    "same (and the API defines it on every rank); give a list of 4 values, "
                    "one per rank")
    rec = _reduce_record([{"tensor": [3.0]}, {"tensor": [3.0]}, {"tensor": [3.0]}])
    assert "defines it on every rank" in _refusal(grade(3.0, rec, "tensor"))  # reduce: None


def test_grade_refuses_other_forms_with_a_sentence_saying_which():
    assert _refusal(grade({"a": 1}, [1, 2], "x")) == (
        "a dict, but this exercise names no values: give a list of 2 values, one per rank")
    assert _refusal(grade([7, 7], [7] * 4, "x")) == (
        "2 entries for 4 ranks: give a list of 4 values, one per rank, or one value for all "
        "of them (a single value, not a list)")
    assert _refusal(grade([1, 2], [[1, 2, 3]] * 3, "x")).endswith(
        "or one value for all of them (a list of 3 values)")
    assert _refusal(grade(5, [[1, 2, 3]] * 2, "x")) == (
        "give a list of 2 values, one per rank, or one value for all of them "
        "(a list of 3 values)")
    assert _refusal(grade([1], [1, 2], "x")) == (
        "1 entry for 2 ranks: give a list of 2 values, one per rank")
    assert _refusal(grade(5, {"a": 5}, "x")) == "give a dict: a value for each of a"


def test_grade_says_the_form_on_a_rank_whose_value_has_another():
    short = grade([[1, 2]] * 2, [[1, 2, 3]] * 2, "x")
    assert short == [False, False]
    assert str(short).splitlines()[1] == (
        "rank 0 ✗  predicted [1, 2]   measured [1, 2, 3]  (give a list of 3 values)")
    listed = str(grade([[5], 5], [5, 5], "x")).splitlines()
    assert listed[1] == "rank 0 ✗  predicted [5]   measured 5  (give a single value, not a list)"
    assert listed[2] == "rank 1 ✓  predicted 5   measured 5"
    assert "(give a single value (or a one-element list))" in str(
        grade([[1, 2], [3]], [[4], [3]], "x"))


def test_a_passing_check_is_one_line_with_its_verdicts_folded_under_it():
    passing = Report("all_reduce against the NumPy model")
    for r in range(4):
        passing.add(r, True, f"tensor [{r}]")
    assert passing.summary() == "✓ 4/4 ranks: all_reduce against the NumPy model"
    page = passing._repr_html_()
    assert page.startswith('<details class="nccl-report-fold"><summary>✓ 4/4 ranks: '
                           "all_reduce against the NumPy model</summary>"
                           '<pre class="nccl-report" data-oks="[true, true, true, true]">')
    assert page.count("rank 3 ✓  tensor [3]") == 1 and page.endswith("</pre></details>")
    several = Report("bytes").add(0, True, "DP").add(0, True, "TP").add(1, True, "DP")
    assert several.summary() == "✓ 3/3 checks, 2 ranks: bytes"
    assert Report().add("bytes", True).add("count", True).summary() == "✓ 2/2 checks"
    # a failure, a verdict still waiting, or one verdict alone: the lines stay open
    failing = Report("t").add(0, True).add(1, False)
    assert failing.summary() == "✗ 1/2 ranks: t"
    assert failing._repr_html_().startswith('<pre class="nccl-report"')
    waiting = Report("t").add(0, None).add(1, True)
    assert waiting.summary() == "✎ 1/2 ranks: t"
    assert waiting._repr_html_().startswith("<pre")
    assert Report("t").add(0, True)._repr_html_().startswith("<pre")
