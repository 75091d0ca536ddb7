"""A collective record against the NumPy model, rank by rank.

`check(record)` is the verdict per rank: does every argument's "after" match what
helpers.collectives.models computes from the "befores"? `report(record)` shows it, one line
per rank ("rank 0 ✓  tensor = [3.0]").
"""
from __future__ import annotations

from typing import Any

import numpy as np

from helpers.checks import Report
from helpers.formatting import one_line
from helpers.collectives.registry import OUTPUT, ROOT
from helpers.collectives.arrays import TOLERANCES, is_float, parse_record, record_value
from helpers.collectives.models import UNSPECIFIED, afters, expected_after


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


def _per_arg(record: dict) -> tuple[list[dict], list[dict[str, bool]]]:
    """The model's afters, and per rank: argument name -> does "after" match it."""
    dtype, exps = parse_record(record)[2], expected_after(record)
    return exps, [{n: _matches(e, after.get(n), dtype) for n, e in exp.items()}
                  for exp, after in zip(exps, afters(record))]


def check(record: dict) -> list[bool]:
    """Per rank: True when every argument's "after" matches the model."""
    return [all(oks.values()) for oks in _per_arg(record)[1]]


def report(record: dict) -> Report:
    """One ✓/✗ line per rank (its output, and any argument that is off); verdicts = check()."""
    collective, _, dtype, params, _ = parse_record(record)
    exps, oks = _per_arg(record)
    verdicts = Report()
    for r, (exp, after, ok) in enumerate(zip(exps, afters(record), oks)):
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
        verdicts.add(r, all(ok.values()), "  ".join(parts))
    return verdicts
