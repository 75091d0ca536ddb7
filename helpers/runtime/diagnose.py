"""Say what went wrong in a failed `%%px` cell, by rank, and what to do next.

An error on the engines reaches the notebook as ipyparallel's CompositeError:
one traceback per engine, named by engine id. `start_cluster` installs
`show_with_diagnosis` as the kernel's handler for it, which shows first a short
summary (which rank died, which ranks never reached the collective, whether the group
can still be used), then one rank's traceback without library frames, and the other
ranks' tracebacks folded under one line.
"""
from __future__ import annotations

import re
import sys
from typing import Any, Callable

from helpers.runtime.folded import Folded
from helpers.runtime.tracebacks import short_traceback

# (pattern in the error text, what it means, does the group survive it?)
_DIED = "its engine process died (re-run the start cell for a full set of ranks)"
_KNOWN = [
    (r"died while running|EngineError|engine .* died", _DIED, False),
    (r"Detected mismatch between collectives",
     "the ranks called the collective with different arguments "
     "(shape, dtype or op: see TensorShape/TensorDtypes below)", True),
    (r"invalid root rank|Invalid (src|dst)|not part of group|rank .* out of range",
     "src/dst must be a rank of the group: 0 .. world_size-1", True),
    (r"Incorrect input list size|Incorrect output list size|Requires .*list",
     "a scatter/gather list must hold world_size tensors", False),
    (r"invalid tensor size|Tensor list input to .* must .* same|must have the same",
     "every tensor in the list must have the shape of the receiving tensor", False),
    (r"failed to pass monitoredBarrier",
     "some ranks never reached this collective", False),
    (r"Connection closed by peer|Connection reset|pair closure",
     "a peer rank went away (it died or gave up waiting)", False),
    (r"Timed out|timed out|Timeout",
     "it waited the whole collective timeout for its peers", False),
]


history: list[dict] = []  # every diagnosis shown in this kernel, oldest first


def classify_failure(text: str) -> tuple[str, bool]:
    """(what the error means, whether the process group is still usable)."""
    for pattern, meaning, survives in _KNOWN:
        if re.search(pattern, text):
            return meaning, survives
    return "an error in the cell's code", True


def missing_ranks(text: str) -> list[int]:
    """Ranks a monitored barrier names as absent ("Ranks 2, 3 failed to pass ...")."""
    match = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", text)
    return [int(r) for r in re.findall(r"\d+", match.group(1))] if match else []


def failures(error: Any, rank_of_engine: dict[int, int]) -> list[tuple[int, str, Any, str]]:
    """(rank, error name, error value, traceback text) per failed engine, in the order
    ipyparallel lists them (a dead engine's rank comes from "Engine N died")."""
    elist = getattr(error, "elist", None)
    if elist is None and hasattr(error, "ename"):  # a RemoteError: one engine's failure
        elist = [(error.ename, error.evalue, getattr(error, "traceback", None),
                  getattr(error, "engine_info", {}))]
    found = []
    for ename, evalue, tb, info in elist or []:
        died = re.search(r"Engine (\d+) died", f"{ename}: {evalue}")
        engine_id = int(died.group(1)) if died else (info or {}).get("engine_id", -1)
        found.append((rank_of_engine.get(engine_id, engine_id), ename, evalue, tb or ""))
    return found


def diagnose(error: Any, rank_of_engine: dict[int, int],
             targets: list[int] | None = None) -> dict:
    """What a CompositeError says, by rank.

    {"failed": [{"rank", "meaning", "error"}], "skipped": ranks that did not run the
    cell, "absent": ranks a monitored barrier missed, "group_usable": bool}
    """
    failed: dict[int, dict] = {}
    absent: set[int] = set()
    for rank, ename, evalue, _tb in failures(error, rank_of_engine):
        text = f"{ename}: {evalue}"
        meaning, survives = classify_failure(text)
        first_line = next((ln for ln in str(evalue).splitlines() if ln.strip()), "")
        failed[rank] = {"rank": rank, "meaning": meaning, "survives": survives,
                        "error": f"{ename}: {first_line}"[:300]}
        absent.update(missing_ranks(text))
    absent -= {rank for rank, f in failed.items() if f["meaning"] == _DIED}
    all_ranks = sorted(rank_of_engine.values())
    ran = sorted(rank_of_engine[e] for e in targets if e in rank_of_engine) if targets else all_ranks
    return {
        "failed": [failed[r] for r in sorted(failed)],
        "skipped": sorted(set(all_ranks) - set(ran)),
        "absent": sorted(absent),
        "group_usable": all(f["survives"] for f in failed.values()),
    }


