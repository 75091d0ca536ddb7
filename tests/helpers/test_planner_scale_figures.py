"""Notebook 27's figures hold the numbers they are given: bar lengths and heights, the
planner's ticks, labels; and they read at the page's width (helpers.figures.audit)."""
from __future__ import annotations

import numpy as np
import pytest
from matplotlib.patches import Rectangle

from helpers.figures.audit import audit
from helpers.scale.planner_figures import plot_memory_per_rank, plot_per_rank
from helpers.scale.planner_scale_figures import (PARTS, plot_counts, plot_options, plot_plan,
                                                  plot_published, plot_simulated)


def _bars(ax) -> list[Rectangle]:
    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_visible()]


def _reads(fig) -> None:
    a = audit(fig)
    assert a.min_text_px >= 9 and not a.spills and not a.legend_over_data, a


def test_plot_options_draws_time_and_memory_parts():
    options = [{"config": "a", "time_s": 10.0, "fits": True, "memory_gb": 60.0,
                "memory_parts": dict(zip(PARTS, (10e9, 10e9, 30e9, 10e9)))},
               {"config": "b", "time_s": 11.0, "fits": False, "memory_gb": 100.0,
                "memory_parts": dict(zip(PARTS, (20e9, 20e9, 50e9, 10e9)))}]
    fig = plot_options(options, 80, "t")
    left, right = fig.axes[:2]
    assert [b.get_width() for b in _bars(left)] == [10.0, 11.0]
    assert [t.get_text() for t in left.get_yticklabels()] == ["a", "b"]
    widths = [b.get_width() for b in _bars(right)]
    assert widths == pytest.approx([10, 10, 30, 10, 20, 20, 50, 10])
    # the parts of one option sit end to end: its bar ends at its total memory
    ends = [b.get_x() + b.get_width() for b in _bars(right)]
    assert ends[3] == pytest.approx(60) and ends[7] == pytest.approx(100)
    assert _bars(left)[0].get_facecolor() != _bars(left)[1].get_facecolor()   # fits or not
    assert right.lines[0].get_xdata()[0] == 80
    _reads(fig)


def test_plot_published_stacks_flop_and_steps():
    rows = [{"gpus": 8192, "seq": 8192, "dense_per_token": 2e12, "attention_per_token": 0.2e12,
             "paper_s": 12.0, "paper_6n_s": 11.0, "compute_s": 30.0, "bubble": 1.5,
             "comm_s": 2.0, "ours_s": 32.0},
            {"gpus": 16384, "seq": 131072, "dense_per_token": 2e12, "attention_per_token": 3e12,
             "paper_s": 15.0, "paper_6n_s": 6.0, "compute_s": 40.0, "bubble": 2.0,
             "comm_s": 1.0, "ours_s": 41.0}]
    fig = plot_published(rows, "t")
    flop, step = fig.axes[:2]
    heights = [b.get_height() for b in _bars(flop)]
    assert heights == pytest.approx([2, 2, 0.2, 3])
    heights = [b.get_height() for b in _bars(step)]
    # paper ×2, 6N ×2, compute ×2 (compute / bubble), bubble ×2, collectives ×2
    assert heights == pytest.approx([12, 15, 11, 6, 20, 20, 10, 20, 2, 1])
    tops = [b.get_y() + b.get_height() for b in _bars(step)][-2:]
    assert tops == pytest.approx([32, 41])            # ours: stacked to the whole step
    _reads(fig)


def test_plot_counts_bars_and_planner_ticks():
    counted = {"fwd": {"all_gather": 2, "all_reduce": 4}, "bwd": {"all_reduce": 8}}
    planned = {"fwd": {"all_gather": 2, "all_reduce": 3}, "bwd": {"all_reduce": 8}}
    fig = plot_counts(counted, planned, "t")
    ax = fig.axes[0]
    assert [b.get_height() for b in _bars(ax)] == [2, 4, 0, 8]   # kinds sorted, per phase
    ticks = [line.get_ydata()[0] for line in ax.lines]
    assert ticks == [2, 3, 0, 8]                       # the planner's, where it differs too
    assert [t.get_text() for t in ax.get_xticklabels()] == ["fwd", "bwd"]   # one word: one line
    _reads(fig)


