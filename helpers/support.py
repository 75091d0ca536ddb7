"""What the backend in use accepts: a matrix of collective × dtype × op, observed.

The probe is taught code and runs in notebook 12: every rank tries each case and
stores, under (collective, dtype, op) (op None for collectives that do not
reduce), {"before": ..., "after": ...} snapshots, with "error": "Type: message" when
the call raised, and "ranks_disagree" (every rank's error or None) when the ranks
did not all end the same way. This module turns what the ranks stored into

- records (the format of helpers.results) of the calls the backend accepted, and
- a matrix: one case per (collective, dtype, op) with its status:

  ok         accepted on every rank, and every rank matches the NumPy model
  wrong      accepted on every rank, but some rank disagrees with the model
  unchecked  accepted on every rank; the model has no answer (it raised)
  refused    every rank raised the same error ("changed": the ranks whose buffers the
             call had already changed when it raised)
  split      the ranks did not all end the same way (some may have waited for the timeout)

For one collective's ops (notebook 05), `probe_records` reads a probe stored under
"OP/dtype" keys and `op_table` draws it as one row per op, one column per dtype.
"""
from __future__ import annotations

import html
from typing import Any, Iterable, Mapping, Sequence

from helpers import checks, models
from helpers.collectives import REDUCING
from helpers.verdicts import Report
from helpers.display import RankTable
from helpers.results import record_from_states, save_results

# Roots, as the notebook's calls use them: rank 0 (send/recv: rank 0 sends to rank 1).
ROOTS = {"broadcast": {"src": 0}, "scatter": {"src": 0}, "gather": {"dst": 0},
         "reduce": {"dst": 0}, "send_recv": {"src": 0, "dst": 1}}
ACCEPTED = ("ok", "wrong", "unchecked")
MARKS = {"ok": "✓", "wrong": "WRONG", "unchecked": "?", "refused": "no", "split": "split"}
STYLES = {"ok": "background:#e3f4e1;color:#14532d",
          "wrong": "background:#fde2e1;color:#991b1b;font-weight:bold",
          "unchecked": "background:#fef6d8;color:#854d0e",
          "refused": "background:#f1f1f1;color:#555555",
          "split": "background:#ffedd5;color:#9a3412;font-weight:bold"}


