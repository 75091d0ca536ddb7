"""Figures, tables and self-checks for notebook 11 (bandwidth), from helpers.bench rows.

A row is what `helpers.bench.measurement.measure` returns: collective, world_size, backend, dtype,
op, root, bytes, count, time_us, algbw, busbw. Figures are created through pyplot and
closed again, so a notebook shows the returned figure exactly once.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from helpers.bench.nccl_tests import nccl_tests_table
from helpers.collectives.registry import BENCHMARKED
from helpers.checks import Report
from helpers.bench.wire import agrees
from helpers.figures.column import COLUMN_IN
from helpers.runtime.folded import Folded, FoldedList

Row = Mapping[str, Any]
COLORS = dict(zip(BENCHMARKED, ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#17becf"]))
MARKERS = dict(zip(BENCHMARKED, "o^sDv<>P"))
SMALL_BYTES = 64 * 1024  # "small sizes" for the latency plot: up to 64 KiB


def size_label(size_bytes: float) -> str:
    """8 → '8 B', 4096 → '4 KiB', 67108864 → '64 MiB'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes >= scale:
            value = size_bytes / scale
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{size_bytes:g} B"


def by_collective(rows: Sequence[Row]) -> dict[str, list[Row]]:
    """Rows grouped per collective (series order), each group sorted by size."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row["collective"], []).append(row)
    order = [c for c in BENCHMARKED if c in groups] + [c for c in groups if c not in BENCHMARKED]
    return {c: sorted(groups[c], key=lambda r: r["bytes"]) for c in order}


def peak(rows: Sequence[Row]) -> Row:
    """The row with the highest busbw."""
    if not rows:
        raise ValueError("no rows")
    return max(rows, key=lambda r: r["busbw"])


def setup_axes(ax: Any, ylabel: str) -> None:
    """Log-log axes over the sweep's sizes, as every figure of a sweep has them."""
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size S (bytes, nccl-tests' size column)")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def legend_outside(ax: Any) -> None:
    """The legend to the right of the axes, off the data (tight_layout makes room)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=9,
              frameon=False)


def _size_ticks(ax: Any, sizes: Sequence[int]) -> None:
    sizes = sorted(set(sizes))
    step = max(1, math.ceil(len(sizes) / 10))
    ticks = sizes[::step]
    ax.set_xticks(ticks, [size_label(s) for s in ticks], rotation=30, ha="right")
    ax.xaxis.set_minor_locator(NullLocator())


def _title(rows: Sequence[Row], what: str) -> str:
    first = rows[0]
    return (f"{what} · {first['backend']} · world size {first['world_size']} · "
            f"{first['dtype']}")


def plot_busbw(rows: Sequence[Row], title: str | None = None) -> Figure:
    """busbw against size, log-log, one line per collective; each peak marked, the best one
    annotated. Points with busbw 0 (one rank: nothing crosses a link) are left out."""
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["busbw"] > 0]
    if not shown:
        raise ValueError("no row with busbw > 0 to plot (one rank moves nothing)")
    fig, ax = plt.subplots(figsize=(10, 5.6), dpi=100)
    for collective, group in by_collective(shown).items():
        color = COLORS.get(collective, "black")
        ax.plot([r["bytes"] for r in group], [r["busbw"] for r in group], color=color,
                marker=MARKERS.get(collective, "o"), markersize=3.5, linewidth=1.4,
                label=collective)
        top = peak(group)
        ax.plot(top["bytes"], top["busbw"], marker="*", markersize=15, color=color,
                markeredgecolor="black", markeredgewidth=0.6, linestyle="none")
    best = peak(shown)
    ax.annotate(f"peak: {best['collective']}\n{best['busbw']:.3g} GB/s at "
                f"{size_label(best['bytes'])}", xy=(best["bytes"], best["busbw"]),
                xytext=(0.97, 0.06), textcoords="axes fraction", ha="right", va="bottom",
                arrowprops={"arrowstyle": "->", "color": "black"},
                bbox={"boxstyle": "round", "fc": "white", "ec": "#999999"})
    setup_axes(ax, "busbw (GB/s, GB = 10⁹ B)")
    _size_ticks(ax, [r["bytes"] for r in shown])
    ax.set_ylim(top=best["busbw"] * 3)
    ax.set_title(title or _title(shown, "bus bandwidth (★: each collective's peak)"))
    legend_outside(ax)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_latency(rows: Sequence[Row], max_bytes: int = SMALL_BYTES,
                 title: str | None = None) -> Figure:
    """Time per call against size for sizes up to `max_bytes`: the fixed cost of a call."""
    import matplotlib.pyplot as plt

    small = ([r for r in rows if 0 < r["bytes"] <= max_bytes]   # 0 B: off a log axis
             or [r for r in rows if r["bytes"] > 0])
    if not small:
        raise ValueError("no rows to plot")
    fig, ax = plt.subplots(figsize=(10, 4.6), dpi=100)
    for collective, group in by_collective(small).items():
        ax.plot([r["bytes"] for r in group], [r["time_us"] for r in group],
                color=COLORS.get(collective, "black"), marker=MARKERS.get(collective, "o"),
                markersize=3.5, linewidth=1.4, label=collective)
    setup_axes(ax, "time per call (µs, mean over ranks)")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    _size_ticks(ax, [r["bytes"] for r in small])
    ax.set_title(title or _title(small, f"latency, sizes up to {size_label(max_bytes)}"))
    legend_outside(ax)
    fig.tight_layout()
    plt.close(fig)
    return fig


def nccl_tests_tables(rows: Sequence[Row]) -> FoldedList:
    """One nccl-tests table per collective (out-of-place columns, as nccl-tests prints
    them), each folded under a one-line summary: what it measured and its average busbw."""
    tables = FoldedList()
    for collective, group in by_collective(rows).items():
        first = group[0]
        sizes = [r["bytes"] for r in group]
        average = sum(r["busbw"] for r in group) / len(group)
        summary = (f"{collective} · {first['world_size']} ranks · {first['backend']} · "
                   f"{len(group)} sizes, {size_label(min(sizes))} to {size_label(max(sizes))}"
                   f" · avg busbw {average:.3g} GB/s")
        tables.append(Folded(summary, nccl_tests_table(
            group, title=f"{collective}: world size {first['world_size']}, "
                         f"backend {first['backend']}")))
    return tables


def check_factors(rows: Sequence[Row], factors: Mapping[str, float]) -> Report:
    """Per collective, ✓/✗: algbw == S / t, and busbw == algbw × factors[collective]."""
    verdicts = Report()
    for collective, group in by_collective(rows).items():
        factor = factors[collective]
        bad = [r for r in group
               if not math.isclose(r["algbw"], r["bytes"] / r["time_us"] / 1e3, rel_tol=1e-9)
               or not math.isclose(r["busbw"], r["algbw"] * factor, rel_tol=1e-9,
                                   abs_tol=1e-12)]
        detail = (f"all {len(group)} rows" if not bad else
                  f"{len(bad)} of {len(group)} rows differ, e.g. {size_label(bad[0]['bytes'])}")
        verdicts.add(f"{collective:<15}", not bad, f"busbw = algbw × {factor:.4g}: {detail}")
    return verdicts


def plot_fit(rows: Sequence[Row], fits: Mapping[str, Any], title: str | None = None) -> Figure:
    """Measured time per call (points: the time the fit used, see
    helpers.bench.alpha_beta.fitted_time_us; hollow: left out as outliers) and each
    collective's fitted model (line)."""
    import matplotlib.pyplot as plt
    import numpy as np

    from helpers.bench.alpha_beta import fitted_time_us

    shown = [r for r in rows if r["bytes"] > 0 and r["collective"] in fits]
    if not shown:
        raise ValueError("no fitted collective with bytes > 0 to plot")
    fig, ax = plt.subplots(figsize=(10, 5.6), dpi=100)
    for collective, group in by_collective(shown).items():
        color, fit = COLORS.get(collective, "black"), fits[collective]
        sizes = [r["bytes"] for r in group]
        left_out = getattr(fit, "left_out", ())
        for hollow in (False, True):
            points = [r for r in group if ((r["world_size"], r["bytes"]) in left_out) == hollow]
            if points:
                ax.plot([r["bytes"] for r in points], [fitted_time_us(r) for r in points],
                        color=color, linestyle="none", marker=MARKERS.get(collective, "o"),
                        markersize=4, markerfacecolor="none" if hollow else color,
                        label=None if hollow else collective)
        grid = np.geomspace(min(sizes), max(sizes), 100)
        ax.plot(grid, fit.predict_us(grid), color=color, linewidth=1.2, alpha=0.8)
        ax.axvline(fit.crossover_bytes, color=color, linestyle=":", linewidth=0.9)
    setup_axes(ax, "time per call (µs): points measured (hollow: left out), lines α-β fit")
    _size_ticks(ax, [r["bytes"] for r in shown])
    ax.set_title(title or _title(shown, "α-β fit (dotted: latency = bandwidth term)"))
    legend_outside(ax)
    fig.tight_layout()
    plt.close(fig)
    return fig


PREDICTED_SIZES = tuple(2.0 ** k for k in range(3, 31))   # 8 B to 1 GiB


def plot_ring_vs_tree(fit: Any, world_sizes: Sequence[int] = (8, 64, 512),
                      sizes: Sequence[float] = PREDICTED_SIZES) -> Figure:
    """PREDICTION from one fitted α and β: ring and tree time against size for world
    sizes this machine cannot run, with the size where they cross marked."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=100)
    grid = np.asarray(sizes, dtype=float)
    for n, color in zip(world_sizes, ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")):
        ring, tree = fit.predict_us(grid, n, "ring"), fit.predict_us(grid, n, "tree")
        ax.plot(grid, ring, color=color, label=f"n={n} ring (predicted)")
        ax.plot(grid, tree, color=color, linestyle="--", label=f"n={n} tree (predicted)")
        faster = np.nonzero(ring <= tree)[0]
        if len(faster) and faster[0] > 0:
            ax.axvline(grid[faster[0]], color=color, linestyle=":", linewidth=0.9)
    setup_axes(ax, "predicted time per call (µs)")
    _size_ticks(ax, [int(s) for s in grid])
    ax.set_title(f"PREDICTION, not measured: {fit.collective}, α = {fit.alpha_us:.3g} µs, "
                 f"β = {fit.beta_gbps:.3g} GB/s (dotted: ring becomes faster)")
    legend_outside(ax)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_traffic(rows: Sequence[Row], size: int, title: str | None = None) -> Figure:
    """Who wrote how much to whom, per collective at one size S: a grid of heat maps.

    Cell (i, j): bytes rank i wrote to rank j, in units of S (measured, helpers.bench.wire);
    beside each row its total and the ring model's (helpers.bench.nccl_tests.model_sent).
    """
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r["bytes"] == size and r["matrix"] is not None]
    if not shown:
        raise ValueError(f"no measured point at {size} bytes (on NCCL nothing is measured)")
    n = shown[0]["world_size"]
    cols = min(2, len(shown))               # two a row: the page's column, shown unscaled
    grid_rows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(grid_rows, cols, figsize=(COLUMN_IN, 3.2 * grid_rows + 0.8),
                             dpi=100, squeeze=False)
    for ax in axes.flat[len(shown):]:
        ax.set_visible(False)
    for ax, row in zip(axes.flat, shown):
        share = [[value / size for value in line] for line in row["matrix"]]
        ax.imshow(share, cmap="Blues", vmin=0, vmax=max(2.0, max(map(max, share))))
        for i in range(n):
            for j in range(n):
                if share[i][j] >= 0.005:
                    ax.text(j, i, f"{share[i][j]:.2f}", ha="center", va="center", fontsize=9,
                            color="white" if share[i][j] > 1.2 else "black")
            ax.text(n - 0.35, i, f"Σ {row['measured'][i] / size:.2f}\nmodel "
                    f"{row['model'][i] / size:.2f}", va="center", fontsize=8)
        differs = not all(agrees(m, mo, 1, n) for m, mo in zip(row["measured"], row["model"]))
        ax.set_title(row["collective"] + ("  ≠ the model" if differs else ""), fontsize=11,
                     color="#cf222e" if differs else "black")
        ax.set_xticks(range(n))
        ax.set_yticks(range(n))
        ax.set_xlabel("to rank")
        ax.set_ylabel("from rank")
    fig.suptitle(title or f"bytes each rank wrote to each rank, in units of S = "
                 f"{size_label(size)}\n{n} ranks · {shown[0]['backend']} (measured)",
                 fontsize=11)
    fig.tight_layout()
    plt.close(fig)
    return fig
