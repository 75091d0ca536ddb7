"""helpers.training.tensor_parallel, .pipeline, .two_d and .measured without engines (one
process; collectives on a one-rank gloo group)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch
import torch.distributed as dist

from helpers.training import pipeline as pp, pipeline_figures as ppf
from helpers.training import tensor_parallel as tp
from helpers.training import two_d
from helpers.training.comm import count_collectives
from helpers.training.mesh import coordinate, mesh_shape
from helpers.training.measured import NOT_MEASURED
from helpers.training.toy import loss_fn, make_data, make_mlp


# ------------------------------------------------------------ tensor_parallel

@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
def test_shards_reassemble_the_layer(n):
    model = make_mlp(d_hidden=tp.hidden_size(n))
    assert model[0].out_features % n == 0
    rows = [tp.column_shard(model[0], r, n) for r in range(n)]
    assert torch.equal(torch.cat([w for w, _ in rows]), model[0].weight.detach())
    assert torch.equal(torch.cat([b for _, b in rows]), model[0].bias.detach())
    cols = [tp.row_shard(model[2], r, n) for r in range(n)]
    assert torch.equal(torch.cat(cols, dim=1), model[2].weight.detach())
    X, _ = make_data()
    # row-parallel: the partial products sum to the full product
    H = torch.tanh(model[0](X)).detach()
    partial = sum(tp.feature_slice(H, r, n) @ cols[r].T for r in range(n))
    assert torch.allclose(partial + model[2].bias, model(X), atol=1e-12)


def test_shards_refuse_sizes_that_do_not_divide():
    with pytest.raises(ValueError, match="10 features do not split evenly over 3 ranks"):
        tp.column_shard(torch.nn.Linear(8, 10), 0, 3)
    with pytest.raises(ValueError, match="rank 4 is not in 0..3"):
        tp.row_shard(torch.nn.Linear(8, 4), 4, 4)
    with pytest.raises(ValueError):
        tp.hidden_size(0)


def test_reference_is_the_unsharded_forward_and_backward():
    ref = tp.reference(12)
    X, Y = make_data()
    model = make_mlp(d_hidden=12)
    assert torch.allclose(ref.output, model(X))
    loss_fn(model(X), Y).backward()
    for name, p in model.named_parameters():
        assert torch.equal(ref.grads[name], p.grad)
    assert ref.input_grad.shape == X.shape and ref.input_grad.abs().sum() > 0


def test_max_diff_reads_pulled_tensors_and_flags_shape_mismatch():
    t = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    for pulled in (t.float(), t.tolist()):          # a pulled tensor, or a saved record's lists
        assert tp.max_diff(pulled, t) == 0.0
        assert tp.max_diff(pulled, t + 0.5) == 0.5
        assert tp.max_diff(pulled, t.T) == float("inf")


def test_count_per_layer_sees_each_layers_collectives(one_rank_group):
    class AllReduceForward(torch.nn.Module):
        def forward(self, x):
            out = x.clone()
            with torch.no_grad():          # a plain collective: autograd does not see it
                dist.all_reduce(out, group=None)
            return out

    X, Y = make_data()
    rows = tp.count_per_layer([("reduce", AllReduceForward()),
                               ("linear", torch.nn.Linear(8, 4).double())], X, Y)
    assert [(row["layer"], row["phase"]) for row in rows] == [
        ("reduce", "forward"), ("linear", "forward"), ("linear", "backward"),
        ("reduce", "backward")]
    reduce = rows[0]["collectives"]["all_reduce"]
    assert (reduce["calls"], reduce["size"]) == (1, X.numel() * 8)
    # one rank: the ring model sends nothing, and gloo writes nothing
    assert (reduce["model"], reduce["measured"], rows[0]["measured"]) == (0.0, 0, 0)
    assert [row["collectives"] for row in rows[1:]] == [{}, {}, {}]
    assert [row["measured"] for row in rows] == [0, 0, 0, 0]
    table = tp.bytes_table(rows)
    assert "all_reduce" in table and "model: ring" in table and "measured: gloo" in table
    assert table.splitlines()[-1].startswith("total")
    assert all(tp.wire_report("t", [rows], 1))


def _row(measured, model=300.0, calls=1, phase="forward"):
    return {"layer": "l", "phase": phase, "calls": calls, "model": model, "measured": measured,
            "collectives": {"all_reduce": {"calls": calls, "size": 200, "model": model,
                                           "measured": measured}} if calls else {}}


def test_wire_report_checks_measured_against_the_model():
    from helpers.bench.wire import header_bound

    n = 4
    fine = [_row(300 + 36 * 48), _row(0, 0.0, 0, "backward")]
    assert tp.wire_report("t", [fine, fine], n).oks == [True, True]
    for wrong in ([_row(299)], [_row(300 + header_bound(1, n, 300) + 1)],   # below, above
                  [_row(48, 0.0, 0)]):                                     # a quiet row wrote
        assert tp.wire_report("t", [wrong], n).oks == [False]
    nccl = tp.wire_report("t", [[_row(None)]], n)
    assert nccl.oks == [] and "not measured" in "\n".join(map(str, nccl.lines))
    # a row's own group size wins over n: one rank must write exactly 0 B
    assert tp.wire_report("t", [[{**_row(0, 0.0), "n": 1}]], n).oks == [True]
    assert tp.wire_report("t", [[{**_row(48, 0.0), "n": 1}]], n).oks == [False]


def test_torch_against_the_hand_built_model():
    hand = [_row(2112, 1536.0), _row(3648, 3072.0, phase="backward")]
    theirs = [{**_row(2112, 0.0, 0), "layer": "torch"},
              {**_row(3648, 0.0, 0, "backward"), "layer": "torch"}]
    rows = tp.against_hand_model(theirs, hand)
    assert [(r["calls"], r["model"], r["measured"]) for r in rows] == [
        (1, 1536.0, 2112), (1, 3072.0, 3648)]
    assert tp.wire_report("t", [rows], 2).oks == [True]


def test_plot_shards_puts_the_pulled_shards_back_together():
    # the layout, the outlines and the sums: tests/helpers/test_schemes.py
    states = [{"rank": r, "W1_shard": torch.full((4, 3), 10.0 * r),
               "Y1_slice": torch.full((5, 4), 20.0 * r), "W2_shard": torch.full((2, 4), 1.0 + r),
               "Y2_partial": torch.full((5, 2), 3.0 * r), "Y2": torch.ones(5, 2)}
              for r in range(2)]
    fig = tp.plot_shards(states, "t")
    w1, y1, w2, *partials, y2 = fig.axes
    assert w1.get_images()[0].get_array().tolist() == [[0.0] * 3] * 4 + [[10.0] * 3] * 4
    assert y1.get_images()[0].get_array().tolist() == [[0.0] * 4 + [20.0] * 4] * 5
    assert w2.get_images()[0].get_array().tolist() == [[1.0] * 4 + [2.0] * 4] * 2
    assert [p.get_images()[0].get_array().tolist() for p in partials] == [
        [[0.0] * 2] * 5, [[3.0] * 2] * 5]
    assert y2.get_images()[0].get_array().tolist() == [[1.0] * 2] * 5


# ------------------------------------------------------------ pipeline

@pytest.mark.parametrize("p", [1, 2, 3, 4])
def test_stages_are_balanced_and_chain(p):
    stages = pp.make_stages(p, 32)
    assert len(stages) == p
    for stage in stages:
        assert sum(isinstance(m, torch.nn.Linear) and m.weight.shape == (32, 32)
                   for m in stage) == 1
    X, Y = make_data()
    out = X
    for stage in stages:
        out = stage(out)
    assert out.shape == Y.shape
    # the same seed, the same weights
    assert torch.equal(pp.make_stages(p, 32)[-1][-1].weight, stages[-1][-1].weight)


def test_reference_gradients_match_a_manual_backward():
    X, Y = make_data()
    loss, grads = pp.reference_gradients(3, 16, X, Y)
    model = torch.nn.Sequential(*pp.make_stages(3, 16))
    manual = loss_fn(model(X), Y)
    manual.backward()
    assert loss == manual.item()
    for s, stage in enumerate(model):
        for name, p in stage.named_parameters():
            assert torch.equal(grads[s][name], p.grad)


def test_theory_bubble():
    assert pp.theory_bubble(4, 1) == pytest.approx(3 / 4)
    assert pp.theory_bubble(4, 8) == pytest.approx(3 / 11)
    assert pp.theory_bubble(1, 8) == 0.0


def test_timeline_records_spans_and_refuses_unknown_kinds():
    timeline = pp.Timeline()
    timeline.start()
    with timeline.span("forward", 0):
        pass
    with timeline.span("recv"):
        pass
    assert [(k, mb) for k, mb, _, _ in timeline.events] == [("forward", 0), ("recv", None)]
    assert all(0 <= b <= e for _, _, b, e in timeline.events)
    with pytest.raises(ValueError, match="unknown span kind 'idle'"):
        with timeline.span("idle"):
            pass


def test_bubble_fraction_of_synthetic_timelines():
    events = [[("forward", 0, 0.0, 1.0), ("send", 0, 1.0, 1.5), ("backward", 0, 3.0, 4.0)],
              [("recv", 0, 0.0, 1.5), ("forward", 0, 1.5, 2.0), ("backward", 0, 2.0, 3.0)]]
    assert pp.step_time(events) == 4.0
    assert pp.bubble_fraction(events) == pytest.approx([0.5, 1 - 1.5 / 4])
    fig = ppf.plot_timelines({"A": events, "B": events}, "t")
    assert len(fig.axes) == 2
    table = [{"schedule": s, "m": m, "measured": 0.5} for s in ("GPipe", "1F1B")
             for m in (1, 2, 4)]
    assert ppf.plot_bubbles(table, 4, "t").axes


def test_measured_beside_model_lines():
    from helpers.training.measured import measured_vs_model, p2p_check, per_rank_text

    assert per_rank_text(["a", "a"]) == "(every rank)\na"
    assert per_rank_text(["a", "b"]) == "rank 0:\na\nrank 1:\nb"
    assert measured_vs_model(1536 + 576, 1536.0, 1, 2) == (
        True, "measured 2,112 B, model 1,536 B (+576 B of headers, 27%)")
    assert not measured_vs_model(1535, 1536.0, 1, 2)[0]          # below the model
    assert measured_vs_model(0, 0.0, 4, 1)[0] and not measured_vs_model(48, 0.0, 4, 1)[0]
    assert not measured_vs_model(48, 0.0, 0, 2)[0]               # no call: exactly 0 B
    assert measured_vs_model(None, 1536.0, 1, 2) == (None, f"model 1,536 B; {NOT_MEASURED}")
    assert p2p_check(1000 + 96 * 2 + 48 * 3, 1000.0, 2, 3)[0]
    assert not p2p_check(1000 + 96 * 2 + 48 * 3 + 1, 1000.0, 2, 3)[0]


def test_orders_in_flight_and_warmup_of_recorded_events():
    events = [("forward", 0, 0.0, 1.0), ("recv", 1, 1.0, 1.5), ("forward", 1, 1.5, 2.0),
              ("backward", 0, 2.0, 3.0), ("send+recv", None, 3.0, 3.2),
              ("forward", 2, 3.2, 4.0), ("backward", 1, 4.0, 5.0), ("backward", 2, 5.0, 6.0)]
    order = pp.compute_order(list(reversed(events)))         # sorted by start time
    assert order == ["F0", "F1", "B0", "F2", "B1", "B2"]
    assert pp.in_flight(order) == pp.warmup_forwards(order) == 2
    assert pp.warmup_forwards(["F0", "F1"]) == 2


def test_bubble_trend_names_the_best_m():
    table = [{"schedule": s, "m": m, "measured": b} for s in ("GPipe", "1F1B")
             for m, b in ((1, 0.75), (2, 0.6), (4, 0.5), (8, 0.55))]
    assert pp.bubble_trend(table).splitlines() == [
        f"{s}: 75% with one micro-batch, 50% at best with more (m = 4), 55% at m = 8"
        for s in ("GPipe", "1F1B")]


def test_traffic_table_and_exact_header_check():
    def step(schedule, m, extra=0):
        return {"schedule": schedule, "m": m, "sends": m, "recvs": m, "batched": 0,
                "model": 1000.0, "measured": 1000 + 144 * m + extra}

    good = [[step(s, m) for s in ("GPipe", "1F1B") for m in (1, 2)]] * 2
    table = pp.traffic_table(good, "GPipe")
    assert "m = 1" in table and "1,144" in table and "1,288" in table
    assert pp.traffic_report(good).oks == [True, True]
    off_by_one = [[step("GPipe", 1), step("GPipe", 2, extra=1)]]
    assert pp.traffic_report(off_by_one).oks == [False]


def test_record_schedule_times_torchs_chunks_and_restores(one_rank_group):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, schedules

    wait = schedules._wait_batch_p2p
    stage = PipelineStage(torch.nn.Linear(4, 4), 0, 1, torch.device("cpu"))
    schedule = Schedule1F1B(stage, n_microbatches=2, loss_fn=torch.nn.functional.mse_loss)
    timeline = pp.Timeline()
    timeline.start()
    with pp.record_schedule(schedule, timeline):
        schedule.step(torch.ones(4, 4), target=torch.zeros(4, 4))
    assert pp.compute_order(timeline.events) == ["F0", "B0", "F1", "B1"]   # one stage: p − s = 1
    assert "forward_one_chunk" not in vars(stage) and schedules._wait_batch_p2p is wait


# ------------------------------------------------------------ two_d

@pytest.mark.parametrize("n, shape", [(2, (1, 2)), (3, (1, 3)), (4, (2, 2)), (5, (1, 5)),
                                      (6, (2, 3)), (8, (2, 4)), (9, (3, 3)), (12, (3, 4))])
def test_shape_reason_says_the_mesh_shape(n, shape):
    assert mesh_shape(n) == shape
    reason = two_d.shape_reason(n)
    assert ("is prime" in reason) == (shape[0] == 1)
    assert (f"1 × {n}" if shape[0] == 1 else f"a {shape[0]} × {shape[1]} mesh") in reason


def test_a_2d_mesh_refuses_one_rank():
    with pytest.raises(ValueError, match="2\\+ ranks"):
        two_d.shape_reason(1)


def test_groups_of_a_2x3_mesh():
    assert coordinate(4, (2, 3)) == (1, 1)
    assert two_d.tp_group_ranks(4, 2, 3) == [3, 4, 5]
    assert two_d.dp_group_ranks(4, 2, 3) == [1, 4]
    plan = two_d.planned_step(4, 2, 3, batch=48)
    assert plan[0]["group"] == [3, 4, 5] and plan[0]["size"] == 24 * 4 * 8
    assert [row["size"] for row in plan[1:]] == [4 * 8 * 8, 4 * 8, 4 * 4 * 8, 4 * 8]
    assert all(row["group"] == [1, 4] for row in plan[1:])
    assert "gradient sync" in two_d.format_plan(plan)


def test_counted_calls_as_rows_with_their_groups(one_rank_group):
    before = dist.all_reduce
    group = dist.new_group([0])
    with count_collectives() as log:
        dist.all_reduce(torch.ones(3, dtype=torch.float64), group=group)
        dist.all_reduce(torch.ones(2))
    assert log.rows(phase="forward") == [
        {"phase": "forward", "name": "all_reduce", "group": [0], "size": 24, "model": 0.0,
         "measured": 0},
        {"phase": "forward", "name": "all_reduce", "group": [0], "size": 8, "model": 0.0,
         "measured": 0}]
    assert dist.all_reduce is before


def test_step_bytes_rows_and_sync_lines():
    executed = [{"phase": "forward", "name": "all_reduce", "group": [0, 1], "size": 768,
                 "model": 768.0, "measured": 1344},
                {"phase": "gradient sync", "name": "all_reduce", "group": [0, 2], "size": 256,
                 "model": 256.0, "measured": 832},
                {"phase": "gradient sync", "name": "all_reduce", "group": [0, 2], "size": 32,
                 "model": 32.0, "measured": 608}]
    rows = two_d.call_rows(executed)
    assert [(r["layer"], r["n"], r["measured"]) for r in rows] == [
        ("forward", 2, 1344), ("gradient sync", 2, 832), ("gradient sync", 2, 608)]
    assert "gradient sync" in tp.bytes_table(rows, ("phase", "group"))
    phases = two_d.phase_rows(executed)
    assert [(r["layer"], r["calls"], r["model"], r["measured"]) for r in phases] == [
        ("forward", 1, 768.0, 1344), ("gradient sync", 2, 288.0, 1440)]
    assert tp.wire_report("t", [phases], 4).oks == [True]
    lines = two_d.sync_lines([{"rank": 0, "executed": executed}])
    assert "S 288 B in 2 all_reduce on 2 ranks" in lines and "1,440" in lines


def test_plot_mesh_and_params():
    mesh = two_d.plot_mesh(2, 2, "t")
    texts = [t.get_text() for t in mesh.axes[0].texts]
    for r in range(4):                     # rank r: row r // 2 (its batch shard), column r % 2
        assert f"rank {r}\nbatch shard {r // 2}\nfeatures {r % 2}" in texts
    ref = make_mlp(d_hidden=8).state_dict()
    right = {"rank": 0, "dp_rank": 0, "tp_rank": 1,
             "params": {"0.weight": ref["0.weight"][4:], "0.bias": ref["0.bias"][4:],
                        "2.weight": ref["2.weight"][:, 4:], "2.bias": ref["2.bias"]}}
    wrong = {**right, "rank": 1, "params": {**right["params"], "2.bias": ref["2.bias"] + 1}}
    fig = two_d.plot_params([right, wrong], ref, 4, "t")
    assert [ax.get_title() for ax in fig.axes] == [f"rank {r} (row 0, col 1)" for r in (0, 1)]
    for ax, off in zip(fig.axes, (0.0, 1.0)):   # each value against the reference's
        *points, diagonal = ax.lines
        assert [line.get_label() for line in points] == list(right["params"])
        xs = [x for line in points for x in line.get_xdata()]
        ys = [y for line in points for y in line.get_ydata()]
        assert len(xs) == 4 * 8 + 4 + 4 * 4 + 4
        shifted = len(xs) - 4                  # the last 4 points: 2.bias
        assert xs[:shifted] == pytest.approx(ys[:shifted])
        assert [y - x for x, y in zip(xs[shifted:], ys[shifted:])] == pytest.approx([off] * 4)


def test_a_paced_stage_lasts_its_time_per_sample_and_keeps_the_real_gradients():
    import time

    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh()).double()
    paced = pp.pace(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh()).double(),
                    forward_s=1e-3, backward_s=2e-3)
    paced.load_state_dict(plain.state_dict())
    x = torch.randn(10, 8, dtype=torch.float64)              # no grad: a first stage's input
    start = time.perf_counter()
    y = paced(x)
    forward = time.perf_counter() - start
    start = time.perf_counter()
    y.sum().backward()
    backward = time.perf_counter() - start
    assert forward >= 10 * 1e-3 and backward >= 10 * 2e-3    # sleeps last at least that
    plain(x).sum().backward()
    for (name, a), (_, b) in zip(paced.named_parameters(), plain.named_parameters()):
        assert torch.equal(a.grad, b.grad), name
    inner = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)   # a later stage's
    paced(inner).sum().backward()
    assert inner.grad is not None and inner.grad.shape == (4, 8)
    with pytest.raises(ValueError, match="positive times per sample"):
        pp.pace(torch.nn.Linear(2, 2), forward_s=0.0, backward_s=1e-3)


def test_compute_ms_and_the_bubble_falling_with_m():
    events = [[("forward", 0, 0.0, 0.001), ("send", 0, 0.001, 0.003)],
              [("recv", 0, 0.0, 0.001), ("backward", 0, 0.001, 0.004)]]
    assert pp.compute_ms(events) == pytest.approx(2.0)
    assert pp.compute_ms(events, pp.TRANSFERS) == pytest.approx(1.5)
    table = [{"schedule": "GPipe", "m": m, "measured": b, "theory": pp.theory_bubble(4, m)}
             for m, b in ((1, 0.76), (2, 0.62), (4, 0.47))]
    table += [{"schedule": "1F1B", "m": m, "measured": b, "theory": pp.theory_bubble(4, m)}
              for m, b in ((1, 0.76), (2, 0.62), (4, 0.63))]
    assert pp.bubble_fall(table).splitlines() == [
        "GPipe: m = 1, 2, 4: measured 0.76 → 0.62 → 0.47, formula 0.75 → 0.60 → 0.43; "
        "fell at every step",
        "1F1B: m = 1, 2, 4: measured 0.76 → 0.62 → 0.63, formula 0.75 → 0.60 → 0.43; "
        "did not fall at every step"]
    fig = ppf.plot_bubbles({"paced": table, "real": table}, 4, "t")
    assert [ax.get_title() for ax in fig.axes] == ["paced", "real"]
