"""Notebook 11's figure of the α-β fit by hand: every point kept, each size's fastest batch
(what the fit uses) beside its mean over all calls, and the line fitted to the fastest. The
gap between the two at one size is what other work on the machine added to that size."""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np

from helpers.figures.column import finish


def plot_hand_fit(sizes: Sequence[float], fastest_us: Sequence[float],
                  mean_us: Sequence[float], model_us: Sequence[float], title: str):
    """Left: time per call against the size, log-log: fastest batch (filled), mean of all
    calls (hollow), the fitted model (line). Right: mean / fastest per size (bars)."""
    sizes, fastest = np.asarray(sizes, float), np.asarray(fastest_us, float)
    mean, model = np.asarray(mean_us, float), np.asarray(model_us, float)
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.1),
                                      gridspec_kw={"width_ratios": [3, 2]})
    left.plot(sizes, fastest, "o", color="#1f77b4", markersize=5, label="fastest batch (fitted)")
    left.plot(sizes, mean, "o", color="#1f77b4", markerfacecolor="none", markersize=5,
              label="mean of all calls")
    left.plot(sizes, model, "-", color="black", lw=1.2, label="α-β fit to the fastest")
    left.set_xscale("log", base=2)
    left.set_yscale("log")
    step = max(1, len(sizes) // 4)
    left.set_xticks(sizes[::step], [_size(s) for s in sizes[::step]])
    left.minorticks_off()
    left.set_xlabel("size S (bytes)", fontsize=9)
    left.set_ylabel("time per call (µs)", fontsize=9)
    left.legend(loc="upper left", frameon=False, fontsize=9)
    left.set_ylim(top=max(mean.max(), fastest.max(), model.max()) * 6)
    x = np.arange(len(sizes))
    right.bar(x, mean / fastest, 0.7, color="#9ecae1")
    right.axhline(1.0, color="black", lw=0.8)
    right.set_xticks(x[::step], [_size(s) for s in sizes[::step]], fontsize=9)
    right.set_xlabel("size S", fontsize=9)
    right.set_ylabel("mean / fastest", fontsize=9)
    return finish(fig, (left, right), title)


def _size(n: float) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"
