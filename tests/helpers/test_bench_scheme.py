"""helpers.bench.scheme, notebook 11's scheme: the α-β model's time, algbw and busbw, and
busbw's factor per collective, read back from the drawing and held against the model's
formulas written out here; the figure reads at 1280 px."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from helpers.bench.scheme import draw_alpha_beta, model_curves, model_fit
from helpers.collectives.registry import BENCHMARKED
from helpers.figures.audit import audit
from helpers.scale.at_scale import ALPHA, NVLINK


def _by_gid(fig) -> dict:
    return {a.get_gid(): a for ax in fig.axes for a in ax.get_children() if a.get_gid()}


def _texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text)]


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_time_drawn_is_alpha_per_step_plus_the_ring_bytes_over_beta(n):
    fig = draw_alpha_beta(n)
    drawn = _by_gid(fig)
    sizes, time_us = drawn["time"].get_data()
    by_hand = ALPHA.value * 2 * (n - 1) + 2 * (n - 1) / n * sizes / (NVLINK.value * 1e3)
    assert np.allclose(time_us, by_hand)
    assert sizes[0] == 64 and sizes[-1] == 8 * 2 ** 30
    # the crossover: where α·steps = bytes·S/β, between the two regions
    crossover = ALPHA.value * 1e-6 * NVLINK.value * 1e9 * n
    assert drawn["crossover"].get_xdata()[0] == pytest.approx(crossover)
    latency, bandwidth = drawn["latency-term"].get_ydata(), drawn["bandwidth-term"].get_ydata()
    at = np.argmin(abs(np.log(sizes / crossover)))
    assert latency[at] == pytest.approx(bandwidth[at], rel=0.1)
    assert all(latency[sizes < crossover] > bandwidth[sizes < crossover])
    assert all(latency[sizes > crossover] < bandwidth[sizes > crossover])


def test_busbw_approaches_beta_and_algbw_beta_over_the_factor():
    fig = draw_alpha_beta(4)
    drawn = _by_gid(fig)
    sizes, busbw = drawn["busbw"].get_data()
    _, algbw = drawn["algbw"].get_data()
    _, time_us = drawn["time"].get_data()
    assert np.allclose(algbw, sizes / (time_us * 1e-6) / 1e9)
    assert np.allclose(busbw, algbw * 1.5)                 # 2(n−1)/n at n = 4
    assert busbw[-1] == pytest.approx(NVLINK.value, rel=0.01)
    assert algbw[-1] == pytest.approx(NVLINK.value / 1.5, rel=0.01)
    assert busbw[0] < NVLINK.value / 100                    # α-dominated: far from the link
    assert drawn["beta"].get_ydata()[0] == NVLINK.value


@pytest.mark.parametrize("n, all_reduce, split", [(4, 1.5, 0.75), (2, 1.0, 0.5)])
def test_the_factors_are_nccl_tests_table_at_n(n, all_reduce, split):
    drawn = _by_gid(draw_alpha_beta(n))
    widths = {c: drawn[f"factor:{c}"].get_width() for c in BENCHMARKED}
    assert widths == {c: all_reduce if c == "all_reduce" else 1.0 if c in
                      ("broadcast", "reduce") else split for c in BENCHMARKED}


def test_it_says_it_is_a_model_on_4_ranks_and_reads_at_1280_px():
    fig = draw_alpha_beta(4)
    title = fig._suptitle.get_text()
    assert "(model" in title and "4 ranks" in title and "assumed" in title
    assert f"α = {ALPHA.value:g} µs" in title and f"β = {NVLINK.value:g} GB/s" in title
    assert {"α-dominated\n(6·α)", "β-dominated\n(1.5·S/β)", "2(n−1)/n = 1.5",
            "all_reduce: t = 6·α + 1.5·S/β"} <= set(_texts(fig))
    assert audit(fig).problems() == []
    assert 250 <= fig.get_size_inches()[1] * fig.dpi <= 340


def test_model_curves_take_any_alpha_and_beta():
    fit = model_fit(4, alpha_us=10.0, beta_gbps=100.0)
    curves = model_curves(fit, np.array([1e3, 1e9]))
    assert np.allclose(curves["time_us"], 60 + 1.5 * np.array([1e3, 1e9]) / 1e5)
    assert np.allclose(curves["latency_us"], 60.0)
