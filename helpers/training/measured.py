"""Bytes in notebooks 14–19, one way everywhere: measured on gloo beside the ring model.

    ok, text = measured_vs_model(measured, model, calls, n)   # a line of a Report
    report.add(rank, ok, text)     # ✓/✗ on gloo; ✎ on NCCL, whose bytes nobody measures
    p2p_check(measured, model, sends=8, recvs=8)              # exact: S + 96 B a send, 48 a recv

**Measured** is what a rank's process wrote to its connections to the other ranks
(`helpers.bench.wire`, via `count_collectives`); **model** is what the calls send when run as
NCCL runs them as rings (`helpers.bench.nccl_tests.model_sent`; its tuner may pick other
algorithms, which nothing here measures; S for a
send of S bytes). They agree when the measurement is the model plus gloo's 48-byte
message headers (`helpers.bench.wire.agrees`, the stated tolerance). Where gloo runs another
algorithm (its reduce_scatter writes what an all_reduce writes), the notebooks assert that
documented difference instead (`reduce_scatter_as_all_reduce`). On NCCL nothing is
measured (`measured` is None) and the notebooks say so with `NOT_MEASURED`.
"""
from __future__ import annotations

from helpers.bench.wire import HEADER_BYTES, agrees

NOT_MEASURED = ("not measured: NCCL's bytes pass through no socket of the process; the "
                "figure is the model (`make gpu-check` lists what would measure it)")

# A send of S bytes on gloo: the sender writes S and two 48-B headers, the receiver one
# header back (tests/helpers/test_wire.py measures it at 8 B, 64 KiB and 8 MiB).
SEND_HEADERS, RECV_HEADERS = 2, 1


def bytes_text(value: float | None) -> str:
    """A byte count with thousands separators; "not measured" for None (NCCL)."""
    return "not measured" if value is None else f"{value:,.0f}"


def per_step(total: float | None, steps: int) -> float | None:
    """A whole block's bytes as bytes per step; None (NCCL: not measured) stays None."""
    return None if total is None else total / steps


def header_share(measured: float, model: float) -> float:
    """The part of what was measured that the model does not count (gloo's headers)."""
    return (measured - model) / measured if measured else 0.0


def measured_vs_model(measured: float | None, model: float, calls: int, n: int,
                      what: str = "") -> tuple[bool | None, str]:
    """(verdict, text) for a Report: does the measurement agree with the model plus headers?

    None as the verdict where nothing was measured (NCCL), with the model alone. A group of
    one rank, or a block with no call, must write nothing at all: there the check is exact.
    """
    label = f"{what}: " if what else ""
    if measured is None:
        return None, f"{label}model {model:,.0f} B; {NOT_MEASURED}"
    if n < 2 or calls == 0:
        return measured == 0, f"{label}measured {measured:,.0f} B, model {model:,.0f} B " \
                              "(nothing to send)"
    return agrees(measured, model, calls, n), (
        f"{label}measured {measured:,.0f} B, model {model:,.0f} B "
        f"(+{measured - model:,.0f} B of headers, {header_share(measured, model):.0%})")


def as_gloo_runs(name: str, model: float) -> float:
    """One call's ring model as gloo runs it: a reduce_scatter (any of its functions) is an
    all_reduce of its input on gloo, twice the ring's (n−1)/n·S (notebook 11)."""
    return 2 * model if "reduce_scatter" in name else model


def reduce_scatter_as_all_reduce(measured: float | None, model: float, n: int,
                                 what: str = "reduce_scatter") -> tuple[bool | None, str]:
    """(verdict, text): gloo's reduce_scatter writes what an all_reduce of its input writes.

    gloo all-reduces the whole input and keeps this rank's piece (notebook 11, section
    "What each rank really sends"), so the measurement agrees with the all_reduce's ring
    model, 2(n−1)/n·S, twice the reduce_scatter's (n−1)/n·S = `model`. For one call of
    64 KiB or more this fails if gloo sends the ring's (n−1)/n·S: headers cannot make up
    the difference.
    """
    label = f"{what}: " if what else ""
    if measured is None:
        return None, f"{label}model {model:,.0f} B; {NOT_MEASURED}"
    as_all_reduce = as_gloo_runs("reduce_scatter", model)
    return agrees(measured, as_all_reduce, 1, n), (
        f"{label}measured {measured:,.0f} B = {measured / model:.2f}× its ring model "
        f"{model:,.0f} B: what an all_reduce of the same input writes on gloo "
        f"({as_all_reduce:,.0f} B + headers)")


def p2p_expected(model: float, sends: int, recvs: int) -> float:
    """What gloo writes for point-to-point traffic: the payload, 96 B a send, 48 B a recv."""
    return model + HEADER_BYTES * (SEND_HEADERS * sends + RECV_HEADERS * recvs)


def p2p_check(measured: int | None, model: float, sends: int, recvs: int) -> tuple[bool, str]:
    """Exact: measured = payload + 2 headers a send + 1 header a receive (gloo)."""
    if measured is None:
        return False, NOT_MEASURED
    expected = p2p_expected(model, sends, recvs)
    return measured == expected, (
        f"{sends} sends, {recvs} recvs: model {model:,.0f} B, measured {measured:,} B "
        + ("=" if measured == expected else "≠") + f" model + 96 × {sends} + 48 × {recvs}")


def per_rank_text(texts: list[str]) -> str:
    """One text for every rank when they are all the same, else each rank's under its name."""
    if len(set(texts)) == 1:
        return f"(every rank)\n{texts[0]}"
    return "\n".join(f"rank {rank}:\n{text}" for rank, text in enumerate(texts))
