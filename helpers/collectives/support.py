"""What the backend in use accepts: a survey of collective × dtype × op, observed.

The probe is taught code and runs in notebook 12: every rank tries each case and
stores, under (collective, dtype, op) (op None for collectives that do not
reduce), {"before": ..., "after": ...} snapshots, with "error": "Type: message" when
the call raised, and "ranks_disagree" (every rank's error or None) when the ranks
did not all end the same way. This module turns what the ranks stored into

- records (the format of helpers.records) of the calls the backend accepted, and
- a survey: one case per (collective, dtype, op) with its status:

  ok         accepted on every rank, and every rank matches the NumPy model
  wrong      accepted on every rank, but some rank disagrees with the model
  unchecked  accepted on every rank; the model has no answer (it raised)
  refused    every rank raised the same error ("changed": the ranks whose buffers the
             call had already changed when it raised)
  split      the ranks did not all end the same way (some may have waited for the timeout)

helpers.collectives.support_tables draws the survey as tables (notebook 12). For one collective's
ops (notebook 05), `probe_records` reads a probe stored under "OP/dtype" keys and
`op_table` draws it as one row per op, one column per dtype.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from helpers.collectives import registry
from helpers import checks
from helpers.collectives import model_check
from helpers.collectives.registry import REDUCING, ROOT, send_recv_ranks
from helpers.figures.display import RankTable
from helpers.records import record_from_states, record_values, save_results

ACCEPTED = ("ok", "wrong", "unchecked")
MARKS = {"ok": checks.mark(True), "wrong": "WRONG", "unchecked": "?", "refused": "no", "split": "split"}


def first_line(error: str, limit: int = 90) -> str:
    """The first line of an error message, cut to `limit` characters."""
    line = (str(error).splitlines() or [""])[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"


def case_params(collective: str, op: str | None) -> dict:
    """The params of a record: roots as the probe uses them, and the op.

    The probe takes the registry's defaults: roots are rank 0, send/recv goes 0 → 1.
    """
    params = {ROOT[collective]: 0} if collective in ROOT else {}
    if collective == "send_recv":
        params["src"], params["dst"] = send_recv_ranks(world_size=2)
    if op is not None:
        params["op"] = op
    return params


def verify(record: Mapping[str, Any]) -> tuple[str, str | None]:
    """("ok" | "wrong" | "unchecked", a note) for an accepted call, against helpers.collectives.models."""
    try:
        oks = model_check.check(dict(record))
    except ValueError as err:
        return "unchecked", f"the model has no answer: {first_line(str(err))}"
    bad = [r for r, ok in enumerate(oks) if not ok]
    if bad:
        return "wrong", f"rank(s) {', '.join(map(str, bad))} disagree with the model"
    return "ok", None


def classify_case(cluster: Any, key: tuple, outcomes: Sequence[Mapping[str, Any]]
             ) -> tuple[dict, dict | None]:
    """One case of the survey from every rank's outcome, and its record if accepted."""
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
                   if "after" in o and "before" in o
                   and record_values(o["after"]) != record_values(o["before"])]
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
        ok = all(model_check.check(record))
        result = record["ranks"][0]["after"]
        shown = result.get("tensor", result.get("output"))
        verdict = checks.mark(ok) + ("" if ok else " (model disagrees)")
        cells.setdefault(op, {})[dtype] = f"{verdict} {shown}"
        dtypes.append(dtype)
    for key, error in refused.items():
        op, dtype = key.split("/")
        cells.setdefault(op, {})[dtype] = f"refused: {first_line(error, 100)}"
        dtypes.append(dtype)
    columns = ["op", *dict.fromkeys(dtypes)]
    return RankTable([{"op": op, **row} for op, row in cells.items()], columns)