def test_plot_per_rank_draws_model_ticks_on_each_rank():
    run = lambda b, m: {"bytes": b, "memory": {"parameters": m, "gradients": m / 2,  # noqa
                                                "optimizer state": m}}
    pulled = [{"rank": r, "dp_run": run(1e6 * (r + 1), 2e6), "pp_run": run(3e6, 4e6 * (r + 1))}
              for r in range(2)]
    model = {"DP": [{"bytes": 1e6, "memory": 5e6}, {"bytes": 2.5e6, "memory": 5e6}],
             "PP": [{"bytes": 3e6, "memory": 10e6}, {"bytes": 3e6, "memory": 20e6}]}
    names = {"DP": "dp_run", "PP": "pp_run"}
    fig = plot_per_rank(pulled, names, "t", model)
    wire = fig.axes[0]
    assert [b.get_height() for b in _bars(wire)] == pytest.approx([1, 3, 2, 3])
    ticks = np.concatenate([np.asarray(c.get_segments())[:, 0, 1] for c in wire.collections])
    assert ticks.tolist() == pytest.approx([1, 3, 2.5, 3])   # rank 1's DP model differs
    _reads(fig)
    fig = plot_memory_per_rank(pulled, names, "t", model)
    held = fig.axes[0]
    bars = _bars(held)
    # rank 0: parameters, gradients, Adam for DP and PP; then rank 1
    assert [b.get_height() for b in bars] == pytest.approx([2, 4, 1, 2, 2, 4, 2, 8, 1, 4, 2, 8])
    tops = [b.get_y() + b.get_height() for b in bars]
    assert tops[4:6] == pytest.approx([5, 10]) and tops[10:12] == pytest.approx([5, 20])
    ticks = np.concatenate([np.asarray(c.get_segments())[:, 0, 1] for c in held.collections])
    assert ticks.tolist() == pytest.approx([5, 10, 5, 20])
    _reads(fig)


def test_plot_plan_one_bar_per_collective_labelled():
    plans = {"DP": [{"phase": "grad sync", "kind": "all_reduce", "calls": 1, "size": 600,
                     "model": 900.0}],
             "PP": [{"phase": "forward", "kind": "send", "calls": 2, "size": 30, "model": 60.0},
                    {"phase": "backward", "kind": "send", "calls": 2, "size": 30,
                     "model": 60.0}]}
    fig = plot_plan(plans, "t")
    ax = fig.axes[0]
    assert [b.get_width() * 1e6 for b in _bars(ax)] == pytest.approx([900, 60, 60])
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "DP · grad sync · all_reduce", "PP · forward · send", "PP · backward · send"]
    assert [t.get_text() for t in ax.texts] == ["1 × S 600 B", "2 × S 30 B", "2 × S 30 B"]
    _reads(fig)


def test_plot_simulated_before_and_after():
    fig = plot_simulated({0: 1.0, 1: 2.0}, {0: 3.0, 1: 3.0}, "t")
    assert [b.get_height() for b in _bars(fig.axes[0])] == [1, 2, 3, 3]
    _reads(fig)


def _rows(alpha_us: float, beta_gbps: float, falling: bool = False) -> list[dict]:
    from helpers.bench import alpha_beta
    steps, per_byte = alpha_beta.terms("all_reduce", 2, "ring")
    rows = []
    for size in (8 << k for k in range(12)):
        t_us = alpha_us * steps + per_byte * size / (beta_gbps * 1e3)
        rows.append({"collective": "all_reduce", "world_size": 2, "bytes": size,
                     "time_us": 1000.0 - size * 1e-6 if falling else t_us})
    return rows


def test_sweep_fits_rows_returns_the_rows_it_fitted(monkeypatch, capsys):
    from helpers.bench import sweep
    from helpers.scale.planner_runs import sweep_fits_rows

    good, disturbed, made = _rows(40.0, 1.5), _rows(40.0, 1.5, falling=True), []

    def fake_sweep(cluster, collectives, sizes, **options):
        made.append(options)
        rows = disturbed if len(made) < 2 else good
        return [((r["collective"], r["bytes"]), [r, r]) for r in rows]

    monkeypatch.setattr(sweep, "run_sweep", fake_sweep)
    fits, rows = sweep_fits_rows(None, ["all_reduce"], [8], iters=8)
    assert rows == good and len(made) == 2 and made[0] == {"iters": 8}
    assert fits["all_reduce"].alpha_us == pytest.approx(40.0, rel=1e-6)
    assert capsys.readouterr().out.count("measured again") == 1
    with pytest.raises(ValueError, match="sweep 1 of at most 1 refused"):
        made.clear() or sweep_fits_rows(None, ["all_reduce"], [8], tries=1)
