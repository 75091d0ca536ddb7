"""Unit tests of notebook 27's planner (helpers/scale/planner.py, planner_runs.py): no
engines; the fake process group runs in fresh processes."""
from __future__ import annotations

import pytest

from helpers.scale import planner
from helpers.scale.planner_runs import (debug_counts, fastest_pair, fresh_process,
                                        local_shards, make_stack)
from helpers.transformer.block import make_block, make_tokens


def _llama(layers, h, ffn, kv=8, vocab=128256):
    head_dim = 128
    attn = 2 * h * h + 2 * h * kv * head_dim
    return layers * (attn + 3 * h * ffn + 2 * h) + 2 * vocab * h + h


def test_parameter_counts():
    assert planner.TOY.parameters() == sum(p.numel() for p in make_block().parameters())
    assert planner.LLAMA3_8B.parameters() == _llama(32, 4096, 14336)
    assert planner.LLAMA3_70B.parameters() == _llama(80, 8192, 28672)
    assert planner.LLAMA3_405B.parameters() == _llama(126, 16384, 53248)
    assert round(planner.LLAMA3_8B.parameters() / 1e9, 2) == 8.03


def test_tp_shard_counts_match_local_shards():
    for n in (2, 4):
        stack = local_shards(make_stack(2), rank=1, n=n)
        assert planner.toy(2, 4).parameters(tp=n) == sum(p.numel() for p in stack.parameters())
        X, _ = make_tokens()
        assert stack(X).shape == X.shape


def test_check_names_the_problem():
    with pytest.raises(ValueError, match="= 4, not the world size 2"):
        planner.check(planner.TOY, planner.Config(dp=2, tp=2), 2)
    with pytest.raises(ValueError, match="heads = 12 does not split into 8"):
        planner.check(planner.TOY, planner.Config(tp=8))
    with pytest.raises(ValueError, match="batch = 2 does not split into 4"):
        planner.check(planner.TOY, planner.Config(dp=4))
    with pytest.raises(ValueError, match="zero must be"):
        planner.check(planner.TOY, planner.Config(zero=4))


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_of_the_toy(n):
    toy, block = planner.toy(n, 2 * n), 18960 * 8
    [dp] = planner.collectives(toy, planner.Config(dp=n))
    assert (dp["kind"], dp["calls"], dp["size"]) == ("all_reduce", 1, n * block)
    assert dp["model"] == pytest.approx(2 * (n - 1) / n * n * block)
    tp = planner.totals(planner.collectives(toy, planner.Config(tp=n)))
    assert tp["calls"] == {"all_reduce": 6 * n}
    z3 = planner.collectives(toy, planner.Config(dp=n, zero=3))
    assert planner.totals(z3)["calls"] == {"all_gather": 2 * n, "reduce_scatter": n}
    assert planner.gloo_bytes(z3) == pytest.approx(4 * (n - 1) / n * n * block)
    act = 2 * n * 24 * 48 * 8 // 2
    for rank in range(n):
        pp = planner.collectives(toy, planner.Config(pp=n, m=2), rank=rank)
        assert sum(r["model"] for r in pp) == 2 * act * ((rank < n - 1) + (rank > 0))


@pytest.mark.parametrize("n", [2, 3, 4])
def test_zero_stages_bytes_are_comm_formula(n):
    """Stages 0–2: the planner's dp rows send what notebook 16's comm_formula says."""
    from helpers.training.zero import comm_formula
    toy = planner.toy(2, 2 * n)
    held = planner.sharded_shapes(toy, planner.Config(dp=n))
    for zero, stage in ((0, "DP"), (1, "ZeRO-1"), (2, "ZeRO-2")):
        rows = planner.collectives(toy, planner.Config(dp=n, zero=zero))
        assert planner.totals(rows)["model"] == pytest.approx(comm_formula(held, n, stage))


def test_memory_by_stage():
    toy, c = planner.toy(4, 8), planner.Config(dp=4)
    psi = 4 * 18960
    assert planner.memory(toy, c)["parameters"] == 8 * psi
    z3 = planner.memory(toy, planner.Config(dp=4, zero=3))
    assert (z3["parameters"], z3["gradients"], z3["optimizer state"]) == (
        8 * psi / 4, 8 * psi / 4, 16 * psi / 4)
    llama = planner.memory(planner.LLAMA3_8B, planner.Config(), recompute=True)
    assert llama["optimizer state"] == 12 * planner.LLAMA3_8B.parameters()


@pytest.mark.parametrize("seq", [8192, 131072])
def test_flops_per_token_count_attention(seq):
    """6N plus attention's Q·Kᵀ and scores·V, 2·s·h FLOP each a token and layer forward,
    three passes (12·L·s·h), four with recomputation; causal: (s + 1)/2 keys on average."""
    from dataclasses import replace
    shapes = replace(planner.LLAMA3_405B, seq=seq, batch=4)
    n = _llama(126, 16384, 53248)
    full = 12 * 126 * seq * 16384
    assert planner.attention_flops_per_token(shapes) == full
    assert planner.attention_flops_per_token(shapes, causal=True) == full * (seq + 1) / (2 * seq)
    assert planner.attention_flops_per_token(shapes, recompute=True) == full * 4 / 3
    assert planner.flops_per_token(shapes) == 6 * n + full
    assert planner.flops_per_token(shapes, recompute=True) == 8 * n + full * 4 / 3
    assert planner.step_flops(shapes) == (6 * n + full) * 4 * seq
    # the attention term against 6N, as the planner counts both: under a tenth at 8,192
    # tokens, above 6N at 131,072 (notebook 27 says so)
    attention = planner.attention_flops_per_token(shapes)
    six_n = planner.flops_per_token(shapes) - attention
    assert (attention < 0.1 * six_n) if seq == 8192 else (attention > six_n)


