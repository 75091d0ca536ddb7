"""Notebook 20's plumbing: which heads, features and tokens a rank holds, the shards, the
activation meter, and the checks against the single-process reference.

The taught code (the tensor- and sequence-parallel block, Megatron's f and g, sequence
parallelism's g and ḡ: the all_gather and reduce_scatter along the sequence) lives in the
notebook's `%%px` cells; this module prepares, measures and checks.

    heads = my_heads(rank, n)                # this rank's heads: rows of q, k, v
    tokens = my_tokens(rank, n)              # this rank's tokens (dim 1) under sequence parallelism
    W, b = column_shard(block.attn.q, rank, n)
    with ActivationMeter(model) as meter:    # bytes autograd saves for backward, per region
        out = model(x)
    diffs = grad_diffs(pulled_grads, ref, rank, n)
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

import torch
from torch import nn

from helpers.training.measured import as_gloo_runs
from helpers.training.tensor_parallel import max_diff
from helpers.transformer.block import (D_FF, D_MODEL, N_HEADS, SEQ, BlockReference, attention,
                                       merge_heads, split_heads)

HEAD_DIM = D_MODEL // N_HEADS

# The hand-built block's parameter names → the reference block's (make_block's state dict).
REFERENCE_NAME = {"ln1.weight": "ln1.weight", "ln1.bias": "ln1.bias",
                  "ln2.weight": "ln2.weight", "ln2.bias": "ln2.bias",
                  **{f"{p}.{w}": f"attn.{p}.{w}" for p in "qkvo" for w in ("weight", "bias")},
                  "fc1.weight": "mlp.0.weight", "fc1.bias": "mlp.0.bias",
                  "fc2.weight": "mlp.2.weight", "fc2.bias": "mlp.2.bias"}
# Parameters every rank holds whole: the LayerNorms and the biases added after a reduction.
REPLICATED = ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "o.bias", "fc2.bias")


def _even(what: str, total: int, n: int) -> int:
    if n < 1:
        raise ValueError(f"the tensor-parallel size must be at least 1, got {n}")
    if total % n:
        raise ValueError(f"{total} {what} do not split evenly over {n} ranks")
    return total // n


def _span(what: str, total: int, rank: int, n: int) -> slice:
    k = _even(what, total, n)
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is not in 0..{n - 1}")
    return slice(rank * k, (rank + 1) * k)


def my_heads(rank: int, n: int, n_heads: int = N_HEADS) -> range:
    """The attention heads rank `rank` computes when `n_heads` are split over n ranks."""
    span = _span("heads", n_heads, rank, n)
    return range(span.start, span.stop)


def head_rows(rank: int, n: int, n_heads: int = N_HEADS, head_dim: int = HEAD_DIM) -> slice:
    """The rows of q, k, v (and columns of o) that hold rank `rank`'s heads."""
    heads = my_heads(rank, n, n_heads)
    return slice(heads.start * head_dim, heads.stop * head_dim)


def my_features(rank: int, n: int, d_ff: int = D_FF) -> slice:
    """The MLP's hidden features rank `rank` holds: rows of fc1, columns of fc2."""
    return _span("hidden features", d_ff, rank, n)


def my_tokens(rank: int, n: int, seq: int = SEQ) -> slice:
    """The positions along the sequence (dim 1) rank `rank` holds under sequence parallelism."""
    return _span("tokens", seq, rank, n)


