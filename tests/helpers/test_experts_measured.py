"""Notebook 22's measured figures hold the numbers they are given (read back by gid and
text) and read at the page's size (the figure audit)."""
from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import pytest  # noqa: E402

from helpers.figures.audit import audit  # noqa: E402
from helpers.runtime.disposable import RankOutcome  # noqa: E402
from helpers.training.schemes import rank_colour  # noqa: E402
from helpers.transformer import experts_measured as figs  # noqa: E402


def _texts(fig) -> dict:
    return {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid()}


def test_splits_show_rows_sent_and_mark_a_receiver_that_disagrees():
    states = [{"input_splits": [1, 2], "output_splits": [1, 3]},
              {"input_splits": [3, 0], "output_splits": [2, 0]}]
    fig = figs.plot_splits(states, "t")
    texts = _texts(fig)
    assert texts["sends:0"] == "sends 3" and texts["sends:1"] == "sends 3"
    assert texts["receives:0"] == "receives 4 ✓" and texts["receives:1"] == "receives 2 ✓"
    assert {p.get_gid() for ax in fig.axes for p in ax.patches} == {
        f"split:{r}:{s}" for r in range(2) for s in range(2)}
    assert not audit(fig).problems()
    states[1]["output_splits"] = [2, 1]          # rank 1 expects a row nobody sends
    assert _texts(figs.plot_splits(states, "t"))["receives:1"] == "receives 2 ✗"
    with pytest.raises(ValueError, match="input splits"):
        figs.plot_splits([{"input_splits": [1], "output_splits": [1]}] * 2, "t")


def _row(call, even, model, measured):
    return {"call": call, "calls": 1, "size": 0, "even_model": even, "model": model,
            "measured": measured}


def test_bytes_put_each_value_where_it_is():
    ranks = [{c: _row(c, 100 + r, 110 + r, 150 + r) for c in (
        "rows to experts", "results back", "step forward", "step backward", "torch forward",
        "torch backward")} for r in range(2)]
    fig = figs.plot_bytes(ranks, "t")
    dots = {ln.get_gid(): (ln.get_xdata()[0], ln.get_ydata()[0])
            for ax in fig.axes for ln in ax.lines if ln.get_gid()}
    assert dots["rows to experts:even model:1"] == (101, 1)
    assert dots["results back:measured:0"] == (150, 0)
    assert dots["step backward:torch:1"] == (151, 1)
    assert not audit(fig).problems()


def test_buffers_show_rows_by_sender_and_how_a_rank_ended():
    nan = float("nan")
    cases = {"fewer": [RankOutcome(0, -6, None, None, 0.01), RankOutcome(1, 0, [0.0, 1.0])],
             "more": [RankOutcome(0, 0, [0.0, nan, 1.0]), RankOutcome(1, 1, None, "Boom: x")]}
    fig = figs.plot_buffers(cases, "t")
    texts = _texts(fig)
    assert texts["ended:0"] == "killed by SIGABRT" and texts["ended:1"] == "raised Boom"
    rows = {p.get_gid(): mcolors.to_hex(p.get_facecolor()) for ax in fig.axes
            for p in ax.patches}
    assert rows["row:0:1"] == "#eeeeee" and rows["row:0:2"] == rank_colour(1, True)
    assert "NaN" in {t.get_text() for t in fig.axes[1].texts}
    assert not audit(fig).problems()


def test_losses_stack_the_shares():
    fig = figs.plot_losses({"a": [0.5, 0.25], "b": [0.5, 0.25]}, 0.75, "t")
    bars = {p.get_gid(): p for ax in fig.axes for p in ax.patches if p.get_gid()}
    assert bars["share:a:1"].get_x() == 0.5 and bars["share:b:1"].get_width() == 0.25
    assert _texts(fig)["sum:b"] == "= 0.750000"
    assert math.isclose(fig.axes[0].lines[0].get_xdata()[0], 0.75)
    assert not audit(fig).problems()
