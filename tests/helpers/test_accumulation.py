"""Fast unit tests of helpers.fitting (notebook 23's plumbing), no engines."""
from __future__ import annotations

import pytest
import torch

from helpers.fitting import accumulation as acc
from helpers.fitting import compression as comp
from helpers.training.toy import loss_fn, make_data, make_mlp


def test_micro_size_and_bad_splits():
    assert [acc.micro_size(48, 4, n) for n in (1, 2, 3, 4)] == [12, 6, 4, 3]
    with pytest.raises(ValueError, match="does not split into 5 micro-batches"):
        acc.micro_size(48, 5, 2)
    with pytest.raises(ValueError, match="at least 1"):
        acc.micro_size(48, 0, 2)


def test_micro_batches_cover_the_batch_once():
    X, Y = make_data()
    pieces = [x for r in range(3) for x, _ in acc.micro_batches(X, Y, r, 3, 4)]
    assert len(pieces) == 12 and all(p.shape[0] == 4 for p in pieces)
    assert torch.equal(torch.cat(pieces), X)


def test_accumulated_micro_batches_give_the_whole_batch_gradient():
    X, Y = make_data()
    whole = make_mlp()
    loss_fn(whole(X), Y).backward()
    parts = make_mlp()
    for x, y in acc.micro_batches(X, Y, 0, 1, 4):
        (loss_fn(parts(x), y) / 4).backward()
    assert (acc.flat_grad(parts) - acc.flat_grad(whole)).abs().max() < 1e-15


def test_flat_grad_round_trip_and_ring_model():
    model = make_mlp()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    flat = torch.arange(212, dtype=torch.float64)
    acc.set_flat_grad(model, flat)
    assert torch.equal(acc.flat_grad(model), flat)
    assert acc.ring_all_reduce(1000, 4) == 1500 and acc.ring_all_reduce(1000, 1) == 0


def test_state_diff_of_saved_lists_is_float64_and_names_missing_parameters():
    from helpers.training.toy import max_abs_diff

    state = acc.state_of(make_mlp())
    saved = {k: v.tolist() for k, v in state.items()}           # what a record holds
    assert max_abs_diff(saved, state) == 0                       # not float32's 1e-8
    nudged = {**saved, "0.bias": (state["0.bias"] + 1e-13).tolist()}
    assert 0 < max_abs_diff(nudged, state) < 1e-12
    with pytest.raises(ValueError, match="different parameters"):
        max_abs_diff({"x": [1.0]}, state)


def test_recompute_cost_counts_forwards_and_bytes():
    from helpers.transformer.block import loss_fn as block_loss
    from helpers.transformer.block import make_tokens
    X, Y = make_tokens(batch=1)
    stack = acc.make_stack(2)
    cost = acc.recompute_cost(stack, list(stack), X, Y, block_loss, repeats=1)
    assert cost["block_forwards"] == 2 and cost["saved_bytes"] > 2 * X.numel() * 8


def test_compression_rows_and_table():
    ref = torch.ones(10, dtype=torch.float64)
    probes = {"fp32": {"grad": ref.tolist(), "calls": 0, "sizes": [], "model": 0.0,
                       "measured": 200},
              "half": {"grad": (ref * 1.01).tolist(), "calls": 1, "sizes": [20],
                       "model": 20.0, "measured": 50}}
    rows = comp.compression_rows(probes, ref, 2)
    assert rows[0]["model"] == 80 and rows[0]["max_error"] == 0
    assert rows[1]["rel_error"] == pytest.approx(0.01)
    text = comp.compression_text(rows, "fp32")
    assert "0.250" in text and "half" in text
