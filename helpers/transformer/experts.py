"""Notebook 22's mixture of experts: the layer, its routing, and the single-process reference.

    moe = make_moe(n_experts(world_size))          # the same weights on every rank (a seed)
    X, Y = flat_tokens()                           # the block's 2 × 24 tokens as 48 rows
    x = X[token_slice(rank, world_size)]           # each rank routes its own tokens
    routing = route(moe.router(x), n_experts, capacity(cf, len(x), TOP_K, n_experts))
    ref = reference(moe, X, Y, world_size, cf)     # one process: output, loss, grads, dL/dX

The layer takes the place of the block's MLP: y = x + Σ_slots gate · expert(x) (the block's
second residual; LayerNorm left out). Routing: a Linear d_model → n_experts (no bias),
softmax, top-k; with k = 2 the two gates are renormalised to sum to 1 (Mixtral), with k = 1
the gate is the probability itself (Switch). Capacity per expert and per rank:
ceil(cf · tokens · k / n_experts); an assignment beyond it is dropped before it is sent, and
its contribution is zero (a token with every slot dropped leaves as its residual x).
First choices fill the capacity before second choices, each in token order (GShard).
The distributed exchange itself is written in the notebook's `%%px` cells.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from helpers.training.tensor_parallel import max_diff  # noqa: F401  (the checks call it here)
from helpers.transformer.block import BATCH, D_FF, D_MODEL, DTYPE, SEQ, make_tokens

EXPERTS_PER_RANK = 2
TOP_K = 2
TOKENS = BATCH * SEQ            # 48 tokens, each rank routing 48 / world_size of them
CAPACITY_FACTORS = (1.25, 0.75)  # the run's, then the tighter one of the trade-off


def n_experts(world_size: int, per_rank: int = EXPERTS_PER_RANK) -> int:
    """Experts in the layer: `per_rank` on each rank."""
    if world_size < 1 or per_rank < 1:
        raise ValueError(f"world size {world_size} and experts per rank {per_rank} "
                         "must be at least 1")
    return world_size * per_rank


def token_slice(rank: int, world_size: int, tokens: int = TOKENS) -> slice:
    """The rows of the flattened tokens that `rank` routes (a contiguous, even share)."""
    if tokens % world_size:
        raise ValueError(f"{tokens} tokens do not split evenly over {world_size} ranks")
    share = tokens // world_size
    return slice(rank * share, (rank + 1) * share)


def capacity(cf: float, tokens: int, k: int, n_experts: int) -> int:
    """How many assignments one expert accepts from one rank: ceil(cf · tokens · k / E)."""
    if cf <= 0:
        raise ValueError(f"capacity factor must be positive, got {cf}")
    return math.ceil(cf * tokens * k / n_experts - 1e-9)   # 1.25 · 24 · 2 / 4 is 15, not 16


def flat_tokens() -> tuple[torch.Tensor, torch.Tensor]:
    """The block's tokens X and targets Y (batch 2 × seq 24 × 48) as 48 rows of 48."""
    X, Y = make_tokens()
    return X.reshape(-1, D_MODEL), Y.reshape(-1, D_MODEL)


class MoE(nn.Module):
    """A router and `n_experts` MLPs (Linear → GELU → Linear, as the block's MLP)."""

    def __init__(self, n_experts: int, d_model: int = D_MODEL, d_ff: int = D_FF):
        super().__init__()
        self.router = nn.Linear(d_model, n_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))
            for _ in range(n_experts))


def make_moe(n_experts: int, d_model: int = D_MODEL, d_ff: int = D_FF, seed: int = 0,
             dtype: torch.dtype = DTYPE) -> MoE:
    """The layer with the same weights for the same seed, on every rank and here."""
    torch.manual_seed(seed)
    return MoE(n_experts, d_model, d_ff).to(dtype)


@dataclass
class Routing:
    expert: torch.Tensor     # (tokens, k) the chosen experts, best first
    gate: torch.Tensor       # (tokens, k) their weights (differentiable)
    kept: torch.Tensor       # (tokens, k) bool: under capacity (sent) or dropped

    @property
    def dropped(self) -> list[tuple[int, int]]:
        """(token, slot) of every dropped assignment, local token numbers."""
        return [tuple(ij) for ij in (~self.kept).nonzero().tolist()]


def route(logits: torch.Tensor, n_experts: int, cap: int, k: int = TOP_K,
          renormalise: bool | None = None) -> Routing:
    """Top-k of softmax(logits); gates renormalised when k > 1 (default); assignments
    over `cap` per expert dropped, first choices before second ones, in token order."""
    if not 1 <= k <= n_experts:
        raise ValueError(f"top-k needs 1 <= k <= {n_experts} experts, got k = {k}")
    renormalise = k > 1 if renormalise is None else renormalise
    probs = torch.softmax(logits, dim=-1)
    top, expert = probs.topk(k, dim=-1)
    gate = top / top.sum(dim=-1, keepdim=True) if renormalise else top
    kept = torch.zeros_like(expert, dtype=torch.bool)
    used = [0] * n_experts
    for slot in range(k):                      # slot 0 (first choices) has priority
        for t, e in enumerate(expert[:, slot].tolist()):
            if used[e] < cap:
                used[e] += 1
                kept[t, slot] = True
    return Routing(expert, gate, kept)


