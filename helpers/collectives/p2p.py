"""Records, checks and figures for point-to-point calls (notebook 09).

A send and its matching recv are recorded as one "send_recv" record (see
helpers.collectives.models): rank src's "tensor" is what it sent, rank dst's is its recv
buffer, and the other ranks' "tensor" is null. An exchange in which every rank
sends one tensor and receives one (a ring shift) is one record per (src, dst)
pair, built from each rank's `before`/`after` snapshots of two buffers: the one
it sends (`outbox`) and the one it receives into (`inbox`).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from helpers import checks
from helpers.collectives import models
from helpers.figures import plots
from helpers.formatting import one_line
from helpers.checks import Report
from helpers.records import first_tensor, plain_values, record_from_states


def _tensor(state: Mapping[str, Any] | None, name: str) -> Any:
    """One buffer of a gathered snapshot, or None when the rank has none."""
    return None if state is None else state.get(name)


def pair_records(cluster: Any, pairs: Sequence[tuple[int, int]], sent: str = "outbox",
                 received: str = "inbox", before: str = "before",
                 after: str = "after") -> list[dict]:
    """One send_recv record per (src, dst) pair, from one gather of the snapshots.

    Rank src contributes its `sent` buffer, rank dst its `received` buffer; the
    other ranks take no part in that pair (tensor null).
    """
    states = cluster.pull(before, after)
    records = []
    for src, dst in pairs:
        if src == dst:
            raise ValueError(f"a send_recv pair needs two different ranks, got {src} → {dst}")
        per_rank = []
        for r, state in enumerate(states):
            name = sent if r == src else received if r == dst else None
            per_rank.append({key: {"tensor": _tensor(state[side], name) if name else None}
                             for key, side in (("before", before), ("after", after))})
        records.append(record_from_states(cluster, "send_recv", {"src": src, "dst": dst},
                                          per_rank))
    return records


def shift_records(cluster: Any, shift: int = 1, **names: str) -> list[dict]:
    """The records of a ring shift: rank r sent its outbox to rank (r + shift) mod n."""
    n = cluster.world_size
    return pair_records(cluster, [(r, (r + shift) % n) for r in range(n)], **names)


def report_pairs(records: Sequence[dict]) -> Report:
    """One ✓/✗ line per send_recv record: what dst received, checked by the model."""
    verdicts = Report()
    for record in records:
        src, dst = record["params"]["src"], record["params"]["dst"]
        ok = all(checks.check(record))
        by_rank = {r["rank"]: r for r in record["ranks"]}
        got = by_rank[dst]["after"]["tensor"]
        line = f"{src} → {dst} {'✓' if ok else '✗'}  rank {dst} received {one_line(got)}"
        if not ok:
            expected = models.expected_after(record)
            line += (f" (model: {one_line(expected[dst]['tensor'])}; rank {src} holds "
                     f"{one_line(by_rank[src]['after']['tensor'])})")
        verdicts.line(line, ok)
    return verdicts


def received_by_rank(records: Sequence[dict], world_size: int) -> list[dict]:
    """Per rank: {"tensor": what it received} (None where it received nothing).

    The after-states for `check_prediction(prediction, received_by_rank(...), "tensor")`.
    """
    out: list[dict] = [{"tensor": None} for _ in range(world_size)]
    for record in records:
        dst = record["params"]["dst"]
        by_rank = {r["rank"]: r for r in record["ranks"]}
        out[dst] = {"tensor": by_rank[dst]["after"]["tensor"]}
    return out


def plot_transfers(cluster: Any, title: str, before: str = "before", after: str = "after"):
    """Every rank's buffers before → after an exchange, one panel per rank."""
    states = cluster.pull(before, after)
    tensor = first_tensor([s[before] for s in states])
    return plots.plot_states(
        "batch_isend_irecv", [plain_values(s[before]) for s in states],
        [plain_values(s[after]) for s in states], backend=cluster.backend,
        devices=[info.device for info in cluster.ranks],
        dtype=tensor["dtype"] if tensor else None, title=title)
