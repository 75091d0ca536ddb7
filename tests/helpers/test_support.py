"""helpers.collectives.support and support_tables (notebook 12) without engines: the survey
built from a fake probe, its records, tables, look-ups and the exercise's check."""
from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import pytest

from helpers.collectives import registry
from helpers.checks import grade
from helpers.collectives.model_check import check
from helpers.collectives import examples, support, support_tables
from verdicts import verdict


def fake_cluster(world_size: int) -> SimpleNamespace:
    return SimpleNamespace(backend="gloo", world_size=world_size,
                           ranks=[SimpleNamespace(rank=r, device="cpu") for r in range(world_size)])


def tensors(state: dict, dtype: str) -> dict:
    """A state as cluster.pull brings it: tensors as CPU torch tensors."""
    import torch

    def one(values):
        return torch.tensor(values, dtype=getattr(torch, dtype)) if isinstance(values, list) \
            else values
    return {k: None if v is None else [one(x) for x in v] if k in registry.LIST_ARGS else one(v)
            for k, v in state.items()}


def accepted(collective: str, world_size: int, op: str | None = None, dtype: str = "float32",
             tamper: int | None = None) -> list[dict]:
    """Every rank's outcome of a correct call (rank `tamper` off by one)."""
    params = support.case_params(collective, op)
    befores = examples.example_befores(collective, world_size, params)
    befores = [{k: examples.model_after("broadcast", [{"tensor": v}], {"src": 0}, dtype)[0]["tensor"]
                if v is not None and k not in registry.LIST_ARGS else v for k, v in b.items()}
               for b in befores]
    afters = examples.model_after(collective, befores, params, dtype)
    if tamper is not None:
        name = registry.OUTPUT[collective]
        afters[tamper][name] = [v + 1 for v in afters[tamper][name]]
    return [{"before": tensors(b, dtype), "after": tensors(a, dtype)}
            for b, a in zip(befores, afters)]


def refused(world_size: int, error: str, changed: bool = False) -> list[dict]:
    """Every rank raised `error`; with `changed`, after overwriting its tensor."""
    out = []
    for r in range(world_size):
        before = tensors({"tensor": [float(r)]}, "float32")
        after = tensors({"tensor": [float(r + changed)]}, "float32")
        out.append({"error": error, "before": before, "after": after})
    return out


def probe(world_size: int = 2) -> list[dict]:
    """What two ranks of a probe would have stored, case by case."""
    band = "RuntimeError: Cannot use ReduceOp.BAND with non-integral dtype"
    cases = {
        ("all_reduce", "float32", "SUM"): accepted("all_reduce", world_size, "SUM"),
        ("all_reduce", "float32", "BAND"): refused(world_size, band),
        ("all_reduce", "int64", "AVG"): accepted("all_reduce", world_size, "SUM", "int64"),
        ("all_reduce", "int64", "MAX"): accepted("all_reduce", world_size, "MAX", "int64", tamper=1),
        ("reduce", "float32", "SUM"): accepted("reduce", world_size, "SUM"),
        ("reduce", "float32", "BAND"): refused(world_size, band, changed=True),
        ("reduce", "int64", "AVG"): accepted("reduce", world_size, "SUM", "int64"),
        ("reduce", "int64", "MAX"): accepted("reduce", world_size, "MAX", "int64"),
        ("broadcast", "float32", None): accepted("broadcast", world_size),
        ("broadcast", "int64", None): [{"error": "RuntimeError: nope"}]
        + [{"error": "RuntimeError: Timed out"}] * (world_size - 1),
        ("send_recv", "float32", None): [
            {"before": tensors({"tensor": [1.0, 0.0]}, "float32"),
             "after": tensors({"tensor": [1.0, 0.0]}, "float32")},
            {"before": tensors({"tensor": [0.0, 0.0]}, "float32"),
             "after": tensors({"tensor": [1.0, 0.0]}, "float32")}],
    }
    # (x, int64, AVG): SUM's result, as if the backend had accepted AVG on integers
    per_rank = [{} for _ in range(world_size)]
    for key, outcomes in cases.items():
        for r in range(world_size):
            per_rank[r][key] = outcomes[r]
    return per_rank


