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

from helpers.collectives import model_check, models
from helpers.figures import plots
from helpers.formatting import one_line
from helpers.checks import Report
from helpers.records import make_record, record_from_states


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


def report_pairs(records: Sequence[dict], swapped: Sequence[Mapping] = ()) -> Report:
    """One ✓/✗ line per send_recv record: what dst received, checked by the model; then,
    from `swapped` (pulled states {"rank", "swapped": {elements: ok}}), one per exchange
    a rank checked itself."""
    verdicts = Report()
    for record in records:
        src, dst = record["params"]["src"], record["params"]["dst"]
        ok = all(model_check.check(record))
        by_rank = {r["rank"]: r for r in record["ranks"]}
        got = by_rank[dst]["after"]["tensor"]
        line = f"rank {dst} received {one_line(got)}"
        if not ok:
            expected = models.expected_after(record)
            line += (f" (model: {one_line(expected[dst]['tensor'])}; rank {src} holds "
                     f"{one_line(by_rank[src]['after']['tensor'])})")
        verdicts.add(f"{src} → {dst}", ok, line)
    for state in swapped:
        for elements, ok in state["swapped"].items():
            verdicts.add(state["rank"], ok, f"{elements:>7} elements: received its peer's outbox")
    return verdicts


def received_by_rank(records: Sequence[dict], world_size: int) -> list[Any]:
    """Per rank: the tensor it received (None where it received nothing), for
    `grade(prediction, received_by_rank(...), "tensor")`."""
    out: list[Any] = [None] * world_size
    for record in records:
        dst = record["params"]["dst"]
        by_rank = {r["rank"]: r for r in record["ranks"]}
        out[dst] = by_rank[dst]["after"]["tensor"]
    return out


def plot_transfers(cluster: Any, title: str, before: str = "before", after: str = "after"):
    """Every rank's buffers before → after an exchange, one panel per rank."""
    record = make_record(cluster, "batch_isend_irecv", before=before, after=after)
    return plots.plot_record(record, title=title)