def test_comm_us_and_link_fits():
    fits = planner.link_fits(alpha_us=5.0, beta_gbps=50.0)
    row = {"kind": "all_reduce", "calls": 2, "size": 10**6, "group_size": 4}
    one = 5.0 * 6 + 1.5 * 10**6 / 50e3
    assert planner.comm_us([row], fits) == pytest.approx(2 * one)
    assert planner.call_us(fits, "send", 10**6, 2) == pytest.approx(5.0 + 10**6 / 50e3)


def test_debug_counts_and_fastest_pair():
    from torch.distributed.tensor.debug import CommDebugMode
    with CommDebugMode() as comm:
        pass
    assert debug_counts(comm) == {}
    step, compute = fastest_pair(lambda: None, lambda: None, 3, lambda: None)
    assert step >= 0 and compute >= 0


def _fake_step(dp, tp):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from helpers.scale.planner_runs import debug_counts, make_stack, tp_plan
    from helpers.transformer.block import loss_fn, make_tokens
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=dp * tp)
    ones = torch.ones(3)
    dist.all_reduce(ones)
    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(make_stack(1, d_model=64, n_heads=16, d_ff=128), mesh["tp"],
                               tp_plan(1))
    fully_shard(model, mesh=mesh["dp"])
    X, Y = make_tokens(d_model=64)
    with CommDebugMode() as comm:
        loss_fn(model(X), Y).backward()
    return {"world": dist.get_world_size(), "counts": debug_counts(comm),
            "all_reduce_left": ones.tolist()}


@pytest.mark.parametrize("dp, tp", [(2, 2), (128, 8)])
def test_fake_process_group_counts(dp, tp):
    """The fake process group at 4 and 1,024 ranks: an all_reduce leaves the tensor as it
    was; CommDebugMode counts what the planner says for parallelize_module + fully_shard."""
    got = fresh_process(_fake_step, dp=dp, tp=tp)
    assert got["world"] == dp * tp
    assert got["all_reduce_left"] == [1.0, 1.0, 1.0]
    wide = planner.Shapes("w", layers=1, hidden=64, heads=16, ffn=128, seq=24, batch=2 * dp,
                          biases=True, norm_params=2, element_bytes=8)
    plan = planner.collectives(wide, planner.Config(dp=dp, tp=tp, zero=3))
    assert got["counts"] == planner.totals(plan)["calls"] == {
        "all_reduce": 6, "all_gather": 1, "reduce_scatter": 1}


def _sp_counts(tp, layers):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from helpers.scale.planner_runs import debug_counts, make_stack, sp_plan
    from helpers.transformer.block import make_tokens
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    model = parallelize_module(make_stack(layers), init_device_mesh("cpu", (tp,)),
                               sp_plan(layers))
    X, Y = make_tokens()
    mine = slice(0, X.shape[1] // tp)                   # this rank's tokens (Shard(1))
    with CommDebugMode() as forward:
        out = model(X[:, mine].clone().requires_grad_(True))
    with CommDebugMode() as backward:
        ((out - Y[:, mine]) ** 2).sum().backward()
    dist.destroy_process_group()
    return {"forward": debug_counts(forward), "backward": debug_counts(backward)}


@pytest.mark.parametrize("tp, layers", [(2, 1), (4, 2)])
def test_sequence_parallel_counts_against_torch(tp, layers):
    """torch's sequence-parallel plan (notebook 20's), counted by CommDebugMode on the fake
    process group, against the planner's counts by phase."""
    got = fresh_process(_sp_counts, tp=tp, layers=layers)
    plan = planner.collectives(planner.toy(layers, 2), planner.Config(tp=tp, sp=True))
    for phase in ("forward", "backward"):
        want = planner.totals([r for r in plan if r["phase"] == phase])["calls"]
        assert got[phase] == want == {"all_gather": 2 * layers, "reduce_scatter": 2 * layers}


def test_sequence_parallel_counts_of_llama():
    """Llama's gated MLP adds a column layer, not a region: still 2 + 2 a layer a phase."""
    c = planner.Config(tp=8, sp=True)
    plan = planner.collectives(planner.LLAMA3_8B, c)
    for phase in ("forward", "backward"):
        calls = planner.totals([r for r in plan if r["phase"] == phase])["calls"]
        assert calls == {"all_gather": 2 * 32, "reduce_scatter": 2 * 32}


def _simulate_ranks(n):
    import torch
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=n)
    with LocalTensorMode(n) as mode:
        t = mode.rank_map(lambda r: torch.tensor([r + 1.0]))
        dist.all_reduce(t)
        held = {r: t._local_tensors[r].item() for r in range(n)}
    dist.destroy_process_group()
    return held


@pytest.mark.parametrize("n", [4, 8])
def test_local_tensor_mode_all_reduce(n):
    """LocalTensorMode holds every simulated rank's value in one process; its all_reduce
    leaves the sum on each."""
    held = fresh_process(_simulate_ranks, n=n)
    assert held == {str(r): n * (n + 1) / 2 for r in range(n)}