def test_build_survey_classifies_every_case():
    found, records = support.build_survey(fake_cluster(2), probe(), torch="2.13.0")
    status = {(c["collective"], c["dtype"], c["op"]): c["status"] for c in found["cases"]}
    assert status == {
        ("all_reduce", "float32", "SUM"): "ok", ("all_reduce", "float32", "BAND"): "refused",
        ("all_reduce", "int64", "AVG"): "unchecked", ("all_reduce", "int64", "MAX"): "wrong",
        ("reduce", "float32", "SUM"): "ok", ("reduce", "float32", "BAND"): "refused",
        ("reduce", "int64", "AVG"): "unchecked", ("reduce", "int64", "MAX"): "ok",
        ("broadcast", "float32", None): "ok", ("broadcast", "int64", None): "split",
        ("send_recv", "float32", None): "ok"}
    assert found["collectives"] == ["all_reduce", "reduce", "broadcast", "send_recv"]
    assert found["reducing"] == ["all_reduce", "reduce"]
    assert found["dtypes"] == ["float32", "int64"] and found["ops"] == ["SUM", "BAND", "AVG", "MAX"]
    assert found["torch"] == "2.13.0" and found["backend"] == "gloo"
    wrong = support.lookup(found, "all_reduce", "int64", "MAX")
    assert wrong["note"] == "rank(s) 1 disagree with the model"
    assert "AVG needs a floating dtype" in support.lookup(found, "reduce", "int64", "AVG")["note"]
    assert "changed" not in support.lookup(found, "all_reduce", "float32", "BAND")
    assert support.lookup(found, "reduce", "float32", "BAND")["changed"] == [0, 1]
    split = support.lookup(found, "broadcast", "int64")
    assert split["errors"] == ["RuntimeError: nope", "RuntimeError: Timed out"]
    assert len(records) == 8                      # every accepted case has a record
    assert records[0]["params"] == {"op": "SUM"} and records[0]["dtype"] == "float32"
    assert records[support.lookup(found, "reduce", "int64", "MAX")["record"]]["dtype"] == "int64"
    json.dumps(found)                             # the survey is plain JSON


def test_verified_records_are_the_ok_cases_and_pass_the_model():
    found, records = support.build_survey(fake_cluster(2), probe())
    kept = support.verified_records(found, records)
    keys = {(r["collective"], r["dtype"], r["params"].get("op")) for r in kept}
    assert keys == {("all_reduce", "float32", "SUM"), ("reduce", "float32", "SUM"),
                    ("reduce", "int64", "MAX"), ("broadcast", "float32", None),
                    ("send_recv", "float32", None)}
    for record in kept:
        assert all(check(record))
    roots = {r["collective"]: r["params"] for r in kept}
    assert roots["broadcast"] == {"src": 0} and roots["send_recv"] == {"src": 0, "dst": 1}
    assert {r["params"]["dst"] for r in kept if r["collective"] == "reduce"} == {0}


def test_send_recv_is_checked_against_the_model():
    record = {"collective": "send_recv", "world_size": 3, "params": {"src": 0, "dst": 1},
              "ranks": [{"rank": 0, "before": {"tensor": [1.0]}, "after": {"tensor": [1.0]}},
                        {"rank": 1, "before": {"tensor": [0.0]}, "after": {"tensor": [1.0]}},
                        {"rank": 2, "before": {"tensor": None}, "after": {"tensor": None}}]}
    assert support.verify(record) == ("ok", None)
    record["ranks"][1]["after"]["tensor"] = [0.0]
    assert support.verify(record)[0] == "wrong"


def test_tables_group_identical_collectives_and_number_the_errors():
    found, _ = support.build_survey(fake_cluster(2), probe())
    table = support_tables.reduction_table(found)
    text = str(table)
    # all_reduce and reduce differ (MAX int64 is wrong on one), so they are not grouped
    assert "all_reduce · reduce" not in text
    assert table.legend()[0] == "(1) RuntimeError: Cannot use ReduceOp.BAND with non-integral dtype"
    rows = [(labels, [table.cell(c) for c in cases]) for labels, cases in table.rows]
    assert [labels for labels, _ in rows] == [["all_reduce", "SUM"], ["", "BAND"], ["", "AVG"],
                                              ["", "MAX"], ["reduce", "SUM"], ["", "BAND"],
                                              ["", "AVG"], ["", "MAX"]]
    assert rows[0][1] == ["✓", ""] and rows[1][1] == ["no (1)", ""] and rows[5][1] == ["no* (1)", ""]
    assert table.legend()[-1] == "*  the call raised, yet it had already changed the buffers"
    assert rows[2][1] == ["", "? (2)"] and rows[3][1] == ["", "WRONG (3)"]
    assert rows[6][1] == ["", "? (2)"] and rows[7][1] == ["", "✓"]
    html = table._repr_html_()
    assert "<table" in html and "Cannot use ReduceOp.BAND" in html and "background:#fde2e1" in html

    same = copy.deepcopy(found)
    for case in same["cases"]:
        if case["collective"] == "all_reduce" and case["status"] == "wrong":
            case.pop("note")
            case["status"] = "ok"
        case.pop("changed", None)
    assert str(support_tables.reduction_table(same)).splitlines()[2].startswith("all_reduce · reduce")

    moving = support_tables.movement_table(found)
    assert [labels for labels, _ in moving.rows] == [["broadcast"], ["send_recv"]]
    assert [moving.cell(c) for c in moving.rows[0][1]] == ["✓", "split (1)"]
    assert "ranks disagree" in moving.legend()[0]




