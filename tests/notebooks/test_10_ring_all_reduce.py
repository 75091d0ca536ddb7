"""Notebook 10 (ring all-reduce) executed at 2, 3 and 4 ranks on gloo; its helper
(helpers.collectives.ring) is tested in tests/helpers/test_ring.py."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from animation_checks import only_animation, ring_texts
from conftest import NOTEBOOKS
from helpers.bench.wire import agrees
from helpers.collectives import ring
from notebook_runner import assert_records_match_model, execute, notebook_text, png_count
from reports import assert_all_pass, shown_reports


def _load(results, stem):
    records = json.loads((results / f"{stem}.json").read_text())
    return records if isinstance(records, list) else [records]


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks, chunk_len", [(2, 3), (3, 1), (4, 2)])
def test_ring_all_reduce_notebook(n_ranks, chunk_len, tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NOTEBOOKS / "10_ring_all_reduce.ipynb", tmp_path, n_ranks=n_ranks,
                 chunk_len=chunk_len)

    n = n_ranks
    records = _load(results, "10_ring_all_reduce")
    assert [r["collective"] for r in records] == ["all_reduce", "all_reduce",
                                                  "reduce_scatter_single", "all_gather_single"]
    assert_records_match_model(records, n)
    data = ring.example_data(n, chunk_len)
    trace = ring.ring_model(data)
    ours = records[0]
    assert [r["before"]["tensor"] for r in ours["ranks"]] == data.tolist()
    assert [r["after"]["tensor"] for r in ours["ranks"]] == [data.sum(axis=0).tolist()] * n
    # every rank after every step, as measured on the ranks, is the model's state
    states = np.array(ours["ring_states"])
    assert states.shape == (2 * n - 1, n, n * chunk_len)
    np.testing.assert_allclose(states, trace.tensors())

    assert_all_pass(nb, n)
    text = notebook_text(nb)
    [equal] = shown_reports(nb, "c23-check")         # our ring against dist.all_reduce
    assert equal.by_rank() == {r: True for r in range(n)} and equal.oks == [True] * n
    [phases] = shown_reports(nb, "c29-check")
    assert phases.oks == [True] * 2 * n
    for r in range(n):
        assert f"rank {r} ✓" in text
        assert (str(r), True, f"rank {r} ✓  phase 1 = reduce_scatter_single") in phases.verdicts
        assert (str(r), True, f"rank {r} ✓  reduce_scatter + all_gather = all_reduce") \
            in phases.verdicts
        factor = 2 * (n - 1) / n
        assert f"rank {r}: sent {2 * (n - 1) * chunk_len} of {n * chunk_len} elements = {factor:.3f}" in text
        # bytes on the wire: our ring (to r + 1) and the library's (to r - 1), measured
        size = n * 1024 * 1024
        model = 2 * (n - 1) / n * size
        wire = re.search(rf"rank {r} ✓  ours (\d+) B \((\d+) to rank {(r + 1) % n}\), library "
                         rf"(\d+) B \((\d+) to rank {(r - 1) % n}\), model {model:.0f} B; "
                         "results equal", text)
        assert wire, f"rank {r}: no bytes line"
        ours, ours_right, library, library_left = map(int, wire.groups())
        assert agrees(ours, model, 1, n) and agrees(library, model, 1, n), wire.group(0)
        assert ours_right >= model and library_left >= model
    # the step-by-step tables: one ✓ per step for every rank (phase 1, the exercise, the whole)
    for steps in (n, n, 2 * n - 1):
        line = re.compile(r"rank \d ✓" + r"\s+✓" * steps + r"\s*$", re.M)
        assert len(line.findall(text)) >= n
    assert png_count(nb) >= 3  # diagram, ring figure, all_reduce record
    # the animation: one frame per step and state in flight, ending with the measured states
    anim = only_animation(nb, "ranks")
    assert anim["frames"] == 1 + 2 * 2 * (n - 1)
    assert anim["last"]["ranks"] == ring_texts(states[-1], n)
