"""helpers.transformer.sequence_parallel (and its figures) without engines: the splits, the
shards, the activation meter, the checks against the reference, the bytes checks."""
from __future__ import annotations

import pytest
import torch

from helpers.transformer import sequence_parallel as sp
from helpers.transformer import sequence_parallel_figures as figures
from helpers.transformer.block import make_block, make_tokens, reference


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_splits_cover_everything_once(n):
    heads = [h for r in range(n) for h in sp.my_heads(r, n)]
    assert heads == list(range(12))
    features = [f for r in range(n) for f in range(96)[sp.my_features(r, n)]]
    tokens = [t for r in range(n) for t in range(24)[sp.my_tokens(r, n)]]
    assert features == list(range(96)) and tokens == list(range(24))
    assert sp.head_rows(n - 1, n).stop == 48


@pytest.mark.parametrize("call, words", [
    (lambda: sp.my_heads(0, 5), "12 heads do not split evenly over 5 ranks"),
    (lambda: sp.my_tokens(0, 7), "24 tokens do not split evenly over 7 ranks"),
    (lambda: sp.my_features(4, 4), "rank 4 is not in 0..3"),
    (lambda: sp.my_heads(0, 0), "at least 1"),
])
def test_a_split_that_does_not_divide_is_refused_by_name(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_the_shards_are_whole_heads_and_features():
    block = make_block()
    w, b = sp.column_shard(block.attn.q, 1, 3)          # heads 4..7: rows 16..31
    assert torch.equal(w, block.attn.q.weight.detach()[16:32])
    assert torch.equal(b, block.attn.q.bias.detach()[16:32])
    assert torch.equal(sp.row_shard(block.attn.o, 2, 4), block.attn.o.weight.detach()[:, 24:36])
    w, _ = sp.column_shard(block.mlp[0], 1, 2)
    assert torch.equal(w, block.mlp[0].weight.detach()[48:])
    assert torch.equal(sp.row_shard(block.mlp[2], 0, 3), block.mlp[2].weight.detach()[:, :32])


def test_grad_diffs_are_zero_for_the_reference_slices_and_not_otherwise():
    ref = reference(make_block(), *make_tokens())
    n, r = 4, 2
    grads = {name: sp.expected_grad(name, ref, r, n) for name in sp.REFERENCE_NAME}
    assert max(sp.grad_diffs(grads, ref, r, n).values()) == 0.0
    grads["o.weight"] = grads["o.weight"] + 1e-6
    name, gap = sp.worst(sp.grad_diffs(grads, ref, r, n))
    assert name == "o.weight" and gap == pytest.approx(1e-6)
    assert sp.max_diff(torch.zeros(2), torch.zeros(3)) == float("inf")
    with pytest.raises(KeyError):
        sp.expected_grad("nope.weight", ref, 0, 2)


def test_the_meter_counts_what_a_layernorm_saves():
    ln = torch.nn.LayerNorm(48).double()
    x = torch.randn(2, 6, 48, dtype=torch.float64, requires_grad=True)
    with sp.ActivationMeter(ln) as meter:
        ln(x)
    # its input, and a mean and 1/std per token; the parameters are not counted
    assert meter.by_region() == {"layernorm": 2 * 6 * 48 * 8 + 2 * 2 * 6 * 8,
                                 "total": 2 * 6 * 48 * 8 + 2 * 2 * 6 * 8}


def test_the_meter_counts_a_storage_once_and_by_region():
    block = make_block()
    X, _ = make_tokens()
    with sp.ActivationMeter(block) as meter:
        block(X.clone().requires_grad_(True))
    table = meter.by_region()
    assert table["layernorm"] == 2 * (2 * 24 * 48 * 8 + 2 * 2 * 24 * 8)
    # q, k and v save the same input: counted once (three copies would add 2 × 18,432 B)
    assert table["tensor-parallel"] + table["layernorm"] == table["total"]
    with torch.no_grad(), sp.ActivationMeter(block) as quiet:
        block(X)
    assert quiet.by_region() == {"total": 0}


def _row(layer, phase, **collectives):
    return {"layer": layer, "phase": phase, "calls": sum(c["calls"] for c in
                                                         collectives.values()),
            "collectives": collectives, "model": sum(c["model"] for c in collectives.values()),
            "measured": sum(c["measured"] for c in collectives.values())}


def test_gloo_model_counts_reduce_scatter_as_all_reduce_and_the_report_holds_rows_to_it():
    ag = {"calls": 1, "size": 1000, "model": 500.0, "measured": 596}
    rs = {"calls": 1, "size": 1000, "model": 500.0, "measured": 1096}
    row = _row("TP + SP", "forward", all_gather_single=ag, reduce_scatter_single=rs)
    assert sp.gloo_model(row) == 1500.0
    assert sp.wire_report("t", [[row]], 2).oks == [True]
    short = {**row, "measured": 1000}                   # the ring's bytes: not what gloo does
    assert sp.wire_report("t", [[short]], 2).oks == [False]
    assert "not measured" in str(sp.wire_report("t", [[{**row, "measured": None}]], 2))
    text = sp.bytes_table([row])
    assert "reduce_scatter_single" in text and "1,692" in text


def test_against_hand_takes_the_hand_model_per_phase():
    hand = [_row("TP + SP", "forward", all_gather_single={"calls": 2, "size": 8, "model": 4.0,
                                                          "measured": 100})]
    theirs = [{"layer": "parallelize_module", "phase": "forward", "calls": 0,
               "collectives": {}, "model": 0.0, "measured": 120},
              {"layer": "parallelize_module", "phase": "grad sync", "calls": 0,
               "collectives": {}, "model": 0.0, "measured": 2000}]
    rows = sp.against_hand(theirs, hand, 2)
    assert rows[0]["calls"] == 2 and rows[0]["model"] == 4.0
    assert rows[1]["calls"] == 4 and rows[1]["model"] == 4 * 384.0
    assert "grad sync" not in sp.torch_vs_hand_text(hand, theirs[:1])


@pytest.mark.parametrize("n", [2, 3])
def test_the_figures_draw_every_rank(n):
    fig = figures.draw_block_split(n)
    gids = {a.get_gid() for a in fig.axes[0].patches}
    assert {f"sp:LN1:{r}" for r in range(n)} <= gids and f"tp:LN1:{n}" not in gids
    block = make_block()
    X, _ = make_tokens()
    states = [{"q_weight": sp.column_shard(block.attn.q, r, n)[0],
               "fc1_weight": sp.column_shard(block.mlp[0], r, n)[0],
               "X_shard": X[:, sp.my_tokens(r, n)]} for r in range(n)]
    fig = figures.plot_holdings(states, block)
    held = {a.get_gid() for ax in fig.axes for a in ax.patches}
    assert {f"head:{h}:{r}" for r in range(n) for h in sp.my_heads(r, n)} <= held
    assert len([g for g in held if g.startswith("token:")]) == 24
    table = {"one process": {"layernorm": 10, "tensor-parallel": 30, "total": 40},
             "TP": {"layernorm": 10, "tensor-parallel": 15, "total": 25}}
    fig = figures.plot_activation_bytes([table] * n)
    assert len([p for p in fig.axes[0].patches if p.get_gid()]) == 2 * 2 * n
    text = sp.memory_text([table] * n)                 # the same on every rank: one table
    assert text.splitlines()[0] == "(every rank)" and text.count("layernorm") == 1
    assert "TP                        10 B             15 B             25 B" in text
    other = {**table, "TP": {"layernorm": 5, "tensor-parallel": 15, "total": 20}}
    text = sp.memory_text([table] + [other] * (n - 1))  # ranks differ: one table each
    assert text.count("layernorm") == n and text.startswith("rank 0:")
