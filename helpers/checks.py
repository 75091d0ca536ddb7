"""The one way a notebook checks: `Report`, a verdict per rank that shows itself.

    verdict = Report("all_reduce against the NumPy model")
    verdict.add(0, True, "tensor [64.0]")       # → "rank 0 ✓  tensor [64.0]"
    verdict                                    # a cell ends with it: the lines show

`grade(prediction, measured, what)` grades an exercise: the reader's prediction against
what each rank measured. A collective record against the NumPy model (`check`, `report`):
helpers.collectives.model_check.
"""
from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from helpers.formatting import one_line
from helpers.records import record_values

MARKS = {True: "✓", False: "✗", None: "✎"}   # ✎: nothing to check yet (an empty exercise)


def mark(ok: bool | None) -> str:
    """The mark of a verdict, for a table or a grid whose cells are verdicts."""
    return MARKS[None if ok is None else bool(ok)]


@dataclass(frozen=True)
class Line:
    text: str
    rank: int | str | None = None   # a rank, or a label ("bytes", "all_gather") in its place
    ok: bool | None = None
    counted: bool = False      # a verdict (in `oks`), not a note
    shown: bool = True

    def __str__(self) -> str:
        if self.rank is None:
            return self.text
        label = f"rank {self.rank}" if isinstance(self.rank, int) else self.rank
        return f"{label} {mark(self.ok)}  {self.text}".rstrip()


@dataclass(eq=False)
class Report:
    """Lines of a check; `oks` holds each verdict, in order.

    It also reads as the sequence of its verdicts (`report == [True, False]`,
    `report[1]`, `all(report)`), and is true when every verdict is ✓.
    """

    title: str | None = None
    lines: list[Line] = field(default_factory=list)

    def add(self, rank: int | str, ok: bool | None, text: str = "") -> "Report":
        """A verdict: "rank 0 ✓  text"; a str in place of the rank labels the line."""
        self.lines.append(Line(text, rank, None if ok is None else bool(ok), counted=True))
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

    def summary(self) -> str:
        """One line for the whole check: "✓ 4/4 ranks: <title>" (a verdict per rank), else
        "✓ 16/16 checks, 4 ranks: <title>"; ✗ when any verdict fails, ✎ when one waits."""
        shown = [line for line in self._shown() if line.counted]
        oks = [line.ok for line in shown]
        ranks = {line.rank for line in shown if isinstance(line.rank, int)}
        good = sum(ok is True for ok in oks)
        sign = mark(False if False in oks else None if None in oks else True)
        count = (f"{good}/{len(oks)} ranks" if len(ranks) == len(oks) else
                 f"{good}/{len(oks)} checks" + (f", {len(ranks)} ranks" if ranks else ""))
        return f"{sign} {count}: {self.title}" if self.title else f"{sign} {count}"

    def _repr_html_(self) -> str:
        """The lines as printed, coloured; each verdict's rank and ok in data- attributes
        (and every verdict, hidden ones too, in the block's data-oks) for a reader's tools.
        A check whose two or more verdicts all pass folds its lines under `summary`; a
        failing or waiting one shows them open."""
        colour = {True: "#1a7f37", False: "#cf222e", None: "#6e7781"}
        rows = []
        if self.title:
            rows.append(f"<b>{html.escape(self.title)}</b>\n")
        for line in self._shown():
            attributes = ""
            if line.counted:
                who = "" if line.rank is None else str(line.rank).strip()
                attributes = (f' class="verdict" data-rank="{html.escape(who)}" '
                              f'data-ok="{json.dumps(line.ok)}" style="color:{colour[line.ok]}"')
            rows.append(f"<span{attributes}>{html.escape(str(line))}\n</span>")  # as printed
        oks = html.escape(json.dumps(self.oks))
        block = f'<pre class="nccl-report" data-oks="{oks}">' + "".join(rows) + "</pre>"
        verdicts = [line for line in self._shown() if line.counted]
        if len(verdicts) < 2 or not all(line.ok is True for line in verdicts):
            return block
        return (f'<details class="nccl-report-fold"><summary>{html.escape(self.summary())}'
                f"</summary>{block}</details>")


# --------------------------------------------------------------------------- exercises

