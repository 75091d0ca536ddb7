"""The one way a notebook checks: `Report`, a verdict per rank that shows itself.

    verdict = Report("all_reduce against the NumPy model")
    verdict.add(0, True, "tensor [64.0]")       # → "rank 0 ✓  tensor [64.0]"
    verdict                                    # a cell ends with it: the lines show


`check(record)` is the verdict per rank; `report(record)` prints one line per rank
("rank 0 ✓  tensor = [3.0]"); `check_prediction` grades a reader's prediction.
Used by notebooks 01-12 (self-checks and exercises) and by helpers.collectives.p2p and support.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from helpers.formatting import one_line
from helpers.collectives.registry import OUTPUT, ROOT
from helpers.collectives.arrays import TOLERANCES, is_float, parse_record, record_value
from helpers.collectives.models import UNSPECIFIED, expected_after

MARKS = {True: "✓", False: "✗", None: "✎"}   # ✎: nothing to check yet (an empty exercise)


@dataclass(frozen=True)
class Line:
    text: str
    rank: int | None = None
    ok: bool | None = None
    counted: bool = False      # a verdict (in `oks`), not a note
    shown: bool = True

    def __str__(self) -> str:
        if self.rank is None:
            return self.text
        return f"rank {self.rank} {MARKS[self.ok]}  {self.text}".rstrip()


@dataclass(eq=False)
class Report:
    """Lines of a check; `oks` holds each verdict, in order.

    It also reads as the sequence of its verdicts (`report == [True, False]`,
    `report[1]`, `all(report)`), and is true when every verdict is ✓.
    """

    title: str | None = None
    lines: list[Line] = field(default_factory=list)

    def add(self, rank: int, ok: bool | None, text: str = "") -> "Report":
        self.lines.append(Line(text, rank, ok, counted=True))
        return self

    def line(self, text: str, ok: bool | None) -> "Report":
        """A verdict written as `text` already says it (its own ✓/✗ and layout)."""
        self.lines.append(Line(text, None, ok, counted=True))
        return self

    def verdict(self, ok: bool | None) -> "Report":
        """A verdict with no line of its own (a note above explains it)."""
        self.lines.append(Line("", None, ok, counted=True, shown=False))
        return self

    def note(self, text: str) -> "Report":
        self.lines.append(Line(text))
        return self

    @property
    def oks(self) -> list[bool | None]:
        return [line.ok for line in self.lines if line.counted]

    @property
    def all_ok(self) -> bool:
        """True when there is at least one verdict and every one is ✓."""
        return bool(self.oks) and all(ok is True for ok in self.oks)

    def __bool__(self) -> bool:
        return self.all_ok

    def __len__(self) -> int:
        return len(self.oks)

    def __getitem__(self, index):
        return self.oks[index]

    def __iter__(self):
        return iter(self.oks)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple)):
            return self.oks == list(other)
        if isinstance(other, Report):
            return (self.title, self.lines) == (other.title, other.lines)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def _shown(self) -> list[Line]:
        return [line for line in self.lines if line.shown]

    def __str__(self) -> str:
        head = [self.title] if self.title else []
        return "\n".join(head + [str(line) for line in self._shown()])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        colour = {True: "#1a7f37", False: "#cf222e", None: "#6e7781"}
        rows = []
        if self.title:
            rows.append(f"<b>{html.escape(self.title)}</b>\n")
        for line in self._shown():
            style = f' style="color:{colour[line.ok]}"' if line.counted else ""
            rows.append(f"<span{style}>{html.escape(str(line))}\n</span>")  # a line, as printed
        return '<pre class="nccl-report">' + "".join(rows) + "</pre>"



def _matches(expected: Any, actual: Any, dtype: str) -> bool:
    if expected is UNSPECIFIED:
        return True
    if expected is None or actual is None:
        return expected is None and actual is None
    if not isinstance(expected, (list, np.ndarray)):  # split sizes: plain ints
        return bool(expected == actual)
    if isinstance(expected, list):
        return (isinstance(actual, (list, tuple)) and len(actual) == len(expected)
                and all(_matches(e, a, dtype) for e, a in zip(expected, actual)))
    try:
        actual = np.asarray(actual)
        if actual.shape != expected.shape or actual.dtype == object:
            return False
        if not is_float(dtype):
            return bool(np.array_equal(actual, expected))
        rtol, atol = TOLERANCES[dtype]
        return bool(np.allclose(actual.astype(np.float64), expected.astype(np.float64),
                                rtol=rtol, atol=atol, equal_nan=True))
    except (TypeError, ValueError):
        return False


def _afters(record: dict) -> list[dict]:
    ranks = sorted(record["ranks"], key=lambda r: r.get("rank", 0))
    return [r.get("after") or {} for r in ranks]


def _per_arg(record: dict) -> tuple[list[dict], list[dict[str, bool]]]:
    """The model's afters, and per rank: argument name -> does "after" match it."""
    dtype, exps = parse_record(record)[2], expected_after(record)
    return exps, [{n: _matches(e, after.get(n), dtype) for n, e in exp.items()}
                  for exp, after in zip(exps, _afters(record))]


