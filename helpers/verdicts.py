"""A check's verdict, rank by rank, that shows itself: a cell ends with it, no `;`.

    verdict = Report("all_reduce against the NumPy model")
    verdict.add(0, True, "tensor [64.0]")       # → "rank 0 ✓  tensor [64.0]"
    verdict.note("All ranks right!")            # a line with no verdict
    verdict                                    # the notebook displays the lines

Returned by the checkers of notebooks 01-12 (helpers.checks, p2p, ring, support, bench)
and meant for those of notebooks 14-19.
(Not named helpers/report.py: importing such a module would replace the `report`
checker that `from helpers import report` gives the notebooks.)
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

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