def same(predicted: Any, measured: Any, rel_tol: float = 1e-3) -> bool:
    """Does a prediction match a measured value? Nested lists and dicts item by item,
    ints exactly, floats within `rel_tol` (relative), None only with None."""
    predicted, measured = record_values(predicted), record_values(measured)
    if isinstance(predicted, Mapping) or isinstance(measured, Mapping):
        return (isinstance(predicted, Mapping) and isinstance(measured, Mapping)
                and predicted.keys() == measured.keys()
                and all(same(predicted[k], measured[k], rel_tol) for k in measured))
    if isinstance(predicted, (list, tuple)) or isinstance(measured, (list, tuple)):
        return (isinstance(predicted, (list, tuple)) and isinstance(measured, (list, tuple))
                and len(predicted) == len(measured)
                and all(same(p, m, rel_tol) for p, m in zip(predicted, measured)))
    if predicted is None or measured is None or predicted is Ellipsis:
        return predicted is measured
    if isinstance(predicted, (bool, str)) or isinstance(measured, (bool, str)) or (
            isinstance(predicted, int) and isinstance(measured, int)):
        return bool(predicted == measured)
    try:
        p, m = float(predicted), float(measured)
    except (TypeError, ValueError):
        return bool(predicted == measured)
    return (math.isnan(p) and math.isnan(m)) or math.isclose(p, m, rel_tol=rel_tol,
                                                             abs_tol=1e-9)


def _is_record(value: Any) -> bool:
    return isinstance(value, Mapping) and "collective" in value and "ranks" in value


def _blank(prediction: Any) -> bool:
    """No prediction yet: None, `...`, or every entry still `...`."""
    if prediction is None or prediction is Ellipsis:
        return True
    if not isinstance(prediction, (Mapping, list, tuple)):
        return False                               # a single value: graded as wrong
    entries = list(prediction.values() if isinstance(prediction, Mapping) else prediction)
    return not entries or all(e is Ellipsis for e in entries)


_NOTHING = object()


def _lone(value: Any) -> Any:
    """The value of a one-element list or tensor ([16.0] → 16.0, [[2]] → 2); _NOTHING when
    `value` is not one."""
    while isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    return _NOTHING if isinstance(value, (list, tuple, Mapping)) else value


def _single(value: Any) -> bool:
    return value is not None and not isinstance(value, (list, tuple, Mapping))


def _fits(predicted: Any, measured: Any, top: bool = True) -> bool:
    """Has `predicted` the form of `measured`: the same nesting of lists (same lengths) and
    dicts (same keys)? A single value stands for a one-element list or tensor as a whole
    (`top`); None and `...` fit any form."""
    if predicted is None or predicted is Ellipsis or measured is None:
        return True
    if isinstance(measured, Mapping):
        return (isinstance(predicted, Mapping) and predicted.keys() == measured.keys()
                and all(_fits(predicted[k], measured[k], False) for k in measured))
    if isinstance(measured, (list, tuple)):
        if isinstance(predicted, (list, tuple)):
            return len(predicted) == len(measured) and all(
                _fits(p, m, False) for p, m in zip(predicted, measured))
        return top and not isinstance(predicted, Mapping) and _lone(measured) is not _NOTHING
    return _single(predicted)


def _matches(predicted: Any, measured: Any, rel_tol: float) -> bool:
    """`same`, a single value also matching a one-element list or tensor."""
    if _single(predicted) and predicted is not Ellipsis and isinstance(measured, (list, tuple)):
        lone = _lone(measured)
        return lone is not _NOTHING and same(predicted, lone, rel_tol)
    return same(predicted, measured, rel_tol)


def _form(value: Any) -> str:
    """The form a prediction of `value` takes, in words."""
    if isinstance(value, Mapping):
        return "a dict with the names " + ", ".join(map(str, value))
    if isinstance(value, (list, tuple)):
        if _lone(value) is not _NOTHING:
            return "a single value (or a one-element list)"
        return f"a list of {len(value)} values"
    return "None" if value is None else "a single value, not a list"


def _graded(prediction: Any, measured: Any, undefined: set,
            rel_tol: float) -> Iterator[tuple[int | str, bool, str]]:
    """(rank or padded name, ok, text) for each entry of a filled-in prediction."""
    keyed = isinstance(measured, Mapping)
    if keyed:
        pairs = [(key, prediction.get(key, Ellipsis), m) for key, m in measured.items()]
        pairs += [(key, p, None) for key, p in prediction.items() if key not in measured]
    else:
        pairs = [(rank, p, m) for rank, (p, m) in enumerate(zip(prediction, measured))]
    labels = {key: " · ".join(map(str, key)) if isinstance(key, tuple) else str(key)
              for key, _, _ in pairs}
    width = max(map(len, labels.values()))
    for key, p, m in pairs:
        m = record_values(m)
        if keyed and key not in measured:
            ok, note = False, "  (not measured: no such name)"
        elif p is Ellipsis:
            ok, note = False, "  (fill this one in)"
        elif key in undefined and not keyed:
            ok = p is None
            note = ("  (not defined by the API: don't rely on what you measure)" if ok else
                    "  (not defined by the API: predict None; no program may rely on it)")
        else:
            ok = _matches(p, m, rel_tol)
            note = "" if ok or _fits(p, m) else f"  (give {_form(m)})"
        shown = ("..." if p is Ellipsis else
                 "not defined / not passed" if p is None and not keyed else one_line(p))
        yield (f"{labels[key]:<{width}}" if keyed else key, ok,
               f"predicted {shown}   measured {one_line(m)}{note}")


