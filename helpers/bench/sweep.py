"""Drive a bandwidth sweep from the notebook: one `apply` of
helpers.bench.measurement.measure per point.

    per_rank = run_sweep(cluster, BENCHMARKED, sweep_sizes(8, 4 * MiB), iters=5, warmup=2)
    rows = rank0_rows(per_rank)          # the table/plot rows
    report_ranks_agree(per_rank)         # rank r ✓: its rows are rank 0's

The progress bar is tqdm. In a Jupyter kernel it is a `DisplayBar`: the text of a
terminal bar in one display output, updated in place while it runs (live in JupyterLab),
then replaced by one summary line, which is what a saved notebook or HTML page keeps:
no ipywidgets, no CDN script, no '\\r' residue, no frozen bar.
Elsewhere it is plain tqdm on stderr, shown on a terminal only.
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

from tqdm import tqdm

from helpers.bench.alpha_beta import NO_GROWTH, Fits, fit_all
from helpers.bench.measurement import measure
from helpers.checks import Report

Point = tuple[str, int]
# Per point: (collective, size asked), then one result per rank.
PerRank = list[tuple[Point, list[dict | None]]]


class DisplayBar(tqdm):
    """tqdm whose text goes to one IPython display output, updated in place."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs["gui"] = True           # tqdm itself prints nothing; display() does
        kwargs.setdefault("file", sys.stdout)
        kwargs["disable"] = bool(kwargs.get("disable", False))
        self._handle = None
        super().__init__(*args, **kwargs)
        if not self.disable:
            from IPython.display import display

            self._handle = display({"text/plain": self._text()}, raw=True, display_id=True)

    def _text(self) -> str:
        return self.format_meter(**self.format_dict)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        """Show `msg` (default: the bar's text) in this bar's output."""
        if self._handle is None:
            return False
        self._handle.update({"text/plain": msg or self._text()}, raw=True)
        return True

    def close(self) -> None:
        """Stop the bar; its output keeps one summary line, no bar (a saved page is static)."""
        if self.disable:
            return
        elapsed = self.format_interval(self.format_dict["elapsed"])
        super().close()                # gui mode: bookkeeping only, nothing printed
        self.display(f"{self.desc}: {self.n}/{self.total} {self.unit}s done in {elapsed}")

    def clear(self, *_: Any, **__: Any) -> None:
        pass


def in_kernel() -> bool:
    """True inside a Jupyter kernel (where display outputs are shown)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def progress_bar(total: int, desc: str = "sweep", **kwargs: Any) -> tqdm:
    """A DisplayBar in a Jupyter kernel, else tqdm on stderr (hidden when not a terminal)."""
    if in_kernel():
        return DisplayBar(total=total, desc=desc, unit="point", **kwargs)
    return tqdm(total=total, desc=desc, unit="point", file=sys.stderr,
                disable=kwargs.pop("disable", None), **kwargs)


def run_sweep(cluster: Any, collectives: Sequence[str], sizes: Sequence[int],
              dtype: str = "float32", op: str = "sum", iters: int = 20, warmup: int = 5,
              progress: bool = True, batches: int = 1) -> PerRank:
    """measure() every (collective, size) on all ranks, one `apply` per point
    (`batches`: the timed calls in that many batches; see measure).

    Returns, per point, what every rank returned (rank order). Every size is measured,
    as in nccl-tests: one too small for the world size is a row of count 0.
    """
    points = [(collective, size) for collective in collectives for size in sizes]
    bar = progress_bar(len(points), disable=not progress)
    results: PerRank = []
    try:
        for collective, size in points:
            bar.set_postfix_str(f"{collective} {size} B", refresh=False)
            per_rank = cluster.apply(measure, collective, size, dtype, op, iters, warmup,
                                     "nccl-tests", batches)   # apply: positional only
            results.append(((collective, size), list(per_rank)))
            bar.update()
        bar.set_postfix_str("done", refresh=False)
    finally:
        bar.close()
    return results


def sweep_fits(cluster: Any, collectives: Sequence[str], sizes: Sequence[int],
               tries: int = 3, **sweep: Any) -> Fits:
    """fit_all's α-β fit per collective of rank 0's rows of run_sweep(`sweep` options).

    A fit refused because the time does not grow with the size (other work on the machine
    slowed the small sizes of this sweep) is a disturbed measurement, not a result: the
    sweep is made again, up to `tries` sweeps in all, and each retry is printed. ValueError
    naming the refusal when the last sweep is refused too."""
    if tries < 1:
        raise ValueError(f"tries must be at least 1, not {tries}")
    for sweep_number in range(1, tries + 1):
        fits = fit_all(rank0_rows(run_sweep(cluster, collectives, sizes, **sweep)))
        if not fits.refused:
            return fits
        reasons = "; ".join(fits.refused.values())
        disturbed = all(NO_GROWTH in reason for reason in fits.refused.values())
        if not disturbed or sweep_number == tries:
            raise ValueError(f"sweep {sweep_number} of at most {tries} refused: {reasons}")
        print(f"sweep {sweep_number} of at most {tries} refused ({reasons}): measured again")


def rank0_rows(per_rank: PerRank) -> list[dict]:
    """Rank 0's result of every point that was measured (the rows of the tables)."""
    return [results[0] for _point, results in per_rank if results[0] is not None]


def ranks_agree(per_rank: PerRank) -> list[bool]:
    """Per rank: True when every one of its results equals rank 0's."""
    n = len(per_rank[0][1]) if per_rank else 0
    return [all(results[r] == results[0] for _point, results in per_rank) for r in range(n)]


def report_ranks_agree(per_rank: PerRank) -> Report:
    """One ✓/✗ line per rank: did it return exactly rank 0's rows?"""
    verdicts = Report()
    agree = ranks_agree(per_rank)
    measured = len(rank0_rows(per_rank))
    for rank, same in enumerate(agree):
        what = "the same" if same else "not the same"
        verdicts.add(rank, same, f"{what} {measured} rows as rank 0 "
                     "(the time is averaged over the ranks by an all_reduce)")
    return verdicts
