"""helpers.records: pulled tensors become JSON lists in a record (the format saved results
and their tests read), and a training run's record holds every pull, per rank."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.distributed as dist

from helpers import records


def _cluster(n: int) -> SimpleNamespace:
    """What records read of a TutorialCluster; `pull` answers as `cluster.pull` does."""
    cluster = SimpleNamespace(backend="gloo", world_size=n,
                              ranks=[SimpleNamespace(rank=r, device="cpu") for r in range(n)])
    cluster.states = []
    cluster.pull = lambda *names: [{"rank": r, **{k: s[k] for k in names}}
                                   for r, s in enumerate(cluster.states)]
    return cluster


def test_record_values_are_json_lists():
    value = {"t": torch.tensor([[1.5, 2.0]], dtype=torch.float64), "b": torch.tensor([True]),
             "i": torch.arange(3), "h": torch.tensor([0.5], dtype=torch.bfloat16),
             "a": np.arange(2.0), "n": np.int64(7), "pair": (torch.ones(1), None),
             "nested": [{"x": torch.zeros(2)}], "s": "text"}
    got = records.record_values(value)
    assert got == {"t": [[1.5, 2.0]], "b": [True], "i": [0, 1, 2], "h": [0.5],
                   "a": [0.0, 1.0], "n": 7, "pair": [[1.0], None],
                   "nested": [{"x": [0.0, 0.0]}], "s": "text"}
    assert type(got["n"]) is int and type(got["i"][0]) is int
    json.dumps(got)


def test_a_large_tensor_is_saved_as_its_summary():
    t = torch.arange(10.0, dtype=torch.float64).reshape(2, 5)
    assert records.record_values(t, full_up_to=10) == t.tolist()
    summary = records.record_values(t, full_up_to=9)
    assert summary == {"shape": [2, 5], "dtype": "float64", "norm": pytest.approx(t.norm().item()),
                       "sum": 45.0, "head": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]}


def test_a_collective_record_keeps_its_format():
    cluster = _cluster(2)
    cluster.states = [{"before": {"tensor": torch.zeros(2), "scatter_list": [torch.ones(2)] * 2},
                       "after": {"tensor": torch.ones(2), "scatter_list": None}},
                      {"before": {"tensor": torch.zeros(2), "scatter_list": None},
                       "after": {"tensor": torch.full((2,), 2.0), "scatter_list": None}}]
    record = records.make_record(cluster, "scatter", {"src": 0, "op": dist.ReduceOp.SUM})
    assert record == {
        "collective": "scatter", "backend": "gloo", "world_size": 2, "dtype": "float32",
        "params": {"src": 0, "op": "SUM"},
        "ranks": [{"rank": 0, "device": "cpu",
                   "before": {"tensor": [0.0, 0.0], "scatter_list": [[1.0, 1.0], [1.0, 1.0]]},
                   "after": {"tensor": [1.0, 1.0], "scatter_list": None}},
                  {"rank": 1, "device": "cpu",
                   "before": {"tensor": [0.0, 0.0], "scatter_list": None},
                   "after": {"tensor": [2.0, 2.0], "scatter_list": None}}]}
    # the dtype is the first tensor's, depth first, whichever rank holds it
    cluster.states = [{"before": {"tensor": None}, "after": {"tensor": None}},
                      {"before": {"tensor": torch.zeros(1, dtype=torch.int64)},
                       "after": {"tensor": torch.zeros(1, dtype=torch.int64)}}]
    assert records.make_record(cluster, "send_recv")["dtype"] == "int64"
    cluster.states = [{"before": {"tensor": None}, "after": {"tensor": None}}] * 2
    assert records.make_record(cluster, "send_recv")["dtype"] is None


def test_a_run_record_holds_every_pull_per_rank():
    cluster = _cluster(2)
    grads = [{"rank": r, "g": torch.full((2,), float(r)), "out": torch.ones(1)} for r in (0, 1)]
    counts = [{"rank": r, "calls": r + 1, "out": torch.ones(1)} for r in (0, 1)]
    big = [{"rank": r, "w": torch.ones(records.FULL_UP_TO + 1)} for r in (0, 1)]
    record = records.run_record("17_x", cluster, [grads, counts, big], d_hidden=8,
                                table=[{"m": 1, "t": np.float64(0.5)}])
    assert list(record) == ["kind", "backend", "world_size", "d_hidden", "table", "ranks"]
    assert record["kind"] == "17_x" and record["table"] == [{"m": 1, "t": 0.5}]
    assert [{k: v for k, v in r.items() if k != "w"} for r in record["ranks"]] == [
        {"rank": 0, "device": "cpu", "g": [0.0, 0.0], "out": [1.0], "calls": 1},
        {"rank": 1, "device": "cpu", "g": [1.0, 1.0], "out": [1.0], "calls": 2}]
    assert record["ranks"][0]["w"]["shape"] == [records.FULL_UP_TO + 1]   # summarised
    json.dumps(record)


def test_a_run_record_refuses_pulls_that_do_not_fit():
    cluster = _cluster(2)
    one = [{"rank": 0, "x": 1}, {"rank": 1, "x": 2}]
    with pytest.raises(ValueError, match="'x' was pulled twice with different values"):
        records.run_record("k", cluster, [one, [{"rank": 0, "x": 1}, {"rank": 1, "x": 3}]])
    with pytest.raises(ValueError, match="pass what cluster.pull"):
        records.run_record("k", cluster, [[{"rank": 0, "x": 1}]])
    with pytest.raises(ValueError, match="pass what cluster.pull"):
        records.run_record("k", cluster, [[s["x"] for s in one]])


def test_save_run_writes_the_record(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(tmp_path))
    cluster = _cluster(1)
    path = records.save_run("19_y", cluster, [[{"rank": 0, "t": torch.ones(2)}]], steps=5)
    assert path == tmp_path / "19_y.json"
    assert json.loads(path.read_text()) == {
        "kind": "19_y", "backend": "gloo", "world_size": 1, "steps": 5,
        "ranks": [{"rank": 0, "device": "cpu", "t": [1.0, 1.0]}]}


def test_saved_results_are_strict_json(tmp_path, monkeypatch):
    import json
    import math

    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(tmp_path))
    path = records.save_results("x", {"sizes": [0, math.inf, -math.inf], "gap": math.nan})
    text = path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    saved = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert saved == {"sizes": [0, "inf", "-inf"], "gap": "nan"}
    assert [float(v) for v in saved["sizes"]] == [0, math.inf, -math.inf]


def test_a_saved_path_shows_no_machine_path(tmp_path, monkeypatch):
    from IPython.lib.pretty import pretty

    from helpers.paths import REPO_ROOT

    monkeypatch.delenv("TUTORIAL_RESULTS_DIR", raising=False)
    monkeypatch.setenv("TUTORIAL_BUILD_DIR", str(tmp_path / "b"))
    path = records.save_results("05_x", {"a": 1})
    assert path == tmp_path / "b" / "results" / "05_x.json" and path.is_file()
    assert str(path) == str(tmp_path / "b" / "results" / "05_x.json")   # absolute for code
    assert repr(path) == pretty(path) == "results/05_x.json"              # the build folder's
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(tmp_path / "elsewhere"))
    assert repr(records.save_results("05_x", {})) == "elsewhere/05_x.json"
    in_repo = records.SavedPath(REPO_ROOT / "build" / "results" / "05_x.json")
    assert repr(in_repo) == "build/results/05_x.json"
    assert str(tmp_path) not in repr(path) and str(REPO_ROOT) not in repr(in_repo)