def column_shard(layer: nn.Linear, rank: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank `rank`'s rows of the weight and of the bias (its output features), as copies.
    For q, k, v these rows are whole heads (`head_rows`): a split inside a head is refused."""
    if layer.out_features == D_MODEL and layer.in_features == D_MODEL:
        rows = head_rows(rank, n)
    else:
        rows = _span("output features", layer.out_features, rank, n)
    return layer.weight.detach()[rows].clone(), layer.bias.detach()[rows].clone()


def row_shard(layer: nn.Linear, rank: int, n: int) -> torch.Tensor:
    """Rank `rank`'s columns of the weight (its input features: whole heads for o), a copy."""
    if layer.in_features == D_MODEL:
        cols = head_rows(rank, n)
    else:
        cols = _span("input features", layer.in_features, rank, n)
    return layer.weight.detach()[:, cols].clone()


def copy_module(module: nn.Module) -> nn.Module:
    """A copy with its own parameters (a replicated LayerNorm)."""
    return copy.deepcopy(module)


def grads_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's gradient, by name, as copies (a DTensor's: its local shard)."""
    def local(t: torch.Tensor) -> torch.Tensor:
        return (t.to_local() if hasattr(t, "to_local") else t).detach().clone()
    return {name: local(p.grad) for name, p in model.named_parameters()}


def expected_grad(name: str, ref: BlockReference, rank: int, n: int) -> torch.Tensor:
    """The slice of the reference gradient that rank `rank` must hold for parameter `name`
    (a hand-built name, or make_block's)."""
    full_name = REFERENCE_NAME.get(name, name)
    grad = ref.grads[full_name]
    layer, what = full_name.rsplit(".", 1)
    if full_name in ("attn.o.bias", "mlp.2.bias") or layer.startswith("ln"):
        return grad
    if layer in ("attn.q", "attn.k", "attn.v"):
        return grad[head_rows(rank, n)]
    if layer == "attn.o":
        return grad[:, head_rows(rank, n)]
    if layer == "mlp.0":
        return grad[my_features(rank, n)]
    if layer == "mlp.2":
        return grad[:, my_features(rank, n)]
    raise KeyError(f"no parameter {name!r} in the block")


def grad_diffs(grads: Mapping[str, Any], ref: BlockReference, rank: int,
               n: int) -> dict[str, float]:
    """|pulled gradient − the reference's slice| for every parameter of one rank."""
    return {name: max_diff(g, expected_grad(name, ref, rank, n)) for name, g in grads.items()}


def worst(diffs: Mapping[str, float]) -> tuple[str, float]:
    """The parameter with the largest gap, and the gap."""
    name = max(diffs, key=diffs.get)
    return name, diffs[name]


# ---------------------------------------------------------------- torch's plan
class LocalHeadsAttention(nn.Module):
    """The block's attention, its heads counted from q's output (head size fixed): under
    `parallelize_module` q.weight is a DTensor whose shape is the whole tensor's."""

    def __init__(self, attn: nn.Module):
        super().__init__()
        self.q, self.k, self.v, self.o = attn.q, attn.k, attn.v, attn.o
        self.head_dim, self.causal = attn.q.out_features // attn.n_heads, attn.causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (proj(x) for proj in (self.q, self.k, self.v))
        local_heads = q.shape[-1] // self.head_dim          # 12 / world_size
        q, k, v = (split_heads(t, local_heads) for t in (q, k, v))
        return self.o(merge_heads(attention(q, k, v, self.causal)))


# ---------------------------------------------------------------- activation memory
class ActivationMeter:
    """Bytes of the tensors autograd saves for backward while the block runs forward,
    by region: the module whose forward last started names the region ("layernorm" for
    LayerNorms, "tensor-parallel" for the rest), so the attention core between v and o
    counts with them. A storage saved twice (q, k and v all save their input) counts once;
    parameters are not activations and are left out.
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.region = "outside"
        self.seen: dict[int, tuple[str, int]] = {}
        self._handles: list[Any] = []
        self._hooks: Any = None

    def _tag(self, module: nn.Module) -> None:
        self.region = "layernorm" if isinstance(module, nn.LayerNorm) else "tensor-parallel"

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self._parameters and key not in self.seen:
            self.seen[key] = (self.region, storage.nbytes())
        return tensor

    def __enter__(self) -> "ActivationMeter":
        self._parameters = {(p.to_local() if hasattr(p, "to_local") else p)
                            .untyped_storage().data_ptr() for p in self.model.parameters()}
        for module in self.model.modules():
            if not list(module.children()):                    # the leaves: Linear, LayerNorm…
                self._handles.append(module.register_forward_pre_hook(
                    lambda m, args: self._tag(m)))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)
        for handle in self._handles:
            handle.remove()

    def by_region(self) -> dict[str, int]:
        """{region: bytes saved}, every region seen (and "total")."""
        table: dict[str, int] = {}
        for region, nbytes in self.seen.values():
            table[region] = table.get(region, 0) + nbytes
        table["total"] = sum(table.values())
        return table


# ---------------------------------------------------------------- bytes on the wire
def gloo_model(row: Mapping[str, Any]) -> float:
    """A row's ring model with each reduce_scatter counted as the all_reduce gloo runs in
    its place (twice the ring's (n−1)/n·S): what gloo's measurement is held against."""
    return sum(as_gloo_runs(name, c["model"]) for name, c in row["collectives"].items())


def wire_report(title: str, rows_by_rank: Any, n: int):
    """✓ per rank when every row wrote what `gloo_model` says plus gloo's headers
    (`helpers.bench.wire.agrees`); the ring model beside it."""
    from helpers.bench.wire import agrees
    from helpers.checks import Report
    from helpers.training.measured import NOT_MEASURED

    report = Report(title)
    for rank, rows in enumerate(rows_by_rank):
        if any(row["measured"] is None for row in rows):
            return report.note(NOT_MEASURED)
        oks, texts = [], []
        for row in rows:
            expected = gloo_model(row)
            oks.append(agrees(row["measured"], expected, row["calls"], n))
            texts.append(f"{row['layer']} {row['phase']}: measured {row['measured']:,} B, "
                         f"ring model {row['model']:,.0f} B"
                         + (f", as gloo runs it {expected:,.0f} B" if expected != row["model"]
                            else ""))
        report.add(rank, all(oks), "; ".join(texts))
    return report


def against_hand(theirs: Any, hand: Any, n: int) -> list[dict]:
    """torch's rows (forward, backward, grad sync: `log_row`s, no call counted) with the
    model of the hand-built TP + SP calls of the same phase; its grad sync is one all_reduce
    per LayerNorm parameter (`full_tensor()` of each Partial gradient) in the model."""
    from helpers.bench.nccl_tests import model_sent

    by_phase = {row["phase"]: row for row in hand if row["layer"] == "TP + SP"}
    rows = []
    for row in theirs:
        if row["phase"] == "grad sync":
            size = D_MODEL * 8
            rows.append({**row, "calls": 4, "collectives": {},
                         "model": 4 * model_sent("all_reduce", size, n, 0, 0)})
        else:
            same = by_phase[row["phase"]]
            rows.append({**row, "calls": same["calls"], "model": same["model"],
                         "collectives": same["collectives"]})
    return rows


def torch_vs_hand_text(hand: Any, theirs: Any) -> str:
    """Per phase: the hand-built TP + SP block's calls and bytes beside parallelize_module's
    (whose functional collectives no counter sees)."""
    from helpers.training.measured import bytes_text

    lines = [f"{'phase':<11}{'by hand: calls':>15}{'model: ring (B)':>17}{'measured (B)':>14}"
             f"{'torch: calls seen':>19}{'measured (B)':>14}"]
    mine = {row["phase"]: row for row in hand if row["layer"] == "TP + SP"}
    for t in theirs:
        h = mine[t["phase"]]
        lines.append(f"{t['phase']:<11}{h['calls']:>15}{bytes_text(h['model']):>17}"
                     f"{bytes_text(h['measured']):>14}{t['calls']:>19}"
                     f"{bytes_text(t['measured']):>14}")
    return "\n".join(lines)


def memory_text(tables: Any) -> str:
    """Each rank's {scheme: {region: bytes}} as one text (`per_rank_text`)."""
    from helpers.training.measured import per_rank_text

    texts = []
    for table in tables:
        regions = [r for r in next(iter(table.values())) if r != "total"] + ["total"]
        lines = [f"{'':<13}" + "".join(f"{r:>17}" for r in regions)]
        for scheme, row in table.items():
            lines.append(f"{scheme:<13}" + "".join(f"{row.get(r, 0):>15,} B" for r in regions))
        texts.append("\n".join(lines))
    return per_rank_text(texts)


def bytes_table(rows: Any) -> str:
    """`log_row`s (block, phase) as a text table: each collective's calls, S, the ring
    model's bytes and the measured ones (gloo; "not measured" on NCCL)."""
    from helpers.training.measured import bytes_text

    lines = [f"{'block':<9}{'phase':<11}{'collective':<23}{'calls':>6}{'S (B)':>8}"
             f"{'model: ring (B)':>17}{'measured: gloo (B)':>20}"]
    model, measured = 0.0, 0
    for row in rows:
        for name, c in row["collectives"].items():
            lines.append(f"{row['layer']:<9}{row['phase']:<11}{name:<23}{c['calls']:>6}"
                         f"{c['size']:>8}{bytes_text(c['model']):>17}"
                         f"{bytes_text(c['measured']):>20}")
        model += row["model"]
        measured = None if None in (measured, row["measured"]) else measured + row["measured"]
    lines.append(f"{'total':<57}{bytes_text(model):>17}{bytes_text(measured):>20}")
    return "\n".join(lines)
