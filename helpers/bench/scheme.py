"""Notebook 11's scheme, drawn before any run: the α-β model of one all_reduce's time, the
algbw and busbw that nccl-tests would report for it, and busbw's factor per collective.

Everything drawn is a MODEL, computed by the series' own functions: the time by
`alpha_beta.Fit.predict_us` (ring terms, `alpha_beta.terms`), the bandwidths by
`nccl_tests.algbw` and `nccl_tests.busbw`, the factors by `registry.bus_factor`; α and β
are the At scale box's figures (`helpers.scale.at_scale`: α assumed, β NVLink's). The
artists that carry a fact have a gid ("latency-bound", "factor:all_reduce", ...), so the
tests read the drawing.
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

from helpers.bench.alpha_beta import Fit, terms
from helpers.bench.figures import COLORS, size_label
from helpers.bench.nccl_tests import algbw, busbw
from helpers.collectives.registry import BENCHMARKED, bus_factor

# busbw / algbw as nccl-tests' doc/PERFORMANCE.md writes it, per collective
FORMULA = {"all_reduce": "2(n−1)/n", "broadcast": "1", "reduce": "1",
           **{c: "(n−1)/n" for c in ("scatter", "gather", "all_gather", "reduce_scatter",
                                     "all_to_all")}}
LATENCY, BANDWIDTH = "#dbeafe", "#fde8d7"    # the two regions' fills
FONT, SMALL = 10.0, 9.5
SIZE_RANGE = (6, 33)            # log2 of the sizes drawn: 64 B to 8 GiB


def model_fit(n: int = 4, alpha_us: float | None = None,
              beta_gbps: float | None = None) -> Fit:
    """all_reduce's ring α-β model on n ranks; α and β default to the At scale box's."""
    from helpers.scale.at_scale import ALPHA, NVLINK

    return Fit("all_reduce", "ring", (n,), ALPHA.value if alpha_us is None else alpha_us,
               NVLINK.value if beta_gbps is None else beta_gbps, 0.0, 0.0, 0.0, 0)


def model_curves(fit: Fit, sizes: np.ndarray) -> dict[str, np.ndarray]:
    """The drawn curves at `sizes` (bytes): total time and its two terms (µs), algbw and
    busbw (GB/s), all from the model."""
    n = fit.world_sizes[0]
    steps, per_byte = terms(fit.collective, n, fit.algorithm)
    time_us = fit.predict_us(sizes)
    return {"time_us": time_us,
            "latency_us": np.full_like(sizes, fit.alpha_us * steps, dtype=float),
            "bandwidth_us": per_byte * sizes / (fit.beta_gbps * 1e3),
            "algbw": np.array([algbw(fit.collective, int(s), t * 1e-6)
                               for s, t in zip(sizes, time_us)]),
            "busbw": np.array([busbw(fit.collective, int(s), t * 1e-6, n)
                               for s, t in zip(sizes, time_us)])}


def _size_axis(ax, sizes: np.ndarray) -> None:
    ax.set_xscale("log", base=2)
    ticks = [2.0 ** k for k in range(SIZE_RANGE[0], SIZE_RANGE[1] + 1, 9)]
    ax.set_xticks(ticks, [size_label(s) for s in ticks])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("size S", fontsize=FONT)
    ax.tick_params(labelsize=SMALL)
    ax.grid(True, alpha=0.3)


def _regions(ax, sizes: np.ndarray, crossover: float) -> None:
    ax.axvspan(sizes[0], crossover, color=LATENCY, zorder=0, gid="latency-bound")
    ax.axvspan(crossover, sizes[-1], color=BANDWIDTH, zorder=0, gid="bandwidth-bound")
    ax.axvline(crossover, color="#555555", linestyle=":", linewidth=1.2, gid="crossover")
    ax.set_xlim(sizes[0], sizes[-1])


def draw_alpha_beta(n: int = 4) -> Figure:
    """The scheme: t(S) on n ranks with its α- and β-dominated sizes, algbw and busbw
    against S, and busbw / algbw per collective at n; every value from the model."""
    import matplotlib.pyplot as plt

    fit = model_fit(n)
    steps, per_byte = terms(fit.collective, n, fit.algorithm)
    sizes = np.round(np.logspace(*SIZE_RANGE, 271, base=2))      # whole bytes
    curves = model_curves(fit, sizes)
    crossover = fit.crossover_bytes
    fig, (t_ax, bw_ax, f_ax) = plt.subplots(
        1, 3, figsize=(10, 3.3), dpi=100, gridspec_kw={"width_ratios": [1.4, 1.15, 0.95]})

    _regions(t_ax, sizes, crossover)
    t_ax.plot(sizes, curves["time_us"], color="black", linewidth=2, gid="time")
    t_ax.plot(sizes, curves["latency_us"], color="#1d4ed8", linestyle="--", linewidth=1.2,
              gid="latency-term")
    t_ax.plot(sizes, curves["bandwidth_us"], color="#c2410c", linestyle="--", linewidth=1.2,
              gid="bandwidth-term")
    t_ax.set_yscale("log")
    t_ax.set_ylim(curves["latency_us"][0] / 3, curves["time_us"][-1] * 3)
    t_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    t_ax.text(0.03, 0.95, f"α-dominated\n({steps:g}·α)", transform=t_ax.transAxes,
              va="top", fontsize=SMALL, color="#1d4ed8")
    t_ax.text(crossover * 1.4, 0.95, f"β-dominated\n({per_byte:g}·S/β)",
              transform=t_ax.get_xaxis_transform(), va="top", fontsize=SMALL,
              color="#c2410c")
    t_ax.set_ylabel("time per call (µs)", fontsize=FONT)
    t_ax.set_title(f"all_reduce: t = {steps:g}·α + {per_byte:g}·S/β", fontsize=FONT)
    _size_axis(t_ax, sizes)

    _regions(bw_ax, sizes, crossover)
    bw_ax.plot(sizes, curves["busbw"], color=COLORS["all_reduce"], linewidth=2, gid="busbw")
    bw_ax.plot(sizes, curves["algbw"], color="#6b7280", linewidth=2, gid="algbw")
    bw_ax.axhline(fit.beta_gbps, color="black", linestyle="--", linewidth=1, gid="beta")
    bw_ax.set_xscale("log", base=2)
    bw_ax.set_ylim(0, fit.beta_gbps * 1.3)
    bw_ax.text(sizes[2], fit.beta_gbps * 1.05, f"β = {fit.beta_gbps:g} GB/s", va="bottom",
               fontsize=SMALL)
    for name, y, colour in (("busbw", curves["busbw"][-1], COLORS["all_reduce"]),
                            ("algbw", curves["algbw"][-1], "#6b7280")):
        bw_ax.text(sizes[-1] / 1.3, y * 0.93, name, ha="right", va="top", fontsize=SMALL,
                   color=colour)
    bw_ax.set_ylabel("GB/s", fontsize=FONT)
    bw_ax.set_title(f"algbw = S/t, busbw = {bus_factor(fit.collective, n):g}·algbw",
                    fontsize=FONT)
    _size_axis(bw_ax, sizes)

    names = list(BENCHMARKED)[::-1]
    factors = [bus_factor(c, n) for c in names]
    bars = f_ax.barh(range(len(names)), factors, color=[COLORS[c] for c in names], height=0.7)
    for bar, name, factor in zip(bars, names, factors):
        bar.set_gid(f"factor:{name}")
        f_ax.text(factor + 0.04, bar.get_y() + bar.get_height() / 2,
                  f"{FORMULA[name]} = {factor:g}", va="center", fontsize=SMALL)
    f_ax.set_yticks(range(len(names)), names, fontsize=SMALL)
    f_ax.set_xlim(0, max(factors) * 2.1)
    f_ax.set_xticks([0, 1])
    f_ax.tick_params(labelsize=SMALL)
    f_ax.set_title(f"busbw / algbw at n = {n}", fontsize=FONT)
    for side in ("top", "right"):
        f_ax.spines[side].set_visible(False)

    fig.suptitle(f"The α-β model (model, nothing measured): {n} ranks, α = {fit.alpha_us:g} µs "
                 f"a step (assumed), β = {fit.beta_gbps:g} GB/s (NVLink 4, one way)",
                 fontsize=FONT + 0.5, fontweight="bold")
    fig.tight_layout()
    plt.close(fig)
    return fig
