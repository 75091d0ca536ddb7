"""The toy of part 3 (notebooks 20–22): one pre-norm transformer block in float64.

    X, Y = make_tokens()                  # (batch, seq, d_model), the same on every rank
    block = make_block()                  # the same initial weights for the same seed
    ref = reference(make_block(), X, Y)   # output, loss, every parameter's gradient, dL/dX

    h = X + attn(LN1(X))                  # multi-head self-attention, causal by default
    out = h + MLP(LN2(h))                 # Linear(d_model → d_ff) → GELU → Linear(d_ff → d_model)

The sizes divide evenly for 1, 2, 3 and 4 ranks however the block is split: 12 heads, a
hidden width of 96, a sequence of 24 tokens (also in 2 × world_size chunks, as the zig-zag
split of notebook 21 needs). No dropout, so every split can be checked to ~1e-12.
Runs on the engines and in the notebook alike: torch only, no ipyparallel.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

BATCH, SEQ, D_MODEL, N_HEADS, D_FF = 2, 24, 48, 12, 96
DTYPE = torch.float64


def make_tokens(batch: int = BATCH, seq: int = SEQ, d_model: int = D_MODEL, seed: int = 0,
                dtype: torch.dtype = DTYPE) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of token vectors X and regression targets Y, both (batch, seq, d_model)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(batch, seq, d_model, generator=g, dtype=dtype)
    Y = torch.randn(batch, seq, d_model, generator=g, dtype=dtype)
    return X, Y


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(batch, seq, n_heads · head_dim) → (batch, n_heads, seq, head_dim)."""
    batch, seq, width = x.shape
    return x.view(batch, seq, n_heads, width // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(batch, n_heads, seq, head_dim) → (batch, seq, n_heads · head_dim)."""
    batch, n_heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, n_heads * head_dim)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              causal: bool = True) -> torch.Tensor:
    """softmax(q kᵀ / √d) v per head, written out (what scaled_dot_product_attention does)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool,
                            device=q.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class SelfAttention(nn.Module):
    """Multi-head self-attention: q, k, v and the output projection o, each a Linear."""

    def __init__(self, d_model: int = D_MODEL, n_heads: int = N_HEADS, causal: bool = True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} does not split into {n_heads} heads")
        self.n_heads, self.causal = n_heads, causal
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # n_heads follows the weight's rows, so a module holding some heads' rows still works
        heads = self.q.weight.shape[0] * self.n_heads // self.o.weight.shape[0]
        q, k, v = (split_heads(proj(x), heads) for proj in (self.q, self.k, self.v))
        return self.o(merge_heads(attention(q, k, v, self.causal)))


class Block(nn.Module):
    """x + attn(LN1(x)), then h + MLP(LN2(h)): the pre-norm block of GPT-2 and Llama."""

    def __init__(self, d_model: int = D_MODEL, n_heads: int = N_HEADS, d_ff: int = D_FF,
                 causal: bool = True):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = SelfAttention(d_model, n_heads, causal)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attn(self.ln1(x))
        return h + self.mlp(self.ln2(h))


def make_block(d_model: int = D_MODEL, n_heads: int = N_HEADS, d_ff: int = D_FF,
               causal: bool = True, seed: int = 0, dtype: torch.dtype = DTYPE) -> Block:
    """The block with the same initial weights for the same seed (LayerNorms perturbed,
    so that their gradients are not all alike)."""
    torch.manual_seed(seed)
    block = Block(d_model, n_heads, d_ff, causal).to(dtype)
    with torch.no_grad():
        for ln in (block.ln1, block.ln2):
            ln.weight.add_(0.1 * torch.randn_like(ln.weight))
            ln.bias.add_(0.1 * torch.randn_like(ln.bias))
    return block


def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error over every token and feature."""
    return ((output - target) ** 2).mean()


@dataclass
class BlockReference:
    output: torch.Tensor                 # (batch, seq, d_model)
    loss: float
    grads: dict[str, torch.Tensor]       # every parameter's gradient, by state-dict name
    input_grad: torch.Tensor             # dL/dX


def reference(block: nn.Module, X: torch.Tensor, Y: torch.Tensor) -> BlockReference:
    """Forward and backward of the whole block in one process: what every split must match."""
    X = X.detach().clone().requires_grad_(True)
    block.zero_grad()
    output = block(X)
    loss = loss_fn(output, Y)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in block.named_parameters()}
    return BlockReference(output.detach(), loss.item(), grads, X.grad.detach())
