"""helpers.training.two_d_torch (torch's own 2-D composition), without engines (one
process; collectives on a one-rank gloo group; bytes per group from made-up connections)."""
from __future__ import annotations

import logging

import pytest
import torch
import torch.distributed as dist

from helpers.training import two_d_torch as two_d
from helpers.training.measured import NOT_MEASURED


def test_count_torch_collectives_notes_functional_calls_with_their_group(one_rank_group):
    import torch.distributed._functional_collectives as funcol

    original = funcol.all_reduce
    t = torch.ones(6, dtype=torch.float64)
    with two_d.count_torch_collectives() as log:
        out = funcol.all_reduce(t, "sum", dist.group.WORLD) * 1.0
        dist.all_reduce(t)
    assert funcol.all_reduce is original                   # put back after the block
    assert torch.equal(out, torch.ones(6, dtype=torch.float64))
    rows = log.rows(phase="p")
    assert [(r["name"], r["group"], r["size"], r["model"]) for r in rows] == [
        ("all_reduce (functional)", [0], 48, 0.0), ("all_reduce", [0], 48, 0.0)]
    assert rows[0]["measured"] is None                     # noted, not timed
    assert rows[1]["measured"] == 0                        # a one-rank group sends nothing
    # no byte on any connection: this process may still hold connections of groups that
    # earlier tests on this worker made (they show with 0 B), never one that carried data
    assert all(sent == 0 for sent in two_d.block_sockets(log).values())


def test_full_parameters_puts_dtensors_back_together_and_restores_the_logger(one_rank_group):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 4)
    want = {k: v.detach().clone() for k, v in layer.named_parameters()}
    parallelize_module(layer, init_device_mesh("cpu", (1,)), ColwiseParallel())
    quiet = logging.getLogger("torch.distributed.tensor._redistribute")
    level = quiet.level
    got = two_d.full_parameters(layer)
    assert quiet.level == level
    assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want)
    assert not any(isinstance(v, type(layer.weight)) for v in got.values())


def test_planned_torch_step_fsdp_on_the_column_g_on_the_row():
    plan = two_d.planned_torch_step(2, 2, 2, batch=48)
    sync = (4 * 8 + 4 + 4 * 4 + 4) * 8                    # the four tp shards of rank 2
    assert [(c["phase"], c["name"], c["group"], c["size"]) for c in plan] == [
        ("forward", "all_gather_single", [0, 2], sync),
        ("forward", "all_reduce (functional)", [2, 3], 24 * 4 * 8),
        ("backward", "reduce_scatter_single", [0, 2], sync)]
    # a column of one rank: FSDP2 calls nothing, only g is left
    assert [c["name"] for c in two_d.planned_torch_step(1, 1, 3, batch=48)] == [
        "all_reduce (functional)"]


def _sockets(sent: list[list[int]]) -> list[dict[str, int]]:
    """Every rank's connections ("local>remote" → bytes) for the bytes sent[i][j]."""
    n = len(sent)
    return [{f"127.0.0.1:{1000 + 10 * i + j}>127.0.0.1:{1000 + 10 * j + i}": sent[i][j]
             for j in range(n) if j != i} for i in range(n)]


def test_group_bytes_splits_each_ranks_bytes_by_row_and_column():
    # 2 × 2: rank 0's row-mate is 1, its column-mate 2, rank 3 neither
    sent = [[0, 10, 20, 1], [11, 0, 2, 21], [22, 3, 0, 12], [4, 23, 13, 0]]
    got = two_d.group_bytes(_sockets(sent), 2, 2)
    assert got == [{"tp": 10, "dp": 20, "other": 1}, {"tp": 11, "dp": 21, "other": 2},
                   {"tp": 12, "dp": 22, "other": 3}, {"tp": 13, "dp": 23, "other": 4}]
    # 1 × 3: every other rank is a row-mate
    line = [[0, 5, 6], [7, 0, 8], [9, 1, 0]]
    assert two_d.group_bytes(_sockets(line), 1, 3)[0] == {"tp": 11, "dp": 0, "other": 0}
    assert two_d.group_bytes([None, {}], 1, 2) == [None, None]     # NCCL: not measured