def send_order(routing: Routing) -> tuple[torch.Tensor, torch.Tensor]:
    """(token, slot) of each row to send, kept assignments sorted by expert (then token,
    then slot): the rows for rank r's experts are contiguous, in expert order."""
    token, slot = routing.kept.nonzero(as_tuple=True)
    order = torch.sort(routing.expert[token, slot] * routing.kept.numel()
                       + token * routing.kept.shape[1] + slot).indices
    return token[order], slot[order]


def counts_per_expert(routing: Routing, n_experts: int) -> torch.Tensor:
    """Kept assignments per expert: what this rank sends to each expert (int64)."""
    return torch.bincount(routing.expert[routing.kept], minlength=n_experts)


def local_expert_of_rows(recv_counts: torch.Tensor, per_rank: int) -> torch.Tensor:
    """For each received row, which of this rank's experts it is for. `recv_counts` is
    the exchanged (source rank, local expert) counts, flat: the rows arrive in that order."""
    local = torch.arange(per_rank, device=recv_counts.device).repeat(
        recv_counts.numel() // per_rank)
    return torch.repeat_interleave(local, recv_counts)


@dataclass
class Reference:
    output: torch.Tensor                 # (tokens, d_model)
    loss: float
    grads: dict[str, torch.Tensor]       # by parameter name: router.weight, experts.e.0.weight…
    input_grad: torch.Tensor             # dL/dX
    counts: torch.Tensor                 # (world_size, n_experts) kept assignments
    dropped: list[list[tuple[int, int]]]  # per rank: (local token, slot) dropped


def reference(moe: MoE, X: torch.Tensor, Y: torch.Tensor, world_size: int, cf: float,
              k: int = TOP_K) -> Reference:
    """The layer in one process, with the same routing (the tokens routed in world_size
    groups, each with its own capacity), every expert applied to its tokens here: no
    exchange. The loss is the MSE over every token, as the ranks' summed shares make it."""
    E = len(moe.experts)
    X = X.detach().clone().requires_grad_(True)
    moe.zero_grad()
    out = X.clone()
    counts, dropped = [], []
    for r in range(world_size):
        mine = token_slice(r, world_size, len(X))
        x = X[mine]
        routing = route(moe.router(x), E, capacity(cf, len(x), k, E), k)
        counts.append(counts_per_expert(routing, E))
        dropped.append(routing.dropped)
        add = torch.zeros_like(x)
        for e in range(E):
            for slot in range(k):
                rows = ((routing.expert[:, slot] == e) & routing.kept[:, slot]).nonzero()[:, 0]
                if len(rows):
                    add = add.index_add(0, rows, routing.gate[rows, slot, None]
                                        * moe.experts[e](x[rows]))
        out = out.index_add(0, torch.arange(mine.start, mine.stop), add)
    loss = ((out - Y) ** 2).mean()
    loss.backward()
    grads = {name: p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
             for name, p in moe.named_parameters()}
    return Reference(out.detach(), loss.item(), grads, X.grad.detach(),
                     torch.stack(counts), dropped)


def uneven_model(input_split_sizes: Sequence[int], rank: int, row_bytes: int) -> int:
    """Bytes this rank sends in an all_to_all_single, the model for uneven splits: every
    split but its own (a rank keeps that piece). For even splits: (n − 1)/n · S."""
    return sum(rows for peer, rows in enumerate(input_split_sizes) if peer != rank) * row_bytes


def exchange_row(call: str, log, model: float) -> dict:
    """One block of counted calls as a row of the bytes table: its calls, S (the inputs'
    bytes), the ring model count_collectives gives (even splits), the model for the
    splits really used (`model`), and what gloo measured (None on NCCL)."""
    return {"call": call, "calls": log.calls, "size": sum(c.size for c in log.entries),
            "even_model": log.model_bytes, "model": model, "measured": log.measured_bytes}


def bytes_table(rows: Sequence[dict]) -> str:
    """The rows of `exchange_row` as text, one line each."""
    from helpers.training.measured import bytes_text

    lines = [f"{'':<22}{'calls':>6}{'S (B)':>9}{'even model':>12}{'model':>9}"
             f"{'measured':>10}"]
    for r in rows:
        lines.append(f"{r['call']:<22}{r['calls']:>6}{r['size']:>9,}{r['even_model']:>12,.0f}"
                     f"{r['model']:>9,.0f}{bytes_text(r['measured']):>10}")
    return "\n".join(lines)


def bytes_report(title: str, rows_by_rank: Sequence[Sequence[dict]], n: int):
    """✓ per rank when every row's measurement is its model plus gloo's headers."""
    from helpers.checks import Report
    from helpers.training.measured import measured_vs_model

    report = Report(title)
    for rank, rows in enumerate(rows_by_rank):
        verdicts = [measured_vs_model(r["measured"], r["model"], max(r["calls"], 1), n,
                                      r["call"]) for r in rows]
        oks = [ok for ok, _ in verdicts]
        report.add(rank, None if None in oks else all(oks), "; ".join(t for _, t in verdicts))
    return report
