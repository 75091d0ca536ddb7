"""Bytes on the wire per collective: measured on every rank, beside the model (notebook 11).

    rows = cluster.apply(measure_traffic, "all_reduce", 65536)   # on every rank
    traffic_row(rows)          # in the notebook: per rank measured, model, who sent to whom

The model is `helpers.bench.nccl_tests.model_sent`: what one rank sends when the
collective runs as NCCL's ring (or, for all_to_all, gather and scatter, its sends). `measure_traffic` counts what the rank's process really
wrote (helpers.bench.wire): on gloo, the backend in use without GPUs.

From a shell (rank 0 prints one table):

    torchrun --standalone --nproc_per_node 4 -m helpers.bench.traffic --sizes 8,64K,8M
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

from helpers.bench.nccl_tests import ROOT_RANK, model_sent
from helpers.checks import Report
from helpers.bench.wire import HEADER_BYTES, agrees, header_bound

# Collectives whose gloo algorithm moves what the model says (ring or point to point).
RING_LIKE = ("all_reduce", "all_gather", "all_to_all", "gather", "scatter")


# ---------------------------------------------------------------- on every rank

def measure_traffic(collective: str, size_bytes: int, dtype: str = "float32",
                    repeats: int = 2) -> dict:
    """What this rank writes in one call of `collective` at nccl-tests' size S, `repeats` times.

    One untimed call first (connections warm), then each measured call after a barrier.
    Returns collective, bytes (S), world_size, rank, backend, sent (one figure per
    repeat; None on NCCL) and sockets (the last repeat's bytes per connection).
    """
    import torch
    import torch.distributed as dist

    from helpers.bench import measurement, nccl_tests
    from helpers.bench.wire import on_the_wire

    n = dist.get_world_size()
    plan = nccl_tests.plan(collective, size_bytes, n, nccl_tests.DTYPE_SIZES[dtype])
    call = measurement._call(collective, plan, getattr(torch, dtype),
                             measurement.OPS["sum"], measurement._device())
    call()
    sent, sockets = [], {}
    for _ in range(repeats):
        dist.barrier()
        with on_the_wire() as wire:
            call()
        sent.append(wire.sent)
        sockets = wire.sockets
    return {"collective": collective, "bytes": plan.bytes, "world_size": n,
            "rank": dist.get_rank(), "backend": str(dist.get_backend()),
            "sent": sent, "sockets": sockets}


def measure_all(collectives: Sequence[str], sizes: Sequence[int], dtype: str = "float32",
                repeats: int = 2) -> list[dict]:
    """measure_traffic for every (collective, size), in that order."""
    return [measure_traffic(c, s, dtype, repeats) for c in collectives for s in sizes]


# ---------------------------------------------------------------- in the notebook

def traffic_row(ranks: Sequence[dict]) -> dict:
    """Every rank's measure_traffic of one point → one row: measured and model per rank.

    `matrix[i][j]`: bytes rank i wrote to rank j (last repeat); `other`: bytes on
    connections to no rank (0 expected); `steady`: every repeat wrote the same.
    """
    from helpers.bench.wire import peer_matrix

    first = ranks[0]
    n, size = first["world_size"], first["bytes"]
    measured = [r["sent"][-1] for r in ranks]
    matrix, other = (peer_matrix([r["sockets"] for r in ranks]) if measured[0] is not None
                     else (None, None))
    return {"collective": first["collective"], "bytes": size, "world_size": n,
            "backend": first["backend"], "measured": measured,
            "model": [model_sent(first["collective"], size, n, r) for r in range(n)],
            "matrix": matrix, "other": other,
            "steady": all(len(set(r["sent"])) == 1 for r in ranks)}


def traffic_rows(per_rank: Sequence[Sequence[dict]]) -> list[dict]:
    """cluster.apply(measure_all, ...)'s per-rank lists → one traffic_row per point."""
    return [traffic_row(list(point)) for point in zip(*per_rank)]


def tree_children(rank: int, n: int, root: int = ROOT_RANK) -> list[int]:
    """The ranks `rank` sends to in gloo's binomial broadcast (gloo/broadcast.cc).

    In ranks counted from the root, v sends to v + 2^i for every 2^i > v (below n).
    """
    v, children, step = (rank - root) % n, [], 1
    while step < n:
        if v < step and v + step < n:
            children.append((v + step + root) % n)
        step *= 2
    return children


def _check_row(row: dict, rows: Sequence[dict] = ()) -> tuple[bool, str]:
    """Is one point what gloo's algorithm for the collective writes? (ok, what it saw)

    `rows`: the other points measured with it; reduce_scatter is held against the
    all_reduce of the same S when there is one (to the byte), else the all_reduce model.
    """
    c, size, n = row["collective"], row["bytes"], row["world_size"]
    measured, model, matrix = row["measured"], row["model"], row["matrix"]
    if c in RING_LIKE:
        ok = all(agrees(m, mo, 1, n) for m, mo in zip(measured, model))
        worst = max(m - mo for m, mo in zip(measured, model))
        return ok, f"model + at most {worst:.0f} B of headers per rank"
    if c == "reduce_scatter":
        twin = next((r for r in rows if r["collective"] == "all_reduce"
                     and r["bytes"] == size), None)
        if twin is not None:
            ok, against = measured == twin["measured"], "the all_reduce of the same S"
        else:
            as_all_reduce = [model_sent("all_reduce", size, n, r) for r in range(n)]
            ok = all(agrees(m, a, 1, n) and m > mo + header_bound(1, n, mo)
                     for m, a, mo in zip(measured, as_all_reduce, model))
            against = "an all_reduce's model"
        return ok, (f"{measured[0] / size:.2f}·S per rank, {measured[0] / model[0]:.2f}× "
                    f"the ring model: {'as' if ok else 'NOT as'} {against}")
    if c == "broadcast":
        edges = {(p, q) for p in range(n) for q in tree_children(p, n)}
        ok = all(matrix[p][q] >= size if (p, q) in edges else
                 matrix[p][q] <= header_bound(1, n)
                 for p in range(n) for q in range(n) if p != q)
        return ok, "a binomial tree: " + ", ".join(f"{p}→{q}" for p, q in sorted(edges))
    if c == "reduce":
        ok = (measured[ROOT_RANK] >= (n - 1) / n * size
              and all(m >= size for r, m in enumerate(measured) if r != ROOT_RANK))
        return ok, (f"root {measured[ROOT_RANK] / size:.2f}·S (model 0), others "
                    f"{min(m for r, m in enumerate(measured) if r != ROOT_RANK) / size:.2f}·S"
                    " and up: a ring reduce-scatter, then each chunk to the root")
    return False, f"no expectation for {c}"


def check_traffic(rows: Sequence[dict]) -> Report:
    """✓/✗ per point: measured against what gloo's algorithm for the collective writes."""
    report = Report("bytes on the wire against each collective's algorithm on gloo")
    for row in rows:
        label = f"{row['collective']:<15}{row['bytes']:>9} B"
        if row["measured"][0] is None:
            report.note(f"{label}  not measured ({row['backend']}: the figures are the model)")
        elif row["world_size"] < 2 or row["bytes"] == 0:
            report.note(f"{label}  nothing to move")
        else:
            ok, seen = _check_row(row, rows)
            report.add(label, ok, seen)
    return report


def report_calibration(ranks: Sequence[dict], size: int) -> Report:
    """The meter's calibration: a quiet rank writes 0 B; a send of S, S + 96 and 48 B back."""
    report = Report(f"calibration: a rank that only waits, and rank 0 sending {size} B to rank 1")
    for r in ranks:
        if r["quiet"] is None:
            report.note(f"rank {r['rank']}: not measured (the figures are the model)")
            continue
        want = {0: size + 2 * HEADER_BYTES, 1: HEADER_BYTES}.get(r["rank"], 0)
        report.add(r["rank"], r["quiet"] == 0 and r["send"] == want,
                   f"waiting: {r['quiet']} B; the send: {r['send']} B (S + headers: {want} B)")
    return report


def traffic_table(rows: Sequence[dict]) -> str:
    """Per point: S, and per rank measured bytes / model bytes (and measured ÷ S)."""
    n = rows[0]["world_size"]
    lines = [f"{'collective':<15}{'S (B)':>10}  " + "  ".join(
        f"{'rank ' + str(r) + ': measured / model':>30}" for r in range(n))]
    for row in rows:
        cells = []
        for measured, model in zip(row["measured"], row["model"]):
            text = "not measured" if measured is None else f"{measured}"
            ratio = "" if measured is None or not row["bytes"] else \
                f" ({measured / row['bytes']:.2f}·S)"
            cells.append(f"{text + ratio + ' / ' + format(model, '.0f'):>30}")
        lines.append(f"{row['collective']:<15}{row['bytes']:>10}  " + "  ".join(cells))
    return "\n".join(lines)


# ---------------------------------------------------------------- the command

def main(argv: Sequence[str] | None = None) -> int:
    """torchrun entry point: measured and model bytes per rank; rank 0 prints the table."""
    import torch.distributed as dist

    from helpers.bench import measurement

    p = argparse.ArgumentParser(
        prog="torchrun --standalone --nproc_per_node N -m helpers.bench.traffic",
        description="Bytes each rank writes per collective call (gloo), beside the ring model.")
    p.add_argument("--collectives", type=measurement._collective_list,
                   default=["all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                            "broadcast", "reduce", "gather", "scatter"])
    p.add_argument("--sizes", default="8,64K,8M",
                   help="comma-separated sizes S (K/M/G: powers of 1024; default 8,64K,8M)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    sizes = [measurement.parse_size(s) for s in args.sizes.split(",")]
    measurement._init("gloo", 300.0)
    try:
        mine = measure_all(args.collectives, sizes, repeats=args.repeats)
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        if dist.get_rank() == 0:
            rows = traffic_rows(everyone)
            print(f"# bytes written per rank, world size {dist.get_world_size()}, gloo "
                  f"(measured: helpers.bench.wire; model: helpers.bench.nccl_tests.model_sent)")
            print(traffic_table(rows))
            if not all(row["steady"] for row in rows):
                print("# note: some repeats differed", file=sys.stderr)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