def describe_diagnosis(diagnosis: dict) -> str:
    """The diagnosis as a few lines for the notebook: ✗ per failed rank, then the way on."""
    if not diagnosis["failed"]:
        return ""
    lines = ["What happened, by rank:"]
    lines += [f"  ✗ rank {f['rank']}: {f['meaning']}" for f in diagnosis["failed"]]
    if diagnosis["skipped"]:
        lines.append(f"  {_ranks(diagnosis['skipped'])} did not run this cell: a collective "
                     "must be called by every rank of its group")
    elif diagnosis["absent"]:
        lines.append(f"  {_ranks(diagnosis['absent'])} never reached the collective")
    if diagnosis["group_usable"]:
        lines.append("The process group is fine: fix the cell and run it again.")
    else:
        lines.append("The process group cannot be trusted after this: re-run the start cell "
                     "(it starts a fresh set of engines), then this cell.")
    return "\n".join(lines)


def _ranks(ranks: list[int]) -> str:
    """"rank 2" or "ranks 2, 3"."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


# What a rank that only waited or lost its peer says: another rank's error explains more.
SECONDARY = {_DIED, "a peer rank went away (it died or gave up waiting)",
              "it waited the whole collective timeout for its peers"}


def first_to_read(diagnosis: dict, tracebacks: dict[int, str]) -> int:
    """The rank whose traceback explains the failure best: the first that did more than
    wait for its peers, time out or die, else the first with a traceback."""
    with_text = [f["rank"] for f in diagnosis["failed"] if tracebacks.get(f["rank"])]
    primary = [f["rank"] for f in diagnosis["failed"]
               if f["meaning"] not in SECONDARY and f["rank"] in with_text]
    return (primary or with_text or [diagnosis["failed"][0]["rank"]])[0]


def rank_traceback(rank: int, ename: str, evalue: Any, tb: str) -> list[str]:
    """One rank's traceback as shown: a header line, its own frames, the message. A rank
    whose engine died has no traceback of its own: ipyparallel's EngineError is raised in
    the client (its frames, a task id), so one line says what happened instead."""
    if ename == "EngineError":
        return [f"rank {rank} · its engine process ended while running the cell: no "
                f"traceback (the process is gone)"]
    lines = short_traceback(tb) if tb.strip() else [f"{ename}: {evalue}"]
    return [f"rank {rank} · {ename} (most recent call last):", *lines]


# Who explains a %%px cell that ■ stopped (KeyboardInterrupt, or ipyparallel's "result not
# ready"): helpers/debugging/interrupted.show, registered by helpers/debugging/waiting.py;
# each returns whether it showed something.
INTERRUPT_REPORTS: list[Callable[[Any, Any], bool]] = []


def show_with_diagnosis(current: Callable[[], Any]) -> Callable:
    """An IPython custom exception handler: the diagnosis first, then one rank's
    traceback (its own frames only), then the other ranks' tracebacks, folded."""
    def handler(shell, etype, value, tb, tb_offset=None):
        cluster = current()
        if issubclass(etype, (KeyboardInterrupt, TimeoutError)):
            if not any(explain(shell, cluster) for explain in INTERRUPT_REPORTS):
                shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return None
        diagnosis = None
        if cluster is not None:
            magics = shell.magics_manager.registry.get("ParallelMagics")
            last = getattr(magics, "last_result", None)
            targets = list(getattr(last, "_targets", None) or []) or None
            rank_of_engine = {r.engine_id: r.rank for r in cluster.ranks}
            diagnosis = diagnose(value, rank_of_engine, targets)
        if not diagnosis or not diagnosis["failed"]:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return None
        history.append(diagnosis)
        print(describe_diagnosis(diagnosis))
        sys.stdout.flush()   # before the traceback, which does not pass through stdout
        by_rank = {rank: (ename, evalue, text)
                   for rank, ename, evalue, text in failures(value, rank_of_engine)}
        shown = first_to_read(diagnosis, {r: t for r, (_, _, t) in by_rank.items()})
        if shown not in by_rank:        # no rank sent a traceback: IPython's own
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return None
        shell._showtraceback(etype, value, rank_traceback(shown, *by_rank[shown]))
        others = [r for r in sorted(by_rank) if r != shown]
        if others:
            from IPython.display import display

            body = "\n\n".join("\n".join(rank_traceback(r, *by_rank[r])) for r in others)
            display(Folded(f"the other ranks' tracebacks: {_ranks(others)}", body))
        return None

    return handler
