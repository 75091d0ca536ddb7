"""Notebooks 08 (all_to_all) and 12 (backend support), and their helpers.

The notebook tests execute them for real at 2, 3 and 4 ranks on gloo; the helper
tests (helpers.collectives.all_to_all, helpers.collectives.support) need no engines.
"""
from __future__ import annotations

import copy
import json
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from animation_checks import assert_one_animation_of
from conftest import NOTEBOOKS  # noqa: E402
from helpers.collectives import all_to_all, examples, models, support, support_tables  # noqa: E402
from helpers.checks import check  # noqa: E402
from notebook_runner import (assert_records_match_model, execute, printed,  # noqa: E402
                             notebook_text, png_count)


def _uneven(record: dict) -> bool:
    sizes = [r["before"].get("input_split_sizes") for r in record["ranks"]]
    return all(s is not None for s in sizes) and any(len(set(s)) > 1 for s in sizes)


# --------------------------------------------------------------------------- notebook 08

@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 3, 4])
def test_all_to_all_notebook(n_ranks, tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NOTEBOOKS / "08_all_to_all.ipynb", tmp_path, n_ranks=n_ranks)

    records = json.loads((results / "08_all_to_all.json").read_text())
    assert {r["collective"] for r in records} == {"all_to_all", "all_to_all_single"}
    assert_records_match_model(records, n_ranks)
    assert all(all_to_all.is_transpose(record) for record in records)
    assert any(_uneven(r) for r in records if r["collective"] == "all_to_all_single"), \
        "no all_to_all_single record with uneven split sizes"

    text = notebook_text(nb)
    assert "✗" not in text
    for r in range(n_ranks):
        assert f"rank {r} ✓" in text, f"no ✓ line for rank {r}"
    assert "All ranks right!" in text
    # gloo refuses both pitfalls on every rank, before any data moves
    assert text.count("input tensor list size") == n_ranks
    assert text.count("invalid tensor size") == n_ranks
    # diagram + a plot per record shown + two exchange matrices
    assert png_count(nb) >= 1 + 3 + 2
    assert_one_animation_of(nb, records[0], "output_tensor_list")   # ends with `after`


# --------------------------------------------------------------------------- notebook 12

@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 3, 4])
def test_backend_support_notebook(n_ranks, tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NOTEBOOKS / "12_backend_support.ipynb", tmp_path, n_ranks=n_ranks)

    records = json.loads((results / "12_backend_support.json").read_text())
    assert isinstance(records, list)
    assert_records_match_model(records, n_ranks)

    found = json.loads((results / "12_backend_support.survey.json").read_text())
    assert found["backend"] == "gloo" and found["world_size"] == n_ranks
    assert found["torch"].startswith("2.13")
    statuses = {(c["collective"], c["dtype"], c["op"]): c["status"] for c in found["cases"]}
    assert len(statuses) == 4 * 9 * 8 + 8 * 9
    for collective in support.REDUCING:
        assert statuses[(collective, "int64", "AVG")] == "refused"
        assert statuses[(collective, "float32", "BAND")] == "refused"
        assert statuses[(collective, "float32", "SUM")] == "ok"
    assert "Cannot use ReduceOp.BAND" in support.lookup(found, "all_reduce", "float32", "BAND")["error"]
    # gloo sums, then fails to divide the integer tensor: the buffers changed (notebook text)
    assert support.lookup(found, "all_reduce", "int64", "AVG")["changed"] == list(range(n_ranks))
    assert "changed" not in support.lookup(found, "all_reduce", "float32", "BAND")
    assert not [k for k, s in statuses.items() if s in ("split", "wrong")]
    # every verified case is a saved record, and nothing else is
    saved = {(r["collective"], r["dtype"], r["params"].get("op")) for r in records}
    assert saved == {k for k, s in statuses.items() if s == "ok"}
    assert {r["collective"] for r in records} >= set(models.COLLECTIVES) & set(found["collectives"])

    text = notebook_text(nb)
    assert "✗" not in text
    for r in range(n_ranks):
        assert f"rank {r} ✓" in text, f"no ✓ line for rank {r}"
    assert "All predictions right!" in text
    assert f"backend gloo (torch {found['torch']})" in text
    assert png_count(nb) >= 1


# --------------------------------------------------------------------------- helpers.collectives.all_to_all

def model_record(collective: str, world_size: int, params: dict | None = None) -> dict:
    befores = examples.example_befores(collective, world_size, params)
    afters = examples.model_after(collective, befores, params)
    return {"collective": collective, "backend": "gloo", "world_size": world_size,
            "dtype": "float32", "params": {},
            "ranks": [{"rank": r, "device": "cpu", "before": b, "after": a}
                      for r, (b, a) in enumerate(zip(befores, afters))]}


@pytest.mark.parametrize("world_size", [2, 3, 5])
@pytest.mark.parametrize("collective", ["all_to_all", "all_to_all_single"])
def test_exchange_matrices_are_transposes(collective, world_size):
    record = model_record(collective, world_size)
    sent, received = all_to_all.sent_matrix(record), all_to_all.received_matrix(record)
    assert sent[1][0] == [11.0, 11.0] and received[0][1] == [11.0, 11.0]
    assert received == all_to_all.transpose(sent) and all_to_all.is_transpose(record)
    text = all_to_all.exchange_text(record)
    assert "every cell: 2 element(s)" in text and text.endswith("received = sent transposed: yes")


