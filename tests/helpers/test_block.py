"""The toy block of notebooks 20–22 (helpers.transformer.block), in one process."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.transformer.block import (D_FF, N_HEADS, SEQ, attention, make_block, make_tokens,
                                       merge_heads, reference, split_heads)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("seq_q, seq_k", [(24, 24), (6, 6)])
def test_attention_is_torchs_scaled_dot_product_attention(causal, seq_q, seq_k):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, n, 4, generator=g, dtype=torch.float64)
               for n in (seq_q, seq_k, seq_k))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert (attention(q, k, v, causal) - want).abs().max() < 1e-14


def test_causal_attention_ignores_later_tokens():
    X, _ = make_tokens()
    block = make_block()
    out = block(X).detach()
    changed = X.clone()
    # every token from position 10 on (not by a constant: LayerNorm would take it away)
    changed[:, 10:] += torch.linspace(0, 1, X.shape[-1], dtype=X.dtype)
    again = block(changed).detach()
    assert torch.equal(out[:, :10], again[:, :10])
    assert (out[:, 10:] - again[:, 10:]).abs().max() > 0.1
    open_block = make_block(causal=False)
    assert (open_block(X) - open_block(changed))[:, :10].abs().max() > 0.1


def test_heads_split_and_merge_back():
    x = torch.arange(2 * 5 * 12, dtype=torch.float64).view(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    assert torch.equal(heads[0, 1, 2], x[0, 2, 4:8])       # head 1 is features 4..7
    assert torch.equal(merge_heads(heads), x)


def test_every_split_of_the_part_divides_for_one_to_four_ranks():
    for n in (1, 2, 3, 4):
        assert N_HEADS % n == 0 and D_FF % n == 0 and SEQ % (2 * n) == 0, n


def test_same_seed_same_block_and_reference_gradients_are_autograds():
    X, Y = make_tokens()
    a, b = make_block(seed=3), make_block(seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.ln1.weight, make_block(seed=4).ln1.weight)
    ref = reference(a, X, Y)
    assert set(ref.grads) == {name for name, _ in b.named_parameters()}
    # one gradient entry, by central difference
    weight = b.attn.q.weight
    eps = 1e-6
    with torch.no_grad():
        weight[3, 5] += eps
        up = ((b(X) - Y) ** 2).mean().item()
        weight[3, 5] -= 2 * eps
        down = ((b(X) - Y) ** 2).mean().item()
    assert ref.grads["attn.q.weight"][3, 5].item() == pytest.approx((up - down) / (2 * eps),
                                                                    rel=1e-6)
    assert ref.input_grad.shape == X.shape and ref.output.shape == X.shape


def test_heads_that_do_not_split_the_width_are_refused():
    with pytest.raises(ValueError, match="does not split into 5 heads"):
        make_block(n_heads=5)