def test_step_group_bytes_sums_the_phases():
    a = _sockets([[0, 1, 2, 0], [1, 0, 0, 2], [2, 0, 0, 1], [0, 2, 1, 0]])
    b = _sockets([[0, 10, 0, 0], [10, 0, 0, 0], [0, 0, 0, 10], [0, 0, 10, 0]])
    states = [{"s": [a[r], b[r]]} for r in range(4)]
    assert two_d.step_group_bytes(states, "s", 2, 2) == [{"tp": 11, "dp": 2, "other": 0}] * 4
    assert two_d.step_group_bytes([{"s": [None]}, {"s": [None]}], "s", 1, 2) == [None, None]


EXECUTED_HAND = [{"name": "all_reduce", "group": [0, 1], "model": 768.0},
                 {"name": "all_reduce", "group": [0, 2], "model": 256.0},
                 {"name": "all_reduce", "group": [0, 2], "model": 192.0}]
EXECUTED_TORCH = [{"name": "all_gather_single", "group": [0, 2], "model": 224.0},
                  {"name": "all_reduce (functional)", "group": [0, 1], "model": 768.0},
                  {"name": "reduce_scatter_single", "group": [0, 2], "model": 224.0}]


def test_by_group_and_the_table():
    hand, theirs = (two_d.by_group(e, 0, 2, 2) for e in (EXECUTED_HAND, EXECUTED_TORCH))
    assert hand["tp"] == {"calls": 1, "model": 768.0, "names": ["all_reduce"]}
    assert hand["dp"]["calls"] == 2 and hand["dp"]["model"] == 448.0
    assert theirs["dp"]["names"] == ["all_gather_single", "reduce_scatter_single"]
    assert hand["other"]["calls"] == theirs["other"]["calls"] == 0
    text = two_d.group_table(hand, theirs, {"tp": 1344, "dp": 2000, "other": 0},
                             {"tp": 1344, "dp": 1536, "other": 0})
    assert "its column (dp group)" in text and "1,536" in text and "2,000" in text
    assert text.splitlines()[-1].split()[1:] == ["3", "1,216", "3,344", "3", "1,216", "2,880"]
    assert "not measured" in two_d.group_table(hand, theirs, None, None)
    # gloo's reduce_scatter writes an all_reduce's bytes: twice its ring model
    assert two_d.on_gloo(EXECUTED_TORCH) == 224 + 768 + 448


def test_group_bytes_report_checks_each_group_and_says_when_nothing_is_measured():
    states = [{"rank": 0, "t": EXECUTED_TORCH}]
    right = {"tp": 768 + 12 * 48, "dp": 672 + 18 * 48, "other": 0}
    assert two_d.group_bytes_report("t", states, "t", [right], 2, 2).oks == [True]
    for wrong in ({**right, "other": 1}, {**right, "dp": 600}, {**right, "tp": 0}):
        assert two_d.group_bytes_report("t", states, "t", [wrong], 2, 2).oks == [False]
    # a one-rank column: the calls on it must write nothing
    one = [{"rank": 0, "t": [{"name": "all_reduce", "group": [0], "model": 0.0}]}]
    assert two_d.group_bytes_report("t", one, "t", [{"tp": 0, "dp": 0, "other": 0}],
                                    1, 2).oks == [True]
    shown = two_d.group_bytes_report("t", states, "t", [None], 2, 2)
    assert shown.oks == [] and NOT_MEASURED in str(shown)


def test_rows_held_finds_each_row_by_value_and_refuses_ambiguity():
    full = torch.arange(12.0).reshape(4, 3)
    assert two_d.rows_held(full[[2, 0]], full) == [2, 0]
    assert two_d.rows_held(full[[1]] + 1e-14, full) == [1]
    with pytest.raises(ValueError, match="matches 0 rows"):
        two_d.rows_held(full[[1]] + 1.0 / 3, full)
    with pytest.raises(ValueError, match="matches 2 rows"):
        two_d.rows_held(full[[0]], torch.cat([full, full[[0]]]))


def test_plot_rows_held_draws_every_rank_s_rows():
    import matplotlib

    matplotlib.use("Agg")
    fig = two_d.plot_rows_held([[0, 1], [2, 3]], [[0], [3]], 4, "t")
    patches = [p for ax in fig.axes for p in ax.patches]
    assert sorted(p.get_gid() for p in patches) == ["rank:0"] * 3 + ["rank:1"] * 3
    assert "2 of 4 rows" in fig.axes[0].get_title() and "1 of 4" in fig.axes[1].get_title()
