"""Notebook 12 (backend support) executed for real at 2, 3 and 4 ranks on gloo; its helpers
(helpers.collectives.support, support_tables) are tested in tests/helpers/test_support.py."""
from __future__ import annotations

import json

import pytest
from conftest import NOTEBOOKS
from notebook_runner import assert_records_match_model, execute, notebook_text, png_count
from reports import assert_all_pass, shown_reports

from helpers.collectives import registry, support
from helpers.collectives.backend_table import documented

# The survey's collectives under the names of torch's table (the scheme's rows)
TABLE_NAME = {"reduce_scatter_single": "reduce_scatter", "all_gather_single": "all_gather",
              "all_to_all_single": "all_to_all"}


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
    assert {r["collective"] for r in records} >= set(registry.COLLECTIVES) & set(found["collectives"])

    reports = assert_all_pass(nb, n_ranks)
    text = notebook_text(nb)
    every_rank = {r: True for r in range(n_ranks)}
    assert any(shown.by_rank() == every_rank for shown in reports), "no ✓ for every rank"
    [exercise] = shown_reports(nb, "c22")
    assert exercise.oks == [True] * 5, "the exercise check did not pass"
    assert [who for who, _, _ in exercise.verdicts] == [
        "all_reduce · float32 · BAND", "all_reduce · bool · AVG", "reduce_scatter · float16 · MAX",
        "all_reduce · int8 · PRODUCT", "all_to_all · bfloat16"]
    assert f"backend gloo (torch {found['torch']})" in text
    assert png_count(nb) >= 2
    check_scheme(nb, statuses)


def check_scheme(nb, statuses: dict) -> None:
    """The scheme (torch's documented table) is the first code cell and shows one picture;
    its gloo CPU column does not contradict the survey the page shows: every function the
    survey probes is documented ✓ there, and the survey accepted it in some case."""
    scheme = nb.cells[1]
    assert scheme.id == "scheme" and "scheme" in scheme.metadata["tags"]
    assert [o for o in scheme.outputs if "image/png" in o.get("data", {})]
    assert nb.cells[2].source.startswith("## What the picture shows")
    probed = {collective for collective, _, _ in statuses}
    for collective in probed:
        names = (["send", "recv"] if collective == "send_recv"
                 else [TABLE_NAME.get(collective, collective)])
        assert all(documented(name, "gloo", "CPU") == "✓" for name in names), collective
        assert any(s == "ok" for (c, _, _), s in statuses.items() if c == collective), collective