def first_line(error: str, limit: int = 90) -> str:
    """The first line of an error message, cut to `limit` characters."""
    line = (str(error).splitlines() or [""])[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"


def case_params(collective: str, op: str | None) -> dict:
    """The params of a record: roots as the probe uses them, and the op."""
    params = dict(ROOTS.get(collective, {}))
    if op is not None:
        params["op"] = op
    return params


def verify(record: Mapping[str, Any]) -> tuple[str, str | None]:
    """("ok" | "wrong" | "unchecked", a note) for an accepted call, against helpers.models."""
    try:
        oks = checks.check(dict(record))
    except ValueError as err:
        return "unchecked", f"the model has no answer: {first_line(str(err))}"
    bad = [r for r, ok in enumerate(oks) if not ok]
    if bad:
        return "wrong", f"rank(s) {', '.join(map(str, bad))} disagree with the model"
    return "ok", None


def classify_case(cluster: Any, key: tuple, outcomes: Sequence[Mapping[str, Any]]
             ) -> tuple[dict, dict | None]:
    """One case of the matrix from every rank's outcome, and its record if accepted."""
    collective, dtype, op = key
    case: dict[str, Any] = {"collective": collective, "dtype": dtype, "op": op}
    errors = [o.get("error") for o in outcomes]
    disagree = any("ranks_disagree" in o for o in outcomes) or len(set(errors)) > 1
    if disagree:
        case.update(status="split", errors=errors,
                    error="ranks disagree: " + " | ".join(
                        f"rank {r}: {first_line(e) if e else 'accepted'}"
                        for r, e in enumerate(errors)))
        return case, None
    if errors[0] is not None:
        case.update(status="refused", error=errors[0])
        changed = [r for r, o in enumerate(outcomes)
                   if "after" in o and "before" in o and o["after"] != o["before"]]
        if changed:
            case["changed"] = changed
        return case, None
    states = [{"before": o["before"], "after": o["after"]} for o in outcomes]
    record = record_from_states(cluster, collective, case_params(collective, op), states)
    status, note = verify(record)
    case["status"] = status
    if note:
        case["note"] = note
    return case, record


def probe_records(cluster: Any, collective: str, name: str = "probe"
                  ) -> tuple[list[dict], dict[str, str]]:
    """One collective's probe, stored by every rank under "OP/dtype" in `name`:
    records of the calls the backend accepted, and {"OP/dtype": error} for the rest."""
    per_rank = [state[name] for state in cluster.pull(name)]
    records, refused = [], {}
    for key in per_rank[0]:
        op, dtype = key.split("/")
        case, record = classify_case(cluster, (collective, dtype, op), [p[key] for p in per_rank])
        if record is None:
            refused[key] = case["error"]
        else:
            records.append(record)
    return records, refused


def op_table(records: list[dict], refused: dict[str, str]) -> RankTable:
    """One row per op, one column per dtype: '✓ [rank 0's result]', '✗ (model disagrees)'
    or the error."""
    cells: dict[str, dict[str, str]] = {}
    dtypes: list[str] = []
    for record in records:
        op, dtype = record["params"]["op"], record["dtype"]
        ok = all(checks.check(record))
        result = record["ranks"][0]["after"]
        shown = result.get("tensor", result.get("output"))
        cells.setdefault(op, {})[dtype] = f"{'✓' if ok else '✗ (model disagrees)'} {shown}"
        dtypes.append(dtype)
    for key, error in refused.items():
        op, dtype = key.split("/")
        cells.setdefault(op, {})[dtype] = f"refused: {first_line(error, 100)}"
        dtypes.append(dtype)
    columns = ["op", *dict.fromkeys(dtypes)]
    return RankTable([{"op": op, **row} for op, row in cells.items()], columns)


def build_matrix(cluster: Any, per_rank: Sequence[Mapping[tuple, Mapping[str, Any]]],
                 **info: Any) -> tuple[dict, list[dict]]:
    """(matrix, records of the accepted calls) from every rank's probe outcomes.

    `per_rank[r]` maps (collective, dtype, op) to rank r's outcome. `info` (torch
    version, timings, ...) is stored in the matrix as it is.
    """
    keys = list(per_rank[0])
    cases, records = [], []
    for key in keys:
        case, record = classify_case(cluster, tuple(key), [outcomes[key] for outcomes in per_rank])
        cases.append(case)
        if record is not None:
            case["record"] = len(records)         # index into the records
            records.append(record)
    collectives = list(dict.fromkeys(k[0] for k in keys))
    matrix = {
        "backend": cluster.backend, "world_size": cluster.world_size,
        "device": cluster.ranks[0].device if cluster.ranks else None, **info,
        "collectives": collectives,
        "reducing": [c for c in collectives if c in REDUCING],
        "dtypes": list(dict.fromkeys(k[1] for k in keys)),
        "ops": list(dict.fromkeys(k[2] for k in keys if k[2] is not None)),
        "cases": cases,
    }
    return matrix, records


def support_matrix(cluster: Any, name: str = "outcomes", seconds: str = "probe_seconds"
                   ) -> tuple[dict, list[dict]]:
    """Gather the probe from every rank and build (matrix, records of the verified calls).

    The records returned are those the model (or, for send/recv, the direct check)
    confirms; accepted-but-wrong calls stay in the matrix only.
    """
    import torch

    states = cluster.pull(name, seconds)
    info = {"torch": torch.__version__,
            "probe_seconds": round(max(s[seconds] for s in states), 3)}
    if cluster.backend == "nccl":
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    matrix, records = build_matrix(cluster, [s[name] for s in states], **info)
    return matrix, verified_records(matrix, records)


def verified_records(matrix: Mapping[str, Any], records: Sequence[dict]) -> list[dict]:
    """The records of the cases marked ok that helpers.models can check."""
    return [records[c["record"]] for c in matrix["cases"]
            if c["status"] == "ok" and c["collective"] in models.COLLECTIVES]


def lookup(matrix: Mapping[str, Any], collective: str, dtype: str, op: str | None = None) -> dict:
    """The case (collective, dtype, op) of the matrix; KeyError if it was not probed."""
    if collective not in matrix["reducing"]:
        op = None
    elif op is None:
        raise KeyError(f"{collective} reduces: say which op, "
                       f"e.g. ({collective!r}, {dtype!r}, 'SUM')")
    for case in matrix["cases"]:
        if (case["collective"], case["dtype"], case["op"]) == (collective, dtype, op):
            return case
    raise KeyError(f"({collective}, {dtype}, {op}) was not probed")


def is_accepted(case: Mapping[str, Any]) -> bool:
    return case["status"] in ACCEPTED


def counts(matrix: Mapping[str, Any]) -> dict[str, int]:
    out = {status: 0 for status in MARKS}
    for case in matrix["cases"]:
        out[case["status"]] += 1
    return out


def summary(matrix: Mapping[str, Any]) -> str:
    """One paragraph: backend, versions, world size, what was probed and what came out."""
    n = counts(matrix)
    versions = f"torch {matrix.get('torch', '?')}"
    if matrix.get("nccl"):
        versions += f", NCCL {matrix['nccl']}"
    lines = [f"backend {matrix['backend']} ({versions}) · {matrix['world_size']} ranks on "
             f"{matrix.get('device', '?')} · {len(matrix['cases'])} cases probed"
             + (f" in {matrix['probe_seconds']:.1f} s" if "probe_seconds" in matrix else ""),
             f"  {n['ok']} accepted and correct (✓), {n['refused']} refused on every rank, "
             f"{n['wrong']} accepted but wrong, {n['unchecked']} accepted without a model, "
             f"{n['split']} where the ranks disagreed"]
    return "\n".join(lines)


def save_matrix(stem: str, matrix: Mapping[str, Any]):
    """build/results/<stem>.matrix.json (the records go to <stem>.json)."""
    return save_results(f"{stem}.matrix", dict(matrix))


# --------------------------------------------------------------------------- tables

class SupportTable:
    """A matrix table: ✓ / 'no (k)' / … cells, and the errors numbered below it."""

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


def _block(matrix: Mapping[str, Any], collective: str) -> list[tuple]:
    """What a reducing collective did, op by op and dtype by dtype (for grouping)."""
    out = []
    for op in matrix["ops"]:
        for dtype in matrix["dtypes"]:
            try:
                case = lookup(matrix, collective, dtype, op)
            except KeyError:
                out.append(None)
                continue
            out.append((case["status"], case.get("error"), case.get("note"),
                        bool(case.get("changed"))))
    return out


def reduction_table(matrix: Mapping[str, Any]) -> SupportTable:
    """Reducing collectives: one row per op, one column per dtype.

    Collectives that behaved identically in every case share their rows.
    """
    groups: list[list[str]] = []
    for collective in matrix["reducing"]:
        for group in groups:
            if _block(matrix, group[0]) == _block(matrix, collective):
                group.append(collective)
                break
        else:
            groups.append([collective])
    rows = []
    for group in groups:
        for i, op in enumerate(matrix["ops"]):
            cases = []
            for dtype in matrix["dtypes"]:
                try:
                    cases.append(lookup(matrix, group[0], dtype, op))
                except KeyError:
                    cases.append(None)
            rows.append(([" · ".join(group) if i == 0 else "", op], cases))
    return SupportTable(["collective", "op", *matrix["dtypes"]], rows,
                        f"Reducing collectives · {matrix['backend']}")


def movement_table(matrix: Mapping[str, Any]) -> SupportTable:
    """Collectives that only move data: one row per collective, one column per dtype."""
    rows = []
    for collective in matrix["collectives"]:
        if collective in matrix["reducing"]:
            continue
        cases = []
        for dtype in matrix["dtypes"]:
            try:
                cases.append(lookup(matrix, collective, dtype))
            except KeyError:
                cases.append(None)
        rows.append(([collective], cases))
    return SupportTable(["collective", *matrix["dtypes"]], rows,
                        f"Collectives that move data · {matrix['backend']}")


# --------------------------------------------------------------------------- exercise

def _label(key: Sequence[Any]) -> str:
    collective, dtype, *rest = key
    op = rest[0] if rest else None
    return f"{collective}({dtype}{', ' + op if op else ''})"


def find_record(records: Iterable[Mapping[str, Any]], collective: str, dtype: str,
                op: str | None = None) -> Mapping[str, Any] | None:
    for record in records:
        if (record["collective"], record["dtype"]) == (collective, dtype) and \
                (op is None or record["params"].get("op") == op):
            return record
    return None


def grade_support_prediction(prediction: Mapping[tuple, Any] | None,
                             matrix: Mapping[str, Any]) -> Report:
    """Compare {(collective, dtype[, op]): True (accepted) / False (refused)} with this run.

    One ✓/✗ line per case, true when all are right; asks for the prediction first
    while it (or one of its entries) is None or `...`.
    """
    verdicts = Report()
    if not prediction or prediction is Ellipsis or any(
            said is None or said is Ellipsis for said in prediction.values()):
        return verdicts.note("✎ Fill in your prediction first: True (accepted) or False "
                             "(refused) for each case, then run this cell again.")
    oks = []
    for key, said in prediction.items():
        case = lookup(matrix, *key)
        observed = is_accepted(case)
        ok = bool(said) == observed
        seen = ("accepted" + ("" if case["status"] == "ok" else f" ({case['status']})")
                if observed else f"refused: {first_line(case.get('error', ''), 80)}")
        verdicts.line(f"{'✓' if ok else '✗'} {_label(key):<36} you said "
                      f"{'accepted' if said else 'refused':<8}  this run: {seen}", ok)
        oks.append(ok)
    return verdicts.note("All predictions right!" if all(oks) else
                         f"{sum(oks)} of {len(oks)} right.")
