"""Notebook 08 (all_to_all) executed for real at 2, 3 and 4 ranks on gloo; its helper
(helpers.collectives.all_to_all) is tested in tests/helpers/test_all_to_all.py."""
from __future__ import annotations

import pytest
from animation_checks import assert_one_animation_of
from notebook_runner import (assert_records_match_model, execute_with_results, notebook_text,
                             png_count)
from reports import assert_all_pass, exercise

from helpers.collectives import all_to_all


def _uneven(record: dict) -> bool:
    sizes = [r["before"].get("input_split_sizes") for r in record["ranks"]]
    return all(s is not None for s in sizes) and any(len(set(s)) > 1 for s in sizes)


# --------------------------------------------------------------------------- notebook 08

@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 3, 4])
def test_all_to_all_notebook(n_ranks, tmp_path, monkeypatch):
    nb, records = execute_with_results("08_all_to_all", tmp_path, monkeypatch, n_ranks=n_ranks)
    assert {r["collective"] for r in records} == {"all_to_all", "all_to_all_single"}
    assert_records_match_model(records, n_ranks)
    assert all(all_to_all.is_transpose(record) for record in records)
    assert any(_uneven(r) for r in records if r["collective"] == "all_to_all_single"), \
        "no all_to_all_single record with uneven split sizes"

    reports = assert_all_pass(nb, n_ranks)
    every_rank = {r: True for r in range(n_ranks)}
    assert any(shown.by_rank() == every_rank for shown in reports), "no ✓ for every rank"
    assert exercise(reports).oks == [True] * n_ranks, "the exercise check did not pass"
    text = notebook_text(nb)
    # gloo refuses both pitfalls on every rank, before any data moves
    assert text.count("input tensor list size") == n_ranks
    assert text.count("invalid tensor size") == n_ranks
    # diagram + a plot per record shown + two exchange matrices
    assert png_count(nb) >= 1 + 3 + 2
    assert_one_animation_of(nb, records[0], "output_tensor_list")   # ends with `after`