def _per_rank(prediction: Any, measured: list, undefined: set) -> list | str:
    """The prediction as one value per rank, or the sentence that says which form to give.

    A list of one value per rank, or one value for all ranks where every rank measured
    the same (and none is undefined); a list of one value per rank whose form differs
    from what a rank measured is still graded rank by rank (its lines say the form)."""
    n = len(measured)
    per_rank = isinstance(prediction, (list, tuple)) and len(prediction) == n
    if per_rank and all(_fits(p, m) for p, m in zip(prediction, measured)):
        return list(prediction)
    first = record_values(measured[0]) if measured else None
    agree = bool(measured) and not undefined and all(
        record_values(m) == first for m in measured)
    if agree and not isinstance(prediction, Mapping) and _fits(prediction, first):
        return [prediction] * n
    if per_rank:
        return list(prediction)
    every = f"give a list of {n} values, one per rank"
    if isinstance(prediction, Mapping):
        return f"a dict, but this exercise names no values: {every}"
    if not isinstance(prediction, (list, tuple)) and not agree:
        return ("one value for all ranks is graded only where every rank measures the same "
                f"(and the API defines it on every rank); {every}")
    if not isinstance(prediction, (list, tuple)):
        return f"{every}, or one value for all of them ({_form(first)})"
    k = len(prediction)
    return f"{k} {'entry' if k == 1 else 'entries'} for {n} ranks: {every}" + (
        f", or one value for all of them ({_form(first)})" if agree else "")


def grade(prediction: Sequence[Any] | Mapping[Any, Any] | None,
          measured: Sequence[Any] | Mapping[Any, Any], what: str, *,
          undefined: Sequence[int] = (), rel_tol: float = 1e-3) -> Report:
    """The reader's prediction against what was measured: one ✓/✗ line per rank.

    `measured`: one value per rank (a list), or a collective record (then `what` is the
    argument's name, and the ranks where the API leaves it undefined come from the
    model), or a dict of named values (then `prediction` is a dict with those names,
    one line per name). Predict None for "not defined"/"not passed"; the ranks named
    in `undefined` expect None. A prediction of None or `...` asks to be filled in.

    The forms a prediction may take: one value per rank (a list), or one value for all
    ranks where every rank measured the same; a single number for a one-element list or
    tensor (16.0 for [16.0]); tensors and NumPy arrays as their values. Any other form is
    answered with a sentence that says which form to give, never an exception.
    """
    undefined = set(undefined)
    if _is_record(measured):
        # a local import: only a record needs the NumPy models
        from helpers.collectives.models import measured_of
        measured, unspecified = measured_of(measured, what)
        undefined |= unspecified
    keyed = isinstance(measured, Mapping)
    measured = measured if keyed else list(measured)
    verdicts = Report(f"Your prediction of {what}, against what "
                      f"{'this run' if keyed else 'each rank'} measured")
    prediction = record_values(prediction)        # tensors and arrays: their values
    if _blank(prediction):
        how = ("a value for each name" if keyed else
               "one value per rank, None where it is not defined or not passed")
        verdicts.note(f"{mark(None)} Fill in your prediction first ({how}), "
                      "then run this cell again.")
        for _ in measured:          # one ✎ per rank, not shown: nothing to check yet
            verdicts.verdict(None)
        return verdicts
    if keyed and not isinstance(prediction, Mapping):
        return verdicts.add("prediction", False, "give a dict: a value for each of "
                            + ", ".join(map(str, measured)))
    if not keyed:
        prediction = _per_rank(prediction, measured, undefined)
        if isinstance(prediction, str):
            return verdicts.add("prediction", False, prediction)
    for key, ok, text in _graded(prediction, measured, undefined, rel_tol):
        verdicts.add(key, ok, text)
    right, n = sum(ok is True for ok in verdicts.oks), len(verdicts)
    ranks = "" if keyed else " ranks"
    return verdicts.note(f"All{ranks} right!" if right == n else f"{right} of {n}{ranks} right.")
