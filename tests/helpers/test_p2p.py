"""helpers.collectives.p2p (notebook 09) without engines: the records of an exchange, their
check, what each rank received, the figure."""
from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import pytest

from helpers import checks
from helpers.collectives.model_check import check
from helpers.collectives import p2p
from notebook_runner import printed
from verdicts import verdict

report_pairs = printed(p2p.report_pairs)


def _tensor(values):
    import torch   # what cluster.pull hands back: a CPU tensor

    return torch.tensor(values, dtype=torch.float32)


class FakeCluster:
    """What the p2p helpers use of a TutorialCluster: gather, ranks, backend, world size."""

    backend = "gloo"

    def __init__(self, states):
        self.states = states
        self.world_size = len(states)
        self.ranks = [SimpleNamespace(rank=r, device="cpu") for r in range(self.world_size)]

    def pull(self, *names):
        return [{"rank": r, **{n: s[n] for n in names}} for r, s in enumerate(self.states)]


def _shift_states(n, shift, wrong_rank=None):
    states = []
    for r in range(n):
        src = (r - shift) % n
        inbox = [10.0 * src + 1, 10.0 * src + 2]
        if r == wrong_rank:
            inbox = [0.0, 0.0]
        out = [10.0 * r + 1, 10.0 * r + 2]
        states.append({"before": {"outbox": _tensor(out), "inbox": _tensor([0.0, 0.0])},
                       "after": {"outbox": _tensor(out), "inbox": _tensor(inbox)}})
    return states


def test_shift_records_report_and_prediction(capsys):
    cluster = FakeCluster(_shift_states(3, -1))
    records = p2p.shift_records(cluster, shift=-1)
    assert [(r["params"]["src"], r["params"]["dst"]) for r in records] == [(0, 2), (1, 0), (2, 1)]
    first = records[0]
    assert first["collective"] == "send_recv" and first["dtype"] == "float32"
    assert [r["before"]["tensor"] for r in first["ranks"]] == [[1.0, 2.0], None, [0.0, 0.0]]
    assert [r["after"]["tensor"] for r in first["ranks"]] == [[1.0, 2.0], None, [1.0, 2.0]]
    assert report_pairs(records) == [True] * 3
    assert capsys.readouterr().out.splitlines() == [
        "0 → 2 ✓  rank 2 received [1.0, 2.0]", "1 → 0 ✓  rank 0 received [11.0, 12.0]",
        "2 → 1 ✓  rank 1 received [21.0, 22.0]"]
    got = p2p.received_by_rank(records, 3)
    assert got == [[11.0, 12.0], [21.0, 22.0], [1.0, 2.0]]
    assert checks.grade([[11.0, 12.0], [21.0, 22.0], [1.0, 2.0]], got, "tensor") == [True] * 3
    assert p2p.received_by_rank(records[:1], 3) == [None, None, [1.0, 2.0]]
    swapped = [{"rank": 0, "swapped": {2: True, 1 << 20: True}}, {"rank": 1, "swapped": {2: False}},
               {"rank": 2, "swapped": {}}]
    shown = report_pairs(records, swapped)
    assert shown == [True] * 3 + [True, True, False]
    last = shown.lines[-1]
    assert (last.rank, last.ok) == (1, False) and last.text.split()[:2] == ["2", "elements:"]

    bad = p2p.shift_records(FakeCluster(_shift_states(3, 1, wrong_rank=1)), shift=1)
    shown = report_pairs(bad)
    assert shown == [False, True, True]  # rank 1 receives in 0 → 1
    wrong = verdict(shown, "0 → 1")
    assert wrong.ok is False and "received [0.0, 0.0] (model: [1.0, 2.0]" in wrong.text


def test_pair_records_of_an_exchange_between_two_of_four_ranks():
    states = _shift_states(2, 1) + [{"before": {"outbox": None, "inbox": None},
                                     "after": {"outbox": None, "inbox": None}}] * 2
    records = p2p.pair_records(FakeCluster(states), [(0, 1), (1, 0)])
    assert all(all(check(r)) for r in records)
    assert [r["after"]["tensor"] for r in records[1]["ranks"]] == [[11.0, 12.0], [11.0, 12.0], None, None]
    with pytest.raises(ValueError, match="two different ranks"):
        p2p.pair_records(FakeCluster(states), [(1, 1)])


def test_plot_exchange_draws_every_rank():
    fig = p2p.plot_transfers(FakeCluster(_shift_states(4, 1)), "ring shift")
    assert sorted(ax.get_gid() for ax in fig.axes) == [f"rank{r}" for r in range(4)]
