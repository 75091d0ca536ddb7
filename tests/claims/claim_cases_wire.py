"""The ledger's gloo cases about bytes on the wire (notebooks 10 and 11), run for real.

Each case measures, on every disposable rank, what its process wrote to the other ranks
during collective calls (helpers.bench.traffic.measure_traffic, helpers.bench.wire); its
expectation puts the ranks together (who wrote to whom) and fails when gloo's algorithm
for the collective changes. Registered in claim_cases.CASES (tests/claims/test_claims.py).
"""
from __future__ import annotations

from claim_cases import _returned, case, expect
from helpers.bench.nccl_tests import model_sent
from helpers.bench.traffic import traffic_row, tree_children
from helpers.bench.wire import HEADER_BYTES, agrees, header_bound

SIZES = (64 * 1024, 1024 * 1024)


def _rows(outcomes, collective):
    """One traffic_row per size for `collective`, from every rank's measurements."""
    per_rank = [_returned(o)[collective] for o in outcomes]
    return [traffic_row([mine[i] for mine in per_rank]) for i in range(len(per_rank[0]))]


@case("11-ring-and-direct-collectives-agree", sizes=(2, 4))
def ring_and_direct(rank, world_size):
    from helpers.bench.traffic import measure_traffic
    names = ("all_reduce", "all_gather", "all_to_all", "gather", "scatter")
    return {c: [measure_traffic(c, s) for s in (64 * 1024, 1024 * 1024)] for c in names}


@expect("11-ring-and-direct-collectives-agree")
def _(outcomes, n):
    for collective in ("all_reduce", "all_gather", "all_to_all", "gather", "scatter"):
        for row in _rows(outcomes, collective):
            assert row["steady"] and row["other"] == [0] * n, row
            for m, mo in zip(row["measured"], row["model"]):
                assert agrees(m, mo, 1, n), (collective, row["bytes"], row["measured"])
    # where the data goes: all_reduce to rank r - 1, all_gather to rank r + 1
    for collective, step in (("all_reduce", -1), ("all_gather", +1)):
        for row in _rows(outcomes, collective):
            for r in range(n):
                for peer in range(n):
                    if peer != r and peer != (r + step) % n:
                        assert row["matrix"][r][peer] <= header_bound(1, n), (collective, row)


@case("11-all-reduce-ring-at-every-size", sizes=(2, 4))
def all_reduce_every_size(rank, world_size):
    from helpers.bench.traffic import measure_traffic
    return {"all_reduce": [measure_traffic("all_reduce", s) for s in (8, 256, 65536, 1 << 20)]}


@expect("11-all-reduce-ring-at-every-size")
def _(outcomes, n):
    for row in _rows(outcomes, "all_reduce"):
        # the payload goes to rank r - 1 only; others get at most headers
        for r in range(n):
            data = row["matrix"][r][(r - 1) % n]
            assert data >= row["model"][r] - 1 or row["bytes"] < 64, row
            rest = sum(row["matrix"][r]) - data
            assert rest <= header_bound(1, n), row


@case("11-reduce-scatter-writes-an-all-reduce", sizes=(2, 4))
def reduce_scatter_as_all_reduce(rank, world_size):
    from helpers.bench.traffic import measure_traffic
    sizes = (64 * 1024, 1024 * 1024)
    return {c: [measure_traffic(c, s) for s in sizes] for c in ("reduce_scatter", "all_reduce")}


@expect("11-reduce-scatter-writes-an-all-reduce")
def _(outcomes, n):
    for scattered, reduced in zip(_rows(outcomes, "reduce_scatter"), _rows(outcomes, "all_reduce")):
        assert scattered["bytes"] == reduced["bytes"]
        assert scattered["measured"] == reduced["measured"], (scattered, reduced)
        assert scattered["matrix"] == reduced["matrix"]        # the same neighbours too
        for m, mo in zip(scattered["measured"], scattered["model"]):
            assert m >= 1.95 * mo, (m, mo)                      # twice the ring model


@case("11-broadcast-binomial-tree", sizes=(2, 4))
def broadcast_tree(rank, world_size):
    from helpers.bench.traffic import measure_traffic
    return {"broadcast": [measure_traffic("broadcast", s) for s in (64 * 1024, 1024 * 1024)]}


@expect("11-broadcast-binomial-tree")
def _(outcomes, n):
    for row in _rows(outcomes, "broadcast"):
        size = row["bytes"]
        for p in range(n):
            for q in range(n):
                if q in tree_children(p, n):
                    want = size + 2 * HEADER_BYTES     # the data and the send notice
                elif p in tree_children(q, n):
                    want = HEADER_BYTES                # the child: ready to receive
                else:
                    want = 0
                assert row["matrix"][p][q] == want, (p, q, row["matrix"])
        assert row["measured"][0] == len(tree_children(0, n)) * (size + 2 * HEADER_BYTES)


@case("11-reduce-root-writes-too", sizes=(2, 4))
def reduce_root_writes(rank, world_size):
    from helpers.bench.traffic import measure_traffic
    return {"reduce": [measure_traffic("reduce", s) for s in (64 * 1024, 1024 * 1024)]}


@expect("11-reduce-root-writes-too")
def _(outcomes, n):
    for row in _rows(outcomes, "reduce"):
        size = row["bytes"]
        assert row["model"][0] == 0 and row["measured"][0] >= (n - 1) / n * size, row
        assert all(m >= size for m in row["measured"][1:]), row
        # the root's data goes around the ring (to rank n - 1), the others' to it too
        assert row["matrix"][0][n - 1] >= (n - 1) / n * size, row["matrix"]


@case("11-small-all-reduce-mostly-headers", sizes=(2, 4))
def small_all_reduce(rank, world_size):
    from helpers.bench.traffic import measure_traffic
    return {"all_reduce": [measure_traffic("all_reduce", 256)]}


@expect("11-small-all-reduce-mostly-headers")
def _(outcomes, n):
    (row,) = _rows(outcomes, "all_reduce")
    assert all(m >= 3 * 256 for m in row["measured"]), row
    assert all(m >= 2 * model_sent("all_reduce", 256, n, r)
               for r, m in enumerate(row["measured"])), row