def build_survey(cluster: Any, per_rank: Sequence[Mapping[tuple, Mapping[str, Any]]],
                 **info: Any) -> tuple[dict, list[dict]]:
    """(survey, records of the accepted calls) from every rank's probe outcomes.

    `per_rank[r]` maps (collective, dtype, op) to rank r's outcome. `info` (torch
    version, timings, ...) is stored in the survey as it is.
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
    survey = {
        "backend": cluster.backend, "world_size": cluster.world_size,
        "device": cluster.ranks[0].device if cluster.ranks else None, **info,
        "collectives": collectives,
        "reducing": [c for c in collectives if c in REDUCING],
        "dtypes": list(dict.fromkeys(k[1] for k in keys)),
        "ops": list(dict.fromkeys(k[2] for k in keys if k[2] is not None)),
        "cases": cases,
    }
    return survey, records


def support_survey(cluster: Any, name: str = "outcomes", seconds: str = "probe_seconds"
                   ) -> tuple[dict, list[dict]]:
    """Gather the probe from every rank and build (survey, records of the verified calls).

    The records returned are those the model (or, for send/recv, the direct check)
    confirms; accepted-but-wrong calls stay in the survey only.
    """
    import torch

    states = cluster.pull(name, seconds)
    info = {"torch": torch.__version__,
            "probe_seconds": round(max(s[seconds] for s in states), 3)}
    if cluster.backend == "nccl":
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    survey, records = build_survey(cluster, [s[name] for s in states], **info)
    return survey, verified_records(survey, records)


def verified_records(survey: Mapping[str, Any], records: Sequence[dict]) -> list[dict]:
    """The records of the cases marked ok that helpers.collectives.models can check."""
    return [records[c["record"]] for c in survey["cases"]
            if c["status"] == "ok" and c["collective"] in registry.COLLECTIVES]


def lookup(survey: Mapping[str, Any], collective: str, dtype: str, op: str | None = None) -> dict:
    """The case (collective, dtype, op) of the survey; KeyError if it was not probed."""
    if collective not in survey["reducing"]:
        op = None
    elif op is None:
        raise KeyError(f"{collective} reduces: say which op, "
                       f"e.g. ({collective!r}, {dtype!r}, 'SUM')")
    for case in survey["cases"]:
        if (case["collective"], case["dtype"], case["op"]) == (collective, dtype, op):
            return case
    raise KeyError(f"({collective}, {dtype}, {op}) was not probed")


def is_accepted(case: Mapping[str, Any]) -> bool:
    return case["status"] in ACCEPTED


def counts(survey: Mapping[str, Any]) -> dict[str, int]:
    out = {status: 0 for status in MARKS}
    for case in survey["cases"]:
        out[case["status"]] += 1
    return out


def summary(survey: Mapping[str, Any]) -> str:
    """One paragraph: backend, versions, world size, what was probed and what came out."""
    n = counts(survey)
    versions = f"torch {survey.get('torch', '?')}"
    if survey.get("nccl"):
        versions += f", NCCL {survey['nccl']}"
    lines = [f"backend {survey['backend']} ({versions}) · {survey['world_size']} ranks on "
             f"{survey.get('device', '?')} · {len(survey['cases'])} cases probed"
             + (f" in {survey['probe_seconds']:.1f} s" if "probe_seconds" in survey else ""),
             f"  {n['ok']} accepted and correct (✓), {n['refused']} refused on every rank, "
             f"{n['wrong']} accepted but wrong, {n['unchecked']} accepted without a model, "
             f"{n['split']} where the ranks disagreed"]
    return "\n".join(lines)


def save_survey(stem: str, survey: Mapping[str, Any]):
    """build/results/<stem>.survey.json (the records go to <stem>.json)."""
    return save_results(f"{stem}.survey", dict(survey))


# --------------------------------------------------------------------------- exercise

def find_record(records: Iterable[Mapping[str, Any]], collective: str, dtype: str,
                op: str | None = None) -> Mapping[str, Any] | None:
    for record in records:
        if (record["collective"], record["dtype"]) == (collective, dtype) and \
                (op is None or record["params"].get("op") == op):
            return record
    return None


def accepted(survey: Mapping[str, Any], cases: Any) -> dict:
    """{(collective, dtype[, op]): did this run accept it?} for the exercise's `grade`,
    for each case this run probed. A prediction not filled in yet (None, `...`) asks for
    nothing; a case that was not probed is left out (grade says "no such name")."""
    found = {}
    for case in cases if isinstance(cases, Mapping) else ():
        try:
            found[tuple(case)] = is_accepted(lookup(survey, *case))
        except (KeyError, TypeError):
            continue
    return found
