"""helpers.training without engines: the toy problem, the collective counter (on a real
2-rank gloo group in subprocesses), the mesh plan, the ZeRO row split, the grading."""
from __future__ import annotations

import json
from pathlib import Path
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from ports import free_port

from helpers.bench.wire import agrees

from helpers.training import (data_parallel, measured, mesh, toy,
                              zero)


# ------------------------------------------------------------------ toy

def test_toy_is_deterministic_and_float64():
    (x1, y1), (x2, y2) = toy.make_data(), toy.make_data()
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and x1.dtype == torch.float64
    a, b = toy.make_mlp(), toy.make_mlp()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(next(toy.make_mlp(seed=1).parameters()), next(a.parameters()))


def test_shard_splits_evenly_and_refuses_uneven():
    X, _ = toy.make_data()
    parts = [toy.shard(X, r, 4) for r in range(4)]
    assert torch.equal(torch.cat(parts), X)
    with pytest.raises(ValueError, match="does not split evenly over 5 ranks"):
        toy.shard(X, 0, 5)


def test_reference_train_is_plain_full_batch_training():
    X, Y = toy.make_data()
    ref = toy.reference_train(toy.make_mlp(), X, Y, steps=3, lr=0.1)
    model = toy.make_mlp()
    for _ in range(3):
        model.zero_grad()
        ((model(X) - Y) ** 2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    assert toy.max_abs_diff(model.state_dict(), ref.state) < 1e-14
    assert ref.losses[0] > ref.losses[-1]
    with pytest.raises(ValueError, match="optimizer must be"):
        toy.make_optimizer(model, 0.1, "lion")
    with pytest.raises(ValueError, match="different parameters"):
        toy.max_abs_diff({"a": torch.zeros(1)}, {"b": torch.zeros(1)})


# ------------------------------------------------------------------ comm (real gloo group)

_WORKER = r"""
import json, sys, torch, torch.distributed as dist
from datetime import timedelta
from helpers.training.comm import count_collectives
rank, n, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=n, timeout=timedelta(seconds=30))
pair = dist.new_group([0, 1])
t = torch.ones(12, dtype=torch.float64)                        # 96 bytes
rows = {}
def record(name, fn):
    with count_collectives() as log:
        fn()
    rows[name] = [[c.name, c.size, c.group_size, c.model, c.measured, c.group]
                  for c in log.entries]
    if name == "all_reduce_keyword_group":
        rows["as_rows"] = log.rows(phase="p")
record("all_reduce", lambda: dist.all_reduce(t))
record("all_reduce_positional_group",
       lambda: dist.all_reduce(t, dist.ReduceOp.SUM, pair) if rank in (0, 1) else None)
record("all_reduce_keyword_group",
       lambda: dist.all_reduce(t, group=pair) if rank in (0, 1) else None)
out_t = torch.empty(12 * n, dtype=torch.float64)
record("all_gather_single", lambda: dist.all_gather_single(out_t, t))
shard = torch.empty(12, dtype=torch.float64)
record("reduce_scatter_single", lambda: dist.reduce_scatter_single(shard, out_t))
record("all_gather", lambda: dist.all_gather([torch.empty(12, dtype=torch.float64)
                                               for _ in range(n)], t))
record("reduce_scatter", lambda: dist.reduce_scatter(shard, [t.clone() for _ in range(n)]))
record("broadcast", lambda: dist.broadcast(t, 0))
record("all_keywords", lambda: dist.all_gather_single(input_tensor=t, output_tensor=out_t,
                                                      group=None))
record("deprecated_alias", lambda: dist.all_gather_into_tensor(out_t, t))
peer_right, peer_left = (rank + 1) % n, (rank - 1) % n
inbox = torch.empty(12, dtype=torch.float64)
record("batch_isend_irecv", lambda: [w.wait() for w in dist.batch_isend_irecv(
    [dist.P2POp(dist.isend, t, peer_right), dist.P2POp(dist.irecv, inbox, peer_left)])])
record("nested_restored", lambda: None)
rows["restored"] = dist.all_reduce.__name__ == "all_reduce"
json.dump(rows, open(out, "w"))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def comm_rows(tmp_path_factory):
    import subprocess

    tmp = tmp_path_factory.mktemp("comm")
    script = tmp / "worker.py"
    script.write_text(_WORKER)
    n, port = 3, free_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(n), str(port),
                               str(tmp / f"{r}.json")], env=env) for r in range(n)]
    try:
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert codes == [0] * n
    return n, [json.loads((tmp / f"{r}.json").read_text()) for r in range(n)]


def test_counter_models_follow_the_ring_and_measures_what_gloo_wrote(comm_rows):
    n, per_rank = comm_rows
    S = 96
    for rank, rows in enumerate(per_rank):
        model = {name: [c[:4] for c in calls] for name, calls in rows.items()
                 if name not in ("restored", "as_rows")}
        assert model["all_reduce"] == [["all_reduce", S, n, 2 * (n - 1) / n * S]]
        assert model["all_gather_single"] == [["all_gather_single", S * n, n,
                                               (n - 1) / n * S * n]]
        assert model["reduce_scatter_single"] == [["reduce_scatter_single", S * n, n,
                                                   (n - 1) / n * S * n]]
        assert model["all_gather"][0][1:] == [S * n, n, (n - 1) / n * S * n]
        assert model["reduce_scatter"][0][1:] == [S * n, n, (n - 1) / n * S * n]
        # the ring broadcast from 0: every rank sends S but the ring's last, rank n-1
        assert model["broadcast"] == [["broadcast", S, n, 0.0 if rank == n - 1 else float(S)]]
        # measured: the model plus gloo's headers, for the collectives that run as a ring
        for name in ("all_reduce", "all_gather_single", "all_keywords"):
            (call,) = rows[name]
            assert agrees(call[4], call[3], 1, n), (name, call)
        # asynchronous (isend/irecv): no figure per call
        assert all(c[4] is None for c in rows["batch_isend_irecv"])
        assert rows["restored"] is True
        assert model["all_keywords"] == model["all_gather_single"]
        assert [row[0] for row in rows["deprecated_alias"]] == ["all_gather_into_tensor"]
        assert model["batch_isend_irecv"] == [["isend", S, n, float(S)], ["irecv", S, n, 0.0]]


def test_counter_sees_a_group_passed_by_position(comm_rows):
    _, per_rank = comm_rows
    for rank in (0, 1):   # the pair group: 2 ranks, so 2(2-1)/2 · 96 bytes
        for name in ("all_reduce_positional_group", "all_reduce_keyword_group"):
            (call,) = per_rank[rank][name]
            assert call[:4] == ["all_reduce", 96, 2, 96.0]
            assert agrees(call[4], 96.0, 1, 2), call     # measured on the pair's connection
            assert call[5] == [0, 1]                     # the group's ranks
        (call,) = per_rank[rank]["all_reduce_keyword_group"]
        assert per_rank[rank]["as_rows"] == [{"phase": "p", "name": "all_reduce",
                                              "group": [0, 1], "size": 96, "model": 96.0,
                                              "measured": call[4]}]
    assert per_rank[2]["all_reduce_positional_group"] == []
    assert per_rank[2]["as_rows"] == []


def test_counter_notes_every_call_s_group(comm_rows):
    n, per_rank = comm_rows
    for rows in per_rank:
        for name in ("all_reduce", "all_gather_single", "broadcast", "deprecated_alias",
                     "batch_isend_irecv"):
            assert rows[name] and all(call[5] == list(range(n)) for call in rows[name]), name


# ------------------------------------------------------------------ mesh

@pytest.mark.parametrize("n, shape", [(1, (1, 1)), (2, (1, 2)), (3, (1, 3)), (4, (2, 2)),
                                      (6, (2, 3)), (7, (1, 7)), (8, (2, 4)), (9, (3, 3)),
                                      (12, (3, 4))])
def test_mesh_shape_is_the_most_square_factorisation(n, shape):
    assert mesh.mesh_shape(n) == shape


def test_mesh_shape_refuses_bad_input():
    with pytest.raises(ValueError, match="positive int"):
        mesh.mesh_shape(0)


@pytest.mark.parametrize("shape", [(1, 2), (1, 3), (2, 2), (2, 3)])
def test_hierarchical_reference_ends_in_the_sum(shape):
    n = shape[0] * shape[1]
    inputs = [list(np.arange(2 * shape[1]) + 100.0 * r) for r in range(n)]
    phases = mesh.hierarchical_reference(inputs, shape)
    total = np.sum(inputs, axis=0)
    for rank, state in enumerate(phases):
        assert state["all_gather in rows"] == total.tolist()
        col = rank % shape[1]
        assert state["all_reduce across rows"] == total[2 * col:2 * col + 2].tolist()
    with pytest.raises(ValueError, match="do not fit"):
        mesh.hierarchical_reference(inputs[:-1], shape)


def test_row_crossings_split_each_rank_s_bytes_by_mesh_row():
    # 2 × 2 mesh: ranks 0, 1 in row 0, ranks 2, 3 in row 1; each rank's "local>remote"
    sockets = [{"h:10>h:21": 5, "h:11>h:30": 7}, {"h:21>h:10": 3},
               {"h:30>h:11": 2, "h:31>h:40": 4}, {"h:40>h:31": 1, "h:41>h:99": 9}]
    seen = mesh.row_crossings(sockets, (2, 2))
    assert seen["between rows"] == [7, 0, 2, 0]
    assert seen["in rows"] == [5, 3, 4, 1]
    assert seen["other"] == [0, 0, 0, 9]
    traffic = [{"phase": {"model": 10.0, "measured": 58}}, {"phase": {"model": 10.0,
                                                                     "measured": None}}]
    assert mesh.traffic_rows(traffic) == [{"rank": 0, "phase": "58 / 10"},
                                          {"rank": 1, "phase": "not measured / 10"}]
    assert len(mesh.plot_crossings({"p": seen, "q": seen}, (2, 2)).axes) == 2


def test_mesh_plots_draw():
    shape = (2, 2)
    coords = [mesh.coordinate(r, shape) for r in range(4)]
    fig = mesh.plot_mesh(shape, coords, [[0, 1], [0, 1], [2, 3], [2, 3]],
                         [[0, 2], [1, 3], [0, 2], [1, 3]])
    assert fig.axes
    states = mesh.hierarchical_reference([[float(r)] * 4 for r in range(4)], shape)
    assert len(mesh.plot_phases(states, shape).axes) == 4


# ------------------------------------------------------------------ zero

@pytest.mark.parametrize("rows, n", [(16, 3), (4, 3), (4, 4), (5, 4), (1, 3), (7, 2)])
def test_row_range_is_torch_chunk(rows, n):
    chunks = list(torch.chunk(torch.arange(rows), n))
    chunks += [torch.arange(0)] * (n - len(chunks))
    for rank in range(n):
        lo, hi = zero.row_range(rows, rank, n)
        assert torch.equal(torch.arange(rows)[lo:hi], chunks[rank])
    padded = zero.pad_rows(torch.ones(rows, 2), n)
    assert padded.shape == (zero.padded_rows(rows, n) * n, 2)
    assert padded[rows:].abs().sum() == 0


def test_live_bytes_follow_python_lifetimes():
    live = zero.LiveBytes()
    a = live.track(torch.zeros(10, dtype=torch.float64))
    b = live.track(torch.zeros(5, dtype=torch.float64))
    assert live.live == 120 and live.peak == 120
    del a, b
    assert live.live == 0 and live.peak == 120


def test_held_bytes_counts_each_storage_once():
    t = torch.zeros(4, 4, dtype=torch.float64)
    assert zero.held_bytes([t, t[1:3], None]) == 128
    assert zero.held_bytes([t, torch.zeros(2)]) == 136


def test_zero_formula_matches_the_paper_example():
    # The paper's fig. 1: Ψ = 7.5 B, N = 64, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
    psi, n = 7.5e9, 64
    totals = [sum(zero.zero_formula(psi, n, s).values()) / 1e9 for s in zero.STAGES]
    assert [round(t, 1) for t in totals] == [120.0, 31.4, 16.6, 1.9]
    with pytest.raises(ValueError, match="stage must be"):
        zero.zero_formula(psi, n, "ZeRO-4")


def test_comm_formula_ratios_without_padding():
    shapes = [[16, 8], [16], [4, 16], [4]]
    dp = zero.comm_formula(shapes, 4, "DP")
    assert math.isclose(dp, 2 * 3 / 4 * 212 * 8)
    assert math.isclose(zero.comm_formula(shapes, 4, "ZeRO-1") / dp, 1.5)
    assert math.isclose(zero.comm_formula(shapes, 4, "ZeRO-2") / dp, 1.0)
    assert math.isclose(zero.comm_formula(shapes, 4, "ZeRO-3"), 3 / 4 * (2 * 212 + 192) * 8)


def test_paper_volume_and_the_communication_figure():
    psi = 212
    assert [zero.paper_volume(psi, s) for s in zero.STAGES] == [3392, 3392, 3392, 5088]
    model = {s: zero.comm_formula([[16, 8], [16], [4, 16], [4]], 4, s) for s in zero.STAGES}
    paper = {s: zero.paper_volume(psi, s) for s in zero.STAGES}
    measured = [{"DP": 8000, "ZeRO-1": 12000, "ZeRO-2": 12000, "ZeRO-3": 16000}]
    assert [paper[s] / paper["DP"] for s in zero.STAGES] == [1.0, 1.0, 1.0, 1.5]
    assert zero.plot_comm(measured, model, paper).axes
    assert zero.plot_comm([dict.fromkeys(zero.STAGES)], model, paper).axes


# ------------------------------------------------------------------ measured bytes

def test_measured_against_the_model():
    ok, text = measured.measured_vs_model(None, 100.0, 1, 4)
    assert ok is None and "not measured" in text
    assert measured.measured_vs_model(100 + 1728, 100.0, 1, 4)[0] is True
    assert measured.measured_vs_model(99, 100.0, 1, 4)[0] is False
    # gloo's reduce_scatter: an all_reduce's bytes (2 × the ring model), not its own
    S = 1 << 18
    model = 3 / 4 * S
    assert measured.reduce_scatter_as_all_reduce(2 * model + 1728, model, 4)[0]
    assert not measured.reduce_scatter_as_all_reduce(model + 864, model, 4)[0]
    assert measured.reduce_scatter_as_all_reduce(None, model, 4)[0] is None
    assert measured.per_step(None, 5) is None and measured.per_step(50, 5) == 10
    assert math.isclose(measured.header_share(400, 100), 0.75)


# ------------------------------------------------------------------ data_parallel

def test_deep_mlp_and_the_gradients_plot():
    deep = data_parallel.make_deep_mlp()
    assert len(list(deep.parameters())) == 12
    with pytest.raises(ValueError, match="depth"):
        data_parallel.make_deep_mlp(depth=1)
    # pulled {name: gradient} dicts: every parameter's gradient, flattened end to end
    grads = [{"w": torch.full((2, 2), float(r)), "b": torch.tensor([10.0 + r])}
             for r in range(2)]
    reference = {"w": torch.zeros(2, 2), "b": torch.ones(1)}
    fig = data_parallel.plot_grads(grads, grads[::-1], reference)
    before, after = ([list(line.get_ydata()) for line in ax.lines] for ax in fig.axes)
    assert before == [[0.0] * 4 + [10.0], [1.0] * 4 + [11.0]]
    assert after == [[1.0] * 4 + [11.0], [0.0] * 4 + [10.0], [0.0] * 4 + [1.0]]


def test_per_call_ms_and_the_bucket_plot():
    assert math.isclose(data_parallel.per_call_ms([12, 1], [23.0, 1.0]), 2.0)
    rows = [{"label": "per tensor", "calls_per_step": 12, "ms_per_step": 23.0,
             "model_per_step": 100.0, "measured_per_step": 400.0},
            {"label": "all in one", "calls_per_step": 1, "ms_per_step": 1.0,
             "model_per_step": 100.0, "measured_per_step": 150.0}]
    assert len(data_parallel.plot_buckets([rows, rows]).axes) == 3
    unmeasured = [dict(r, measured_per_step=None) for r in rows]
    assert len(data_parallel.plot_buckets([unmeasured]).axes) == 3


def test_overlap_share():
    tl = {"backward": (1.0, 3.0), "buckets": [(2.0, 4.0), (3.5, 4.0)]}
    assert math.isclose(data_parallel.overlap_share(tl), 1.0 / 2.5)