def check(record: dict) -> list[bool]:
    """Per rank: True when every argument's "after" matches the model."""
    return [all(oks.values()) for oks in _per_arg(record)[1]]


def report(record: dict) -> Report:
    """One ✓/✗ line per rank (its output, and any argument that is off); verdicts = check()."""
    collective, _, dtype, params, _ = parse_record(record)
    exps, oks = _per_arg(record)
    verdicts = Report()
    for r, (exp, after, ok) in enumerate(zip(exps, _afters(record), oks)):
        parts = []
        for name, e in exp.items():
            if name != OUTPUT[collective] and ok[name]:
                continue
            try:
                shown = one_line(record_value(name, after.get(name), dtype))
            except (TypeError, ValueError):
                shown = one_line(after.get(name))
            if e is UNSPECIFIED:
                key = ROOT[collective]
                shown += f" (not defined by {collective}: only {key} {params[key]} is)"
            elif not ok[name]:
                shown += f" (model: {one_line(e)})"
            elif collective == "send_recv" and r in (params.get("src"), params.get("dst")):
                shown += (f" (src: sent to rank {params['dst']}, unchanged)" if r == params["src"]
                          else f" (dst: received from rank {params['src']})")
            elif e is None:
                shown += (" (not part of this send/recv)" if collective == "send_recv"
                          else " (not passed on this rank)")
            parts.append(f"{name} = {shown}")
        verdicts.line(f"rank {r} {'✓' if all(ok.values()) else '✗'}  " + "  ".join(parts),
                      all(ok.values()))
    return verdicts




def _close(predicted: Any, actual: Any) -> bool:
    """Nested comparison of a student's prediction with a measured value."""
    if isinstance(predicted, np.ndarray):
        predicted = predicted.tolist()
    if isinstance(actual, np.ndarray):
        actual = actual.tolist()
    if isinstance(predicted, (list, tuple)) or isinstance(actual, (list, tuple)):
        return (isinstance(predicted, (list, tuple)) and isinstance(actual, (list, tuple))
                and len(predicted) == len(actual)
                and all(_close(p, a) for p, a in zip(predicted, actual)))
    if predicted is None or actual is None or predicted is Ellipsis:
        return predicted is actual
    try:
        return bool(np.isclose(float(predicted), float(actual), rtol=1e-3, atol=1e-3, equal_nan=True))
    except (TypeError, ValueError):
        return False


def check_prediction(prediction: Sequence[Any] | None, actual_afters: Sequence[dict] | dict,
                     arg: str, undefined: Sequence[int] = ()) -> Report:
    """Compare a student's per-rank prediction of `arg` with what the ranks measured.

    `actual_afters` is the list of per-rank "after" dicts, or a whole record (then
    the ranks where the API leaves `arg` undefined are found by the model; with a
    list, name them in `undefined`). Predict None for "not defined"/"not passed".
    One ✓/✗ line per rank; the report is true when all are right.
    """
    verdicts = Report()
    if prediction is None or prediction is Ellipsis:
        return verdicts.note(f"✎ Fill in your prediction for {arg!r} first (one value per rank, "
                             "None where it is not defined or not passed), then run this cell "
                             "again.")
    undefined = set(undefined)
    if isinstance(actual_afters, dict):
        record = actual_afters
        undefined |= {r for r, exp in enumerate(expected_after(record))
                      if exp.get(arg) is UNSPECIFIED}
        actual_afters = _afters(record)
    afters = [a["after"] if "after" in a and arg not in a else a for a in actual_afters]
    if len(prediction) != len(afters):
        return verdicts.note(f"✗ Your prediction has {len(prediction)} entries but there are "
                             f"{len(afters)} ranks: give one value per rank.")
    oks = []
    for r, (p, after) in enumerate(zip(prediction, afters)):
        measured = after.get(arg)
        if p is Ellipsis:
            ok, note = False, "  (fill this one in)"
        elif r in undefined:
            ok = p is None
            note = ("  (not defined by the API: don't rely on what you measure)" if ok else
                    "  (not defined by the API: predict None; no program may rely on it)")
        else:
            ok, note = _close(p, measured), ""
        shown = "not defined / not passed" if p is None else "..." if p is Ellipsis else one_line(p)
        verdicts.line(f"rank {r} {'✓' if ok else '✗'}  predicted {shown}   "
                      f"measured {one_line(measured)}{note}", ok)
        oks.append(ok)
    return verdicts.note("All ranks right!" if all(oks) else
                         f"{sum(oks)} of {len(oks)} ranks right.")
