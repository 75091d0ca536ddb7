"""The measured figures of notebooks 09, 14 and 18 hold the numbers they were given (bar
lengths and heights, labels) and read well on the page (helpers.figures.audit)."""
from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.patches import Rectangle  # noqa: E402

from helpers.collectives.p2p_figures import (exchange_rows, outcome_text,  # noqa: E402
                                             plot_exchange_times, plot_outcomes)
from helpers.figures.audit import audit  # noqa: E402
from helpers.runtime.disposable import RankOutcome  # noqa: E402
from helpers.training.mesh import PHASES  # noqa: E402
from helpers.training.mesh_figures import (SUM, phase_bytes, plot_failures,  # noqa: E402
                                           plot_phase_bytes)
from helpers.training.pipeline_measured_figures import (plot_in_flight,  # noqa: E402
                                                        plot_stage_bytes, plot_step_split)


def _bars(ax) -> list[Rectangle]:
    return [p for p in ax.patches if isinstance(p, Rectangle)]


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_exchange_times_draw_each_ranks_seconds():
    pulled = [{"rank": r, "waited": {1: 3.0 + r / 10, 1 << 20: 3.1},
               "took": {"ordered": {2: 0.01 * (r + 1), 1 << 20: 0.02},
                        "batched": {2: 0.003, 1 << 20: 0.007}}} for r in (0, 1)]
    pulled.append({"rank": 2, "waited": {}, "took": {}})
    rows = exchange_rows(pulled)
    assert [(way, n) for way, n, _ in rows] == [("both send first", 1),
                                               ("both send first", 1 << 20), ("ordered", 2),
                                               ("ordered", 1 << 20), ("batched", 2),
                                               ("batched", 1 << 20)]
    fig = plot_exchange_times(rows, 3.0, "t")
    few, large = fig.axes
    widths = sorted(round(b.get_width(), 3) for b in _bars(few))
    assert widths == [0.003, 0.003, 0.01, 0.02, 3.0, 3.1]
    assert sorted(round(b.get_width(), 3) for b in _bars(large)) == [0.007, 0.007, 0.02, 0.02,
                                                                     3.1, 3.1]
    stuck = [b for b in _bars(few) if b.get_width() >= 3.0]     # both send first: red
    assert len({b.get_facecolor() for b in stuck}) == 1
    assert stuck[0].get_facecolor() != _bars(few)[-1].get_facecolor()
    assert "3.100 s" in _texts(fig) and "0.010 s" in _texts(fig)
    assert not audit(fig).problems()


def test_phase_bytes_sum_and_bars():
    values = {"reduce_scatter in rows": (520, 256), "all_reduce across rows": (260, 256),
              "all_gather in rows": (262, 256), "flat all_reduce": (780, 768)}
    traffic = [{k: {"measured": (a + r) * 1024, "model": b * 1024} for k, (a, b) in
                values.items()} for r in range(2)]
    groups = phase_bytes(traffic, PHASES[1:])
    assert list(groups)[3] == SUM and groups[SUM] == ([1042 * 1024, 1045 * 1024], 768 * 1024)
    fig = plot_phase_bytes(groups, "t")
    heights = [round(b.get_height()) for b in _bars(fig.axes[0])]
    assert heights == [520, 521, 260, 261, 262, 263, 1042, 1045, 780, 781]
    assert "1.36× model" in _texts(fig)
    assert not audit(fig).problems()
    for t in traffic:                       # NCCL: the model alone, no bars
        for phase in t.values():
            phase["measured"] = None
    assert _bars(plot_phase_bytes(phase_bytes(traffic, PHASES[1:]), "t").axes[0]) == []


def test_failures_one_bar_per_rank():
    outcomes = [{"rank": 0, "outcome": "DistStoreError after 1.0 s: x", "elapsed": 1.02},
                {"rank": 1, "outcome": "RuntimeError after 5.0 s: y", "elapsed": 5.01}]
    fig = plot_failures(outcomes, 1.0, 1, "t")
    assert [round(b.get_width(), 2) for b in _bars(fig.axes[0])] == [1.02, 5.01]
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["rank 0",
                                                                      "rank 1 (skipped)"]
    assert {"DistStoreError", "RuntimeError"} <= set(_texts(fig))
    assert not audit(fig).problems()


def test_step_split_stacks_compute_transfers_and_rest():
    table = [{"schedule": s, "m": m, "step_ms": 100.0 * m, "compute_ms": 30.0 * m,
              "transfer_ms": 20.0 * m} for s in ("GPipe", "1F1B") for m in (1, 2)]
    fig = plot_step_split(table, "t")
    for ax in fig.axes:
        heights = [round(b.get_height()) for b in _bars(ax)]
        assert heights == [30, 60, 20, 40, 50, 100]     # compute, transfers, rest; m = 1, 2
    assert not audit(fig).problems()


@pytest.mark.parametrize("peaks", [{"GPipe": [8, 8, 8], "1F1B": [3, 2, 1]}])
def test_in_flight_bars_per_rank(peaks):
    fig = plot_in_flight(peaks, 8, "t")
    assert [round(b.get_height()) for b in _bars(fig.axes[0])] == [8, 8, 8, 3, 2, 1]
    assert not audit(fig).problems()


def test_stage_bytes_payload_and_framing():
    rows = [[{"schedule": s, "m": m, "model": 2**20 * (1 + (r == 1)),
              "measured": 2**20 * (1 + (r == 1)) + 144 * m * (1 + (r == 1))}
             for s in ("GPipe", "1F1B") for m in (1, 2, 4)] for r in range(2)]
    fig = plot_stage_bytes(rows, "t")
    assert [round(b.get_height(), 1) for b in _bars(fig.axes[0])] == [1.0, 2.0]
    lines = fig.axes[1].get_lines()
    assert sorted(tuple(line.get_ydata()) for line in lines) == sorted(
        [(144, 288, 576)] * 2 + [(288, 576, 1152)] * 2)
    assert not audit(fig).problems()
    for stage in rows:
        for row in stage:
            row["measured"] = None
    assert len(plot_stage_bytes(rows, "t").axes) == 1   # NCCL: the model alone


def test_outcomes_one_box_per_rank_coloured_by_how_it_ended():
    error = ("RuntimeError: Detected mismatch.\tRank 0 is running collective: x. Collectives "
             "differ in the following aspects: Sequence number: 1vs 0")
    runs = {"2 ranks": [RankOutcome(0, 0, [2.0], None, 0.02)],
            "3 ranks": [RankOutcome(0, 1, None, error, 0.03), RankOutcome(2, 1, None, error)]}
    assert outcome_text(runs["2 ranks"][0]) == "returned [2.0] after 0.02 s"
    assert outcome_text(runs["3 ranks"][0]) == ("raised RuntimeError after 0.03 s: "
                                                "Sequence number: 1vs 0")
    fig = plot_outcomes(runs, {0: "sent"}, "t")
    boxes = _bars(fig.axes[0])
    assert len(boxes) == 3 and boxes[0].get_edgecolor() != boxes[1].get_edgecolor()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [
        "2 ranks · rank 0: sent", "3 ranks · rank 0: sent", "3 ranks · rank 2: no part"]
    assert "\t" not in "".join(_texts(fig))
    assert not audit(fig).problems()
