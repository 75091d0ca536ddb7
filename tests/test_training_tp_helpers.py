"""helpers.training.tensor_parallel, .pipeline and .two_d without engines (one process;
collectives on a one-rank gloo group)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from helpers.training import pipeline as pp  # noqa: E402
from helpers.training import tensor_parallel as tp  # noqa: E402
from helpers.training import two_d  # noqa: E402
from helpers.training.toy import loss_fn, make_data, make_mlp  # noqa: E402


@pytest.fixture
def one_rank_group():
    """A one-rank gloo default group, destroyed afterwards."""
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


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
    pulled = {"values": t.tolist(), "dtype": "float64", "device": "cpu"}
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
    assert [(layer, phase) for layer, phase, _ in rows] == [
        ("reduce", "forward"), ("linear", "forward"), ("linear", "backward"),
        ("reduce", "backward")]
    assert rows[0][2]["all_reduce"]["calls"] == 1
    assert rows[0][2]["all_reduce"]["size"] == X.numel() * 8
    assert rows[1][2] == rows[2][2] == rows[3][2] == {}
    table = tp.bytes_table(rows)
    assert "all_reduce" in table and table.splitlines()[-1].startswith("total")


def test_plot_shards_draws_one_column_per_rank():
    state = {"rank": 0, **{k: torch.zeros(3, 2) for k in
                           ("W1_shard", "Y1_slice", "W2_shard", "Y2_partial")}}
    fig = tp.plot_shards([state, {**state, "rank": 1}], "t")
    assert len(fig.axes) == 8


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
    fig = pp.plot_timelines({"A": events, "B": events}, "t")
    assert len(fig.axes) == 2
    table = [{"schedule": s, "m": m, "measured": 0.5} for s in ("GPipe", "1F1B")
             for m in (1, 2, 4)]
    assert pp.plot_bubbles(table, 4, "t").axes


# ------------------------------------------------------------ two_d

@pytest.mark.parametrize("n, shape", [(2, (1, 2)), (3, (1, 3)), (4, (2, 2)), (5, (1, 5)),
                                      (6, (2, 3)), (8, (2, 4)), (9, (3, 3)), (12, (3, 4))])
def test_mesh_shape(n, shape):
    assert two_d.mesh_shape(n) == shape
    reason = two_d.shape_reason(n)
    assert ("is prime" in reason) == (shape[0] == 1)


def test_mesh_shape_refuses_one_rank():
    with pytest.raises(ValueError, match="2\\+ ranks"):
        two_d.mesh_shape(1)


def test_groups_of_a_2x3_mesh():
    assert two_d.coordinates(4, 2, 3) == (1, 1)
    assert two_d.tp_group_ranks(4, 2, 3) == [3, 4, 5]
    assert two_d.dp_group_ranks(4, 2, 3) == [1, 4]
    plan = two_d.planned_step(4, 2, 3, batch=48)
    assert plan[0]["group"] == [3, 4, 5] and plan[0]["size"] == 24 * 4 * 8
    assert [row["size"] for row in plan[1:]] == [4 * 8 * 8, 4 * 8, 4 * 4 * 8, 4 * 8]
    assert all(row["group"] == [1, 4] for row in plan[1:])
    assert "gradient sync" in two_d.format_plan(plan)


def test_record_collectives_notes_groups_and_restores(one_rank_group):
    before = dist.all_reduce
    group = dist.new_group([0])
    with two_d.record_collectives() as calls:
        dist.all_reduce(torch.ones(3, dtype=torch.float64), group=group)
        dist.all_reduce(torch.ones(2))
    assert calls == [{"name": "all_reduce", "group": [0], "size": 24},
                     {"name": "all_reduce", "group": [0], "size": 8}]
    assert dist.all_reduce is before


def test_plot_mesh_and_params():
    assert two_d.plot_mesh(2, 2, "t").axes
    ref = make_mlp(d_hidden=8).state_dict()
    state = {"rank": 0, "dp_rank": 0, "tp_rank": 1,
             "params": {"0.weight": ref["0.weight"][4:], "0.bias": ref["0.bias"][4:],
                        "2.weight": ref["2.weight"][:, 4:], "2.bias": ref["2.bias"]}}
    assert len(two_d.plot_params([state], ref, 4, "t").axes) == 1
