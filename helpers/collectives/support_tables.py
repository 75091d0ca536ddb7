"""The survey of helpers.collectives.support drawn as tables: ✓ / 'no (k)' / … cells, errors below.

`reduction_table`: reducing collectives, one row per op, one column per dtype;
`movement_table`: the collectives that only move data, one row each.
"""
from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from helpers.collectives.support import MARKS, first_line, lookup

STYLES = {"ok": "background:#e3f4e1;color:#14532d",
          "wrong": "background:#fde2e1;color:#991b1b;font-weight:bold",
          "unchecked": "background:#fef6d8;color:#854d0e",
          "refused": "background:#f1f1f1;color:#555555",
          "split": "background:#ffedd5;color:#9a3412;font-weight:bold"}


class SupportTable:
    """A survey table: ✓ / 'no (k)' / … cells, and the errors numbered below it."""

    def __init__(self, columns: Sequence[str], rows: Sequence[tuple[list[str], list[dict | None]]],
                 title: str = ""):
        self.columns, self.rows, self.title = list(columns), list(rows), title
        self.errors: list[str] = []
        for _, cases in self.rows:
            for case in cases:
                if case and case["status"] in ("refused", "split", "unchecked", "wrong"):
                    text = self._reason(case)
                    if text not in self.errors:
                        self.errors.append(text)

    @staticmethod
    def _reason(case: Mapping[str, Any]) -> str:
        return first_line(case.get("error") or case.get("note") or "", 200)

    def cell(self, case: Mapping[str, Any] | None) -> str:
        if case is None:
            return ""
        mark = MARKS[case["status"]] + ("*" if case.get("changed") else "")
        if case["status"] == "ok":
            return mark
        return f"{mark} ({self.errors.index(self._reason(case)) + 1})"

    def legend(self) -> list[str]:
        lines = [f"({i}) {text}" for i, text in enumerate(self.errors, 1)]
        if any(c and c.get("changed") for _, cases in self.rows for c in cases):
            lines.append("*  the call raised, yet it had already changed the buffers")
        return lines

    def __str__(self) -> str:
        table = [self.columns] + [labels + [self.cell(c) for c in cases]
                                  for labels, cases in self.rows]
        widths = [max(len(row[i]) for row in table) for i in range(len(self.columns))]
        lines = [self.title] if self.title else []
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in table]
        return "\n".join(lines + self.legend())

    __repr__ = __str__

    def _repr_html_(self) -> str:
        esc = html.escape
        head = "".join(f"<th>{esc(c)}</th>" for c in self.columns)
        body = []
        for labels, cases in self.rows:
            cells = "".join("<td style='text-align:left'>"
                            + (f"<code>{esc(v)}</code>" if v else "") + "</td>" for v in labels)
            for case in cases:
                if case is None:
                    cells += "<td></td>"
                    continue
                tip = esc((case.get("error") or case.get("note") or "accepted, matches the model")
                          + (f" (buffers changed on rank(s) {case['changed']})"
                             if case.get("changed") else ""))
                cells += (f"<td style='{STYLES[case['status']]};text-align:center' "
                          f"title='{tip}'>{esc(self.cell(case))}</td>")
            body.append(f"<tr>{cells}</tr>")
        caption = f"<caption style='text-align:left'><b>{esc(self.title)}</b></caption>" \
            if self.title else ""
        legend = "".join(f"<li>{esc(line)}</li>" for line in self.legend())
        return (f"<table class='support-table'>{caption}<thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(body)}</tbody></table>"
                + (f"<ul style='list-style:none;padding-left:0;font-size:90%'>{legend}</ul>"
                   if legend else ""))


def _block(survey: Mapping[str, Any], collective: str) -> list[tuple]:
    """What a reducing collective did, op by op and dtype by dtype (for grouping)."""
    out = []
    for op in survey["ops"]:
        for dtype in survey["dtypes"]:
            try:
                case = lookup(survey, collective, dtype, op)
            except KeyError:
                out.append(None)
                continue
            out.append((case["status"], case.get("error"), case.get("note"),
                        bool(case.get("changed"))))
    return out


def reduction_table(survey: Mapping[str, Any]) -> SupportTable:
    """Reducing collectives: one row per op, one column per dtype.

    Collectives that behaved identically in every case share their rows.
    """
    groups: list[list[str]] = []
    for collective in survey["reducing"]:
        for group in groups:
            if _block(survey, group[0]) == _block(survey, collective):
                group.append(collective)
                break
        else:
            groups.append([collective])
    rows = []
    for group in groups:
        for i, op in enumerate(survey["ops"]):
            cases = []
            for dtype in survey["dtypes"]:
                try:
                    cases.append(lookup(survey, group[0], dtype, op))
                except KeyError:
                    cases.append(None)
            rows.append(([" · ".join(group) if i == 0 else "", op], cases))
    return SupportTable(["collective", "op", *survey["dtypes"]], rows,
                        f"Reducing collectives · {survey['backend']}")


def movement_table(survey: Mapping[str, Any]) -> SupportTable:
    """Collectives that only move data: one row per collective, one column per dtype."""
    rows = []
    for collective in survey["collectives"]:
        if collective in survey["reducing"]:
            continue
        cases = []
        for dtype in survey["dtypes"]:
            try:
                cases.append(lookup(survey, collective, dtype))
            except KeyError:
                cases.append(None)
        rows.append(([collective], cases))
    return SupportTable(["collective", *survey["dtypes"]], rows,
                        f"Collectives that move data · {survey['backend']}")
