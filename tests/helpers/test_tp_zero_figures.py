"""The figures of notebooks 16 and 17 (helpers.training.zero_figures, tp_figures) hold the
values they were given, at 2, 3 and 4 ranks, and read at 1280 px (helpers.figures.audit)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from test_figure_audit import assert_reads

from helpers.training import tp_figures, zero_figures

RANKS = [2, 3, 4]


def _bars(fig, gid: str) -> list:
    return [p for p in fig.axes[0].patches if p.get_gid() == gid]


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def _row(layer, phase, model, measured, calls=1):
    return {"layer": layer, "phase": phase, "model": model, "measured": measured,
            "calls": calls, "collectives": {}}


@pytest.mark.parametrize("n", RANKS)
def test_sent_bytes_stack_the_model_and_the_headers(n):
    blocks = [[_row("column-parallel", "forward", 0, 0, 0),
               _row("row-parallel", "forward", 2304.0, 4032 + r),
               _row("column + gather", "forward", 4608.0, 5472)] for r in range(n)]
    labels, model, measured = tp_figures.layer_groups(blocks)
    assert labels == ["column\nforward", "row\nforward", "column\n+ all_gather\nforward"]
    fig = tp_figures.plot_sent_bytes(labels, model, measured, "t")
    assert [p.get_height() for p in _bars(fig, "model")] == [0, 2304.0, 4608.0]
    for r in range(n):
        base = [p.get_height() for p in _bars(fig, f"rank:{r}")]
        extra = [p.get_height() for p in _bars(fig, f"headers:{r}")]
        assert base == [0, 2304.0, 4608.0]
        assert extra == [0, 4032 + r - 2304.0, 5472 - 4608.0]
    assert _texts(fig).count("no call:\n0 B") == 1
    assert_reads(fig)


def test_sent_bytes_draw_the_model_alone_where_nothing_was_measured():
    fig = tp_figures.plot_sent_bytes(["a", "b"], [10.0, 20.0], [[None, None]] * 2, "nccl")
    assert [p.get_height() for p in _bars(fig, "model")] == [10.0, 20.0]
    assert not _bars(fig, "rank:0")


def test_phase_groups_put_torch_beside_the_hand_built_model():
    hand = [[_row("by hand", "forward", 100.0, 150), _row("by hand", "backward", 200.0, 260)]]
    theirs = [[_row("pm", "forward", 0, 151, 0), _row("pm", "backward", 0, 262, 0)]]
    labels, model, measured = tp_figures.phase_groups(hand, theirs)
    assert labels == ["by hand\nforward", "parallelize_module\nforward",
                      "by hand\nbackward", "parallelize_module\nbackward"]
    assert model == [100.0, 100.0, 200.0, 200.0]
    assert measured == [[150], [151], [260], [262]]


@pytest.mark.parametrize("n", RANKS)
def test_input_grads_show_each_part_their_sum_and_the_whole(n):
    rng = np.random.default_rng(n)
    parts = [rng.normal(size=(6, 3)) for _ in range(n)]
    fig = tp_figures.plot_input_grads(parts, sum(parts), "dL/dX")
    images = [ax.images[0].get_array() for ax in fig.axes]
    assert len(images) == n + 2
    for r in range(n):
        assert np.allclose(images[r], parts[r])
    assert np.allclose(images[n], sum(parts)) and np.allclose(images[n + 1], sum(parts))
    assert_reads(fig)


@pytest.mark.parametrize("n", RANKS)
def test_bias_gap_bars_are_each_ranks_gap_and_the_model(n):
    bias = np.array([0.1, -0.2, 0.05, 0.3])
    gaps = [np.tile((n - 1) * bias, (5, 1)) for _ in range(n)]
    fig = tp_figures.plot_bias_gap(gaps, bias, "bias")
    assert np.allclose([p.get_height() for p in _bars(fig, "model")], (n - 1) * bias)
    for r in range(n):
        assert np.allclose([p.get_height() for p in _bars(fig, f"rank:{r}")], (n - 1) * bias)
    assert_reads(fig)


@pytest.mark.parametrize("n", RANKS)
def test_skipped_marks_the_missing_call_of_the_rank_behind(n):
    entered = [["all_gather_single", "reduce_scatter_single"] for _ in range(n)]
    entered[1] = entered[1][:1]
    outcomes = [f"raised after 3.0 s (rank {r})" for r in range(n)]
    fig = zero_figures.plot_skipped(entered, outcomes, "skip")
    gids = [p.get_gid() for p in fig.axes[0].patches]
    assert [g for g in gids if g.startswith("skipped")] == ["skipped:1:1"]
    assert sum(g.startswith("call:") for g in gids) == 2 * n - 1
    assert _texts(fig).count("scatter") == n - 1 and _texts(fig).count("skipped") == 1
    assert all(o in _texts(fig) for o in outcomes)
    assert_reads(fig)


@pytest.mark.parametrize("n", RANKS)
def test_scatter_bytes_hold_both_measures_per_rank(n):
    per_rank = [{"0.weight": {"reduce_scatter": 3264 + r, "all_reduce": 3264 + r,
                              "ring model": 768.0},
                 "2.bias": {"reduce_scatter": 816, "all_reduce": 816, "ring model": 24.0}}
                for r in range(n)]
    fig = zero_figures.plot_scatter_bytes(per_rank, "scatter")
    assert [p.get_height() for p in _bars(fig, "model")] == [768.0, 24.0]
    for r in range(n):
        assert [p.get_height() for p in _bars(fig, f"reduce_scatter:{r}")] == [3264 + r, 816]
        assert [p.get_height() for p in _bars(fig, f"all_reduce:{r}")] == [3264 + r, 816]
    assert_reads(fig)


@pytest.mark.parametrize("n", RANKS)
def test_odd_rows_pad_each_rank_to_the_same_slots(n):
    rows = n + 1
    per = -(-rows // n)
    held = [max(0, min(per, rows - r * per)) for r in range(n)]
    fig = zero_figures.plot_odd_rows(held, held, rows, "odd")
    texts = _texts(fig)
    assert texts.count("pad") == n * per - rows
    assert sum(t.startswith("row ") for t in texts) == 2 * rows   # gathered, then cut
    assert f"cut back to {rows} rows" in texts
    assert_reads(fig)


@pytest.mark.parametrize("n", RANKS)
def test_errors_bars_are_each_ranks_gap_exact_zeros_labelled(n):
    diffs = [{"W1 grad": 1e-17 * (r + 1), "b2 grad": 0.0, "output": 2e-16} for r in range(n)]
    fig = tp_figures.plot_errors(diffs, 1e-12, "errors")
    for r in range(n):
        bars = _bars(fig, f"rank:{r}")
        tops = [p.get_y() + p.get_height() for p in bars]
        assert tops == pytest.approx([1e-17 * (r + 1), 1e-20, 2e-16], rel=1e-6)
    assert _texts(fig).count("0") == n
    assert [line.get_ydata()[0] for line in fig.axes[0].lines][:1] == [1e-12]
    assert_reads(fig)
