"""The gloo cases of the ledger for notebook 20 (see claim_cases.py for the conventions:
a case runs on every disposable rank as case(rank, world_size); its expectation gets every
rank's outcome and the world size, and fails when torch or gloo behave otherwise)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _returned, case, expect  # noqa: F401

if TYPE_CHECKING:   # a case's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist


@case("20-single-collectives-cut-dim-0", sizes=(2, 4))
def single_collectives_cut_dim_0(rank, world_size):
    gathered = torch.empty(world_size * 2, 3)
    dist.all_gather_single(gathered, torch.full((2, 3), float(rank)))
    stacked = torch.arange(world_size * 2 * 3, dtype=torch.float64).view(world_size * 2, 3)
    piece = torch.empty(2, 3, dtype=torch.float64)
    dist.reduce_scatter_single(piece, stacked)
    return {"gathered": gathered[:, 0].tolist(), "piece": piece.tolist(),
            "expected_piece": (world_size * stacked[2 * rank:2 * rank + 2]).tolist()}


@expect("20-single-collectives-cut-dim-0")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen["gathered"] == [float(r) for r in range(n) for _ in range(2)], seen
        assert seen["piece"] == seen["expected_piece"], seen


@case("20-tensor-forms-deprecated", sizes=(2, 4))
def tensor_forms_deprecated(rank, world_size):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.empty(world_size * 2)
        dist.all_gather_into_tensor(out, torch.ones(2))
        piece = torch.empty(2)
        dist.reduce_scatter_tensor(piece, torch.ones(world_size * 2))
    return {"gathered": out.tolist(), "piece": piece.tolist(),
            "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}


@expect("20-tensor-forms-deprecated")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen["gathered"] == [1.0] * 2 * n and seen["piece"] == [float(n)] * 2, seen
        text = " ".join(seen["warnings"])
        assert "FutureWarning" in text and "all_gather_single" in text, text
        assert "reduce_scatter_single" in text, text


@case("20-gloo-reduce-scatter-writes-all-reduce-bytes", sizes=(2, 4))
def reduce_scatter_bytes(rank, world_size):
    from helpers.training.comm import count_collectives

    size = 8192 * world_size                       # float64 values: 64 KiB per rank and more
    measured = {}
    with count_collectives() as log:
        dist.reduce_scatter_single(torch.empty(size // world_size, dtype=torch.float64),
                                   torch.ones(size, dtype=torch.float64))
    measured["reduce_scatter_single"] = (log.measured_bytes, log.model_bytes)
    with count_collectives() as log:
        dist.all_reduce(torch.ones(size, dtype=torch.float64))
    measured["all_reduce"] = (log.measured_bytes, log.model_bytes)
    with count_collectives() as log:
        dist.all_gather_single(torch.empty(size, dtype=torch.float64),
                               torch.ones(size // world_size, dtype=torch.float64))
    measured["all_gather_single"] = (log.measured_bytes, log.model_bytes)
    return {"S": size * 8, **measured}


@expect("20-gloo-reduce-scatter-writes-all-reduce-bytes")
def _(outcomes, n):
    from helpers.bench.wire import agrees

    for o in outcomes:
        seen = _returned(o)
        rs, rs_model = seen["reduce_scatter_single"]
        ar, ar_model = seen["all_reduce"]
        ag, ag_model = seen["all_gather_single"]
        assert rs_model == ag_model == (n - 1) / n * seen["S"] and ar_model == 2 * rs_model
        assert rs == ar, seen                       # exactly an all_reduce's bytes
        assert rs > 1.9 * rs_model and agrees(rs, ar_model, 1, n), seen
        assert agrees(ag, ag_model, 1, n), seen     # all_gather: the ring's bytes + headers


@case("20-dtensor-shape-is-global", sizes=(2, 4))
def dtensor_shape_is_global(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world_size,))
    layer = parallelize_module(torch.nn.Linear(8, 4 * world_size), mesh, ColwiseParallel())
    return {"shape": list(layer.weight.shape), "local": list(layer.weight.to_local().shape),
            "type": type(layer.weight.data).__name__}


@expect("20-dtensor-shape-is-global")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen["shape"] == [4 * n, 8] and seen["local"] == [4, 8], seen
        assert seen["type"] == "DTensor", seen


@case("20-sequence-parallel-layernorm-grad-partial", sizes=(2, 4))
def layernorm_grad_partial(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

    mesh = init_device_mesh("cpu", (world_size,))
    torch.manual_seed(0)
    full = torch.randn(2, 3 * world_size, 8, dtype=torch.float64)
    ln = torch.nn.LayerNorm(8).double()
    whole = torch.nn.LayerNorm(8).double()
    (whole(full) ** 2).sum().backward()
    ln = parallelize_module(ln, mesh, SequenceParallel())
    (ln(full[:, 3 * rank:3 * rank + 3]).to_local() ** 2).sum().backward()
    grad = ln.weight.grad
    local = grad.to_local().clone()
    summed = local.clone()
    dist.all_reduce(summed)
    return {"placement": repr(grad.placements[0]),
            "local_vs_whole": (local - whole.weight.grad).abs().max().item(),
            "full_vs_whole": (grad.full_tensor() - whole.weight.grad).abs().max().item(),
            "summed_vs_whole": (summed - whole.weight.grad).abs().max().item()}


@expect("20-sequence-parallel-layernorm-grad-partial")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen["placement"] == "Partial(sum)", seen
        assert seen["local_vs_whole"] > 1e-3, seen      # this rank's tokens only
        assert seen["full_vs_whole"] < 1e-12 and seen["summed_vs_whole"] < 1e-12, seen


@case("20-global-shape-heads-wrong", sizes=(2, 3, 4))
def global_shape_heads_wrong(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    from helpers.transformer.block import make_block, make_tokens

    mesh = init_device_mesh("cpu", (world_size,))
    X, _ = make_tokens()
    expected = make_block().attn(X)
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
            "o": RowwiseParallel()}
    attn = parallelize_module(make_block().attn, mesh, plan)
    try:
        got = attn(X)
    except RuntimeError as err:
        return {"error": str(err).splitlines()[0]}
    got = got.full_tensor() if hasattr(got, "full_tensor") else got
    return {"gap": (got - expected).abs().max().item()}


@expect("20-global-shape-heads-wrong")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        if (48 // n) % 12:                   # 48/n local features are not 12 heads
            assert "error" in seen and "invalid" in seen["error"], seen
        else:
            assert seen.get("gap", 0) > 1e-3, seen   # runs, silently wrong