def test_lookup_summary_and_prediction(capsys):
    found, records = support.build_survey(fake_cluster(2), probe(), probe_seconds=1.5)
    with pytest.raises(KeyError, match="was not probed"):
        support.lookup(found, "gather", "float32")
    with pytest.raises(KeyError, match="say which op"):
        support.lookup(found, "all_reduce", "float32")
    assert support.lookup(found, "broadcast", "float32", "SUM")["op"] is None   # op ignored
    assert "backend gloo (torch ?) · 2 ranks on cpu · 11 cases probed in 1.5 s" in support.summary(found)
    assert support.find_record(records, "reduce", "int64", "MAX")["params"]["op"] == "MAX"
    assert support.find_record(records, "gather", "int64") is None

    def graded(prediction):      # the exercise's check cell
        return grade(prediction, support.accepted(found, prediction), "accepted")

    assert support.accepted(found, None) == {}
    assert not graded(None) and "✎ Fill in" in str(graded(None))
    blank = graded({("broadcast", "float32"): ...})
    assert blank.oks == [None] and "✎ Fill in" in str(blank)
    right = {("all_reduce", "float32", "BAND"): False, ("broadcast", "float32"): True,
             ("all_reduce", "int64", "MAX"): True}
    # all_reduce int64 MAX: accepted, though the model disagrees ("wrong"): still accepted
    assert support.lookup(found, "all_reduce", "int64", "MAX")["status"] == "wrong"
    assert support.accepted(found, right) == right
    shown = graded(right)
    assert shown == [True] * 3 and str(shown).count("✓ ") == 3
    band = verdict(shown, "all_reduce · float32 · BAND")
    assert band.ok is True and band.text.split() == ["predicted", "False", "measured", "False"]
    wrong = {("all_reduce", "float32", "BAND"): True, ("broadcast", "float32"): False}
    shown = graded(wrong)
    assert shown == [False, False] and str(shown).count("✗ ") == 2
    assert str(shown).splitlines()[-1] == "0 of 2 right."
    unprobed = {("gather", "float32"): True}       # left out: graded ✗, "no such name"
    assert support.accepted(found, unprobed) == {}
    assert graded(unprobed) == [False] and "no such name" in str(graded(unprobed))


def test_save_survey_writes_next_to_the_records(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(tmp_path))
    found, _ = support.build_survey(fake_cluster(2), probe())
    path = support.save_survey("12_backend_support", found)
    assert path.name == "12_backend_support.survey.json"
    assert json.loads(path.read_text())["cases"][0]["status"] == "ok"


def test_the_exercise_asks_for_a_prediction_and_names_unprobed_cases():
    from helpers.checks import grade

    survey = {"reducing": ["all_reduce"], "cases": [
        {"collective": "all_reduce", "dtype": "int8", "op": "SUM", "status": "ok"},
        {"collective": "broadcast", "dtype": "bool", "op": None, "status": "refused"}]}
    for blank in (None, ...):
        assert support.accepted(survey, blank) == {}
        assert grade(blank, support.accepted(survey, blank), "cases").oks == []
    prediction = {("all_reduce", "int8", "SUM"): True, ("broadcast", "bool"): False,
                  ("all_reduce", "int8"): True, ("gather", "float64"): True}
    assert support.accepted(survey, prediction) == {("all_reduce", "int8", "SUM"): True,
                                                    ("broadcast", "bool"): False}
    graded = grade(prediction, support.accepted(survey, prediction), "cases")
    assert graded.oks == [True, True, False, False]
    assert "no such name" in str(graded)
