"""helpers.transformer.experts: routing, capacity, the send order, the counts, the bytes
model for uneven splits and the single-process reference (no engines)."""
from __future__ import annotations

import math

import pytest
import torch

from helpers.transformer.experts import (TOKENS, capacity, counts_per_expert, flat_tokens,
                                         local_expert_of_rows, make_moe, max_diff, n_experts,
                                         reference, route, send_order, token_slice,
                                         uneven_model)


def test_sizes_and_the_tokens_each_rank_routes():
    assert [n_experts(n) for n in (1, 2, 3, 4)] == [2, 4, 6, 8]
    assert [token_slice(r, 4) for r in range(4)] == [slice(12 * r, 12 * r + 12)
                                                     for r in range(4)]
    with pytest.raises(ValueError, match="48 tokens do not split evenly over 5 ranks"):
        token_slice(0, 5)
    with pytest.raises(ValueError, match="at least 1"):
        n_experts(0)


def test_capacity_is_the_ceiling_of_cf_tokens_k_over_experts():
    assert capacity(1.25, 24, 2, 4) == 15            # exactly 15: no rounding up
    assert capacity(0.75, 12, 2, 8) == 3             # 2.25 → 3
    assert capacity(1.0, 16, 2, 6) == math.ceil(32 / 6)
    with pytest.raises(ValueError, match="capacity factor must be positive"):
        capacity(0, 24, 2, 4)


def test_route_top2_renormalised_and_top1_not():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 3.0, 1.0]], dtype=torch.float64)
    r2 = route(logits, 4, cap=10, k=2)
    assert r2.expert.tolist() == [[0, 1], [2, 3]]
    assert torch.allclose(r2.gate.sum(-1), torch.ones(2, dtype=torch.float64))
    assert r2.kept.all() and r2.dropped == []
    r1 = route(logits, 4, cap=10, k=1)
    probs = torch.softmax(logits, -1)
    assert torch.equal(r1.gate[:, 0], probs.max(-1).values)
    with pytest.raises(ValueError, match="top-k needs 1 <= k <= 4"):
        route(logits, 4, cap=1, k=5)


def test_capacity_serves_first_choices_before_second_ones_in_token_order():
    # every token's first choice is expert 0, second expert 1; capacity 2
    logits = torch.tensor([[3.0, 2.0, 0.0]] * 3, dtype=torch.float64)
    r = route(logits, 3, cap=2, k=2)
    assert r.kept.tolist() == [[True, True], [True, True], [False, False]]
    assert r.dropped == [(2, 0), (2, 1)]
    # a second choice loses to a later token's first choice
    logits = torch.tensor([[3.0, 2.0, 0.0], [0.0, 3.0, 2.0]], dtype=torch.float64)
    r = route(logits, 3, cap=1, k=2)
    assert r.kept.tolist() == [[True, False], [True, True]]


def test_send_order_is_by_expert_and_counts_and_local_labels_agree():
    X, _ = flat_tokens()
    moe = make_moe(4)
    r = route(moe.router(X[:24]).detach(), 4, capacity(1.25, 24, 2, 4))
    token, slot = send_order(r)
    experts = r.expert[token, slot]
    assert torch.equal(experts, experts.sort().values)
    assert len(token) == int(r.kept.sum())
    counts = counts_per_expert(r, 4)
    assert counts.sum() == len(token) and counts.dtype == torch.int64
    # two local experts, rows from two ranks: [a0, a1, b0, b1]
    labels = local_expert_of_rows(torch.tensor([2, 1, 0, 3]), 2)
    assert labels.tolist() == [0, 0, 1, 1, 1, 1]


def test_uneven_model_leaves_out_the_own_piece():
    assert uneven_model([3, 0, 5, 1], rank=2, row_bytes=384) == 4 * 384
    assert uneven_model([2, 2, 2, 2], rank=0, row_bytes=8) == 3 / 4 * 64   # even: (n-1)/n·S


def test_reference_equals_a_dense_mixture_when_nothing_is_dropped():
    """With capacity above every count, the reference is x + Σ gate · expert(x) computed
    for every token with every expert, weights zero off the top-2."""
    X, Y = flat_tokens()
    moe = make_moe(4)
    ref = reference(moe, X, Y, world_size=2, cf=100.0)
    assert all(d == [] for d in ref.dropped) and ref.counts.sum() == 2 * TOKENS
    probs = torch.softmax(moe.router(X), -1)
    top, idx = probs.topk(2, -1)
    weights = torch.zeros_like(probs).scatter(1, idx, top / top.sum(-1, keepdim=True))
    dense = X + sum(weights[:, e:e + 1] * moe.experts[e](X) for e in range(4))
    assert max_diff(ref.output, dense.detach()) < 1e-12
    assert ref.loss == pytest.approx(((dense - Y) ** 2).mean().item(), rel=1e-12)
    assert ref.input_grad.shape == X.shape and set(ref.grads) >= {"router.weight"}


def test_reference_drops_and_a_fully_dropped_token_is_its_residual():
    X, Y = flat_tokens()
    moe = make_moe(4)
    ref = reference(moe, X, Y, world_size=2, cf=0.5)
    assert (ref.counts <= capacity(0.5, 24, 2, 4)).all()
    fully = 0
    for r, dropped in enumerate(ref.dropped):
        both = {t for t, s in dropped if (t, 1 - s) in dropped}
        fully += len(both)
        for t in both:
            row = token_slice(r, 2).start + t
            assert torch.equal(ref.output[row], X[row])
    assert fully > 0


def test_max_diff_of_different_shapes_is_inf_and_of_empty_ones_0():
    assert max_diff([[1.0]], torch.zeros(2, 1)) == float("inf")
    assert max_diff(torch.zeros(0, 48), torch.zeros(0, 48)) == 0.0