def test_uneven_splits_are_cut_by_the_recorded_sizes():
    params = {"input_split_sizes": [[j + 1 for j in range(3)]] * 3}
    record = model_record("all_to_all_single", 3, params)
    assert record["ranks"][0]["before"]["input_split_sizes"] == [1, 2, 3]
    sent, received = all_to_all.sent_matrix(record), all_to_all.received_matrix(record)
    assert sent[0] == [[1.0], [2.0, 2.0], [3.0, 3.0, 3.0]]
    assert received[2] == [[3.0] * 3, [13.0] * 3, [23.0] * 3]
    assert all_to_all.is_transpose(record)
    assert "v ×n" in all_to_all.exchange_text(record)
    assert all_to_all.chunk_text([13.0] * 3) == "13 ×3" and all_to_all.chunk_text([]) == "—"
    assert all_to_all.chunk_text([1.0, 2.0]) == "1,2" and all_to_all.chunk_text([7.0, 7.0], False) == "7"


def test_a_wrong_delivery_is_not_a_transpose():
    record = model_record("all_to_all", 3)
    bad = copy.deepcopy(record)
    bad["ranks"][1]["after"]["output_tensor_list"][2] = [99.0, 99.0]
    assert not all_to_all.is_transpose(bad)
    assert all_to_all.exchange_text(bad).endswith("transposed: NO")


def test_matrix_input_errors():
    with pytest.raises(ValueError, match="not an all_to_all record"):
        all_to_all.sent_matrix(model_record("all_gather", 2))
    with pytest.raises(ValueError, match="must be 2 sizes adding up to 4"):
        all_to_all.split_sizes({"input_split_sizes": [1, 2]}, "input_split_sizes", 4, 2)
    with pytest.raises(ValueError, match="split evenly"):
        all_to_all.split_sizes({}, "input_split_sizes", 5, 2)


def test_plot_exchange_draws_both_matrices_in_plot_record_colours():
    from helpers.figures import panels

    record = model_record("all_to_all", 3)
    fig = all_to_all.plot_exchange(record)
    cells = {p.get_gid(): p.get_facecolor() for ax in fig.axes for p in ax.patches}
    assert len(cells) == 2 * 9
    colors = panels.record_colors(panels.build_panels(record))
    from matplotlib.colors import to_rgba
    assert cells["sent[1][0]=11"] == cells["received[0][1]=11"] == to_rgba(colors("11"))
    assert cells["sent[2][1]=22"] == cells["received[1][2]=22"] == to_rgba(colors("22"))
    assert "transposed ✓" in fig.texts[0].get_text()


# --------------------------------------------------------------------------- helpers.collectives.support

def fake_cluster(world_size: int) -> SimpleNamespace:
    return SimpleNamespace(backend="gloo", world_size=world_size,
                           ranks=[SimpleNamespace(rank=r, device="cpu") for r in range(world_size)])


def tensors(state: dict, dtype: str) -> dict:
    """A state as cluster.pull brings it: tensors as {"values", "dtype", "device"}."""
    def one(values):
        return {"values": values, "dtype": dtype, "device": "cpu"}
    return {k: None if v is None else [one(x) for x in v] if k in models.LIST_ARGS else one(v)
            for k, v in state.items()}


def accepted(collective: str, world_size: int, op: str | None = None, dtype: str = "float32",
             tamper: int | None = None) -> list[dict]:
    """Every rank's outcome of a correct call (rank `tamper` off by one)."""
    params = support.case_params(collective, op)
    befores = examples.example_befores(collective, world_size, params)
    befores = [{k: examples.model_after("broadcast", [{"tensor": v}], {"src": 0}, dtype)[0]["tensor"]
                if v is not None and k not in models.LIST_ARGS else v for k, v in b.items()}
               for b in befores]
    afters = examples.model_after(collective, befores, params, dtype)
    if tamper is not None:
        name = models.OUTPUT[collective]
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


grade_support_prediction = printed(support.grade_support_prediction, verdict=True)


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

    assert grade_support_prediction(None, found) is False
    assert "Fill in" in capsys.readouterr().out
    assert grade_support_prediction({("broadcast", "float32"): ...}, found) is False
    assert "✎ Fill in" in capsys.readouterr().out
    right = {("all_reduce", "float32", "BAND"): False, ("broadcast", "float32"): True,
             ("all_reduce", "int64", "MAX"): True}
    assert grade_support_prediction(right, found) is True
    out = capsys.readouterr().out
    assert out.count("✓ ") == 3 and "All predictions right!" in out
    assert "accepted (wrong)" in out and "refused: RuntimeError: Cannot use ReduceOp.BAND" in out
    wrong = {("all_reduce", "float32", "BAND"): True, ("broadcast", "float32"): False}
    assert grade_support_prediction(wrong, found) is False
    out = capsys.readouterr().out
    assert out.count("✗ ") == 2 and "0 of 2 right." in out


def test_save_survey_writes_next_to_the_records(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(tmp_path))
    found, _ = support.build_survey(fake_cluster(2), probe())
    path = support.save_survey("12_backend_support", found)
    assert path.name == "12_backend_support.survey.json"
    assert json.loads(path.read_text())["cases"][0]["status"] == "ok"
