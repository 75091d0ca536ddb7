"""Notebook 11's hand-fit figure holds the points, the line and the ratios it is given."""
from __future__ import annotations

import numpy as np
import pytest

from helpers.bench.fit_spread_figures import plot_hand_fit
from helpers.figures.audit import audit


def test_plot_hand_fit_draws_points_line_and_ratios():
    sizes = [8.0 * 2 ** k for k in range(10)]
    fastest = np.linspace(100, 1000, 10)
    mean = fastest * np.array([1, 2, 1, 1, 3, 1, 1, 1, 1.5, 1])
    model = fastest * 1.1
    fig = plot_hand_fit(sizes, fastest, mean, model, "t")
    left, right = fig.axes[:2]
    drawn = {line.get_label(): line.get_ydata() for line in left.lines}
    assert drawn["fastest batch (fitted)"] == pytest.approx(fastest)
    assert drawn["mean of all calls"] == pytest.approx(mean)
    assert drawn["α-β fit to the fastest"] == pytest.approx(model)
    assert list(left.lines[0].get_xdata()) == sizes
    ratios = [p.get_height() for p in right.patches]
    assert ratios == pytest.approx(mean / fastest)
    assert right.get_xticklabels()[1].get_text() == "32 B"     # every 2nd size labelled
    a = audit(fig)
    assert a.min_text_px >= 9 and not a.spills and not a.legend_over_data, a
