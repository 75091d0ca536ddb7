"""Notebook 09 (send/recv) executed at 2, 3 and 4 ranks on gloo; its helper
(helpers.collectives.p2p) is tested in tests/helpers/test_p2p.py."""
from __future__ import annotations

import json
import re

import pytest

from animation_checks import assert_one_animation_of
from conftest import NOTEBOOKS
from notebook_runner import assert_records_match_model, execute, notebook_text, png_count
from reports import assert_all_pass, exercise

PAIR_TIMEOUT_S = 3.0   # the deadlock demo's group timeout in notebook 09


def _duration(nb, marker: str) -> float:
    """How long the (only) code cell containing `marker` ran, from papermill's metadata."""
    cells = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    assert len(cells) == 1, marker
    return float(cells[0].metadata["papermill"]["duration"])


def _load(results, stem):
    records = json.loads((results / f"{stem}.json").read_text())
    return records if isinstance(records, list) else [records]


@pytest.mark.timing
@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks, src, dst", [(2, 0, 1), (3, 2, 0), (4, 0, 1)])
def test_send_recv_notebook(n_ranks, src, dst, tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NOTEBOOKS / "09_send_recv.ipynb", tmp_path, n_ranks=n_ranks, src=src, dst=dst)

    records = _load(results, "09_send_recv")
    n = n_ranks
    expected_pairs = ([(src, dst), (dst, src)] + [(r, (r + 1) % n) for r in range(n)]
                      + [(0, 1), (1, 0)] * 3 + [(r, (r - 1) % n) for r in range(n)])
    assert [(r["params"]["src"], r["params"]["dst"]) for r in records] == expected_pairs
    assert_records_match_model(records, n)
    for record in records:
        assert record["collective"] == "send_recv"
        ends = (record["params"]["src"], record["params"]["dst"])
        for r in record["ranks"]:  # only the two ends of a transfer hold a tensor
            assert (r["before"]["tensor"] is None) == (r["rank"] not in ends)
    first = {r["rank"]: r for r in records[0]["ranks"]}
    assert first[dst]["after"]["tensor"] == [10.0 * src + 1, 10.0 * src + 2]
    # the step-through animation of the first transfer ends with what its ranks recorded
    assert_one_animation_of(nb, records[0], "tensor")

    reports = assert_all_pass(nb, n)
    text = notebook_text(nb)
    pairs = [who for shown in reports for who, ok, _ in shown.verdicts if "→" in who]
    assert set(pairs) == {f"{a} → {b}" for a, b in expected_pairs}
    assert exercise(reports).oks == [True] * n, "the exercise check did not pass"
    # diagram, the send/recv record, the reply, the ring shift, the timed exchanges, DETAIL
    assert png_count(nb) >= 6

    # the deadlock: both ranks of the pair raise after the timeout, at both sizes, never earlier
    raised = re.findall(r"rank (\d): (\d+) element\(s\): send raised after ([\d.]+) s", text)
    assert sorted((int(r), int(k)) for r, k, _ in raised) == [(0, 1), (0, 1 << 20), (1, 1), (1, 1 << 20)]
    assert all(PAIR_TIMEOUT_S - 0.5 <= float(t) <= PAIR_TIMEOUT_S + 3 for _, _, t in raised), raised
    assert "went through" not in text
    for marker in ("both_send_first(1 << 20, pair)", "both_send_first(1, pair)"):
        assert _duration(nb, marker) < PAIR_TIMEOUT_S + 10
    # ... the timed-out group is broken, the default group and the cluster are not
    assert text.count("the timed-out group is unusable") == 2
    for r in range(n):
        assert f"rank {r}: all_reduce on the default group still works: {n} = world_size" in text
    swaps = [(who, line.split()[3]) for shown in reports for who, ok, line in shown.verdicts
             if line.endswith("elements: received its peer's outbox")]
    assert sorted(swaps) == sorted([("0", "2"), ("0", "1048576"), ("1", "2"), ("1", "1048576")] * 3)
    assert len(re.findall(r"rank [01]: +\d+ elements swapped in [\d.]+ s", text)) == 3 * 2 * 2
    assert "received [4609434218613702656, 4612811918334230528]" in text  # float64 bits as int64
