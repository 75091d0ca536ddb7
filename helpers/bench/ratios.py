"""Ratios of two timings that hold still on a shared machine (`make bench`; no notebook).

A ratio here is measured in pairs: path A and its baseline B run one right after the
other (the order alternating between repeats), so that a slow spell of the machine hits
both; the ratio of a repeat is A / B, and the ratio reported is the **median** of the
repeats' ratios (one repeat that another process disturbed cannot move it).

Its **spread** is the half-width of the 90 % percentile-bootstrap interval of that
median (2000 resamples, seed 0: the same ratios always give the same spread), relative
to the median. A ratio has *settled* when its spread is within the tolerance (±5 %) after
at least `min_repeats` repeats; `settle` repeats a group of measurements until every
ratio of it has settled, or stops at a cap (repeats or seconds) and says "did not settle".
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

FLOOR = 3
SPREAD = "half-width of the 90% bootstrap interval of the median ratio, relative to it"


def bootstrap_spread(ratios: Sequence[float], resamples: int = 2000, level: float = 0.90,
                     seed: int = 0) -> float:
    """Half-width of the `level` percentile-bootstrap interval of the median of `ratios`,
    relative to their median; inf for fewer than 2 ratios. ValueError on a ratio <= 0."""
    values = np.asarray(ratios, dtype=float)
    if len(values) and not (np.all(np.isfinite(values)) and np.all(values > 0)):
        raise ValueError(f"ratios must be finite and > 0, got {values.tolist()}")
    if len(values) < 2:
        return float("inf")
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(values, size=(resamples, len(values))), axis=1)
    low, high = np.quantile(medians, [(1 - level) / 2, (1 + level) / 2])
    return float((high - low) / 2 / np.median(values))


@dataclass
class Ratio:
    """`name` = value of measurement `path` / value of measurement `base`, per repeat."""
    name: str
    path: str
    base: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    @property
    def spread(self) -> float:
        return bootstrap_spread(self.values)

    def settled(self, tolerance: float, min_repeats: int) -> bool:
        return len(self.values) >= min_repeats and self.spread <= tolerance


@dataclass
class Group:
    """Measurements run together each repeat, and the ratios made of them.

    `measure` maps a measurement's name to a function returning one number (e.g. µs or
    GB/s); `order` is the order of a repeat (reversed every other repeat)."""
    measure: Mapping[str, Callable[[], float]]
    ratios: list[Ratio]
    values: dict[str, list[float]] = field(default_factory=dict)
    repeats: int = 0
    seconds: float = 0.0
    stopped: str = ""            # why the loop ended: "settled", or the cap reached


def settle(group: Group, tolerance: float = 0.05, min_repeats: int = 5,
           max_repeats: int = 30, budget_s: float = 120.0,
           log: Callable[[str], None] = lambda _: None,
           clock: Callable[[], float] = time.monotonic) -> Group:
    """Repeat the group's measurements until every ratio's spread is within `tolerance`
    (at least `min_repeats` repeats), or `max_repeats` repeats, or until one more repeat
    (as long as the mean so far) would end past `budget_s` seconds; but never before
    FLOOR repeats, the fewest that give a spread worth printing.
    A repeat measures only what an unsettled ratio needs; A and B of a ratio run
    one after the other, in an order reversed on every other repeat. `clock` (seconds):
    ranks that settle together pass one that every rank reads alike (rank 0's), so that
    they all stop at the same repeat."""
    if not 0 < tolerance < 1 or min_repeats < 2 or max_repeats < min_repeats:
        raise ValueError(f"need 0 < tolerance < 1 and 2 <= min_repeats <= max_repeats, got "
                         f"{tolerance}, {min_repeats}, {max_repeats}")
    unknown = {n for r in group.ratios for n in (r.path, r.base)} - set(group.measure)
    if unknown:
        raise ValueError(f"ratios name measurements that do not exist: {sorted(unknown)}")
    start = clock()
    while True:
        open_ratios = [r for r in group.ratios if not r.settled(tolerance, min_repeats)]
        if not open_ratios:
            group.stopped = "settled"
            break
        if group.repeats >= max_repeats:
            group.stopped = f"cap of {max_repeats} repeats"
            break
        elapsed = clock() - start
        if group.repeats >= FLOOR and elapsed + elapsed / group.repeats > budget_s:
            group.stopped = f"cap of {budget_s:.0f} s (one more repeat would pass it)"
            break
        order = [n for r in open_ratios for n in (r.base, r.path)]
        order = list(dict.fromkeys(order))               # once each, pairs adjacent
        if group.repeats % 2:
            order.reverse()
        got = {name: group.measure[name]() for name in order}
        for name, value in got.items():
            group.values.setdefault(name, []).append(value)
        for ratio in open_ratios:
            ratio.values.append(got[ratio.path] / got[ratio.base])
        group.repeats += 1
        log(f"repeat {group.repeats}: " + ", ".join(
            f"{r.name} x{r.median:.3f} ±{r.spread:.1%}" for r in open_ratios))
    group.seconds = clock() - start
    return group


def describe(ratio: Ratio, tolerance: float = 0.05, min_repeats: int = 5) -> str:
    """'x1.03 ±2.1% (9 repeats)', plus ', did not settle' if it never got within the
    tolerance."""
    if not ratio.values:
        return "not measured"
    spread = ratio.spread
    text = f"x{ratio.median:.3f} ±{spread:.1%} ({len(ratio.values)} repeats)"
    return text if ratio.settled(tolerance, min_repeats) else text + ", did not settle"
