"""The gloo cases of the ledger for notebook 27 (see claim_cases.py for the conventions:
a case runs on every disposable rank as case(rank, world_size); its expectation gets every
rank's outcome and the world size, and fails when torch or gloo behave otherwise)."""
from __future__ import annotations

from claim_cases import _returned, case, expect




@case("27-fsdp2-gathers-twice-per-unit", sizes=(2, 4))
def fsdp2_gathers_twice_per_unit(rank, world_size):
    """fully_shard on each of 3 toy blocks, then on the stack: the collectives of one
    forward and backward (CommDebugMode), and the bytes this rank wrote in forward."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.debug import CommDebugMode

    from helpers.bench.wire import Wire
    from helpers.scale.planner_runs import debug_counts, make_stack
    from helpers.transformer.block import loss_fn, make_tokens
    stack = make_stack(3)
    for block in stack:
        fully_shard(block)
    fully_shard(stack)
    X, Y = make_tokens()
    wire = Wire()
    with CommDebugMode() as forward:
        wire.start()
        out = stack(X)
        wire.stop()
    with CommDebugMode() as backward:
        loss_fn(out, Y).backward()
    return {"forward": debug_counts(forward), "backward": debug_counts(backward),
            "sent": wire.sent}


@expect("27-fsdp2-gathers-twice-per-unit")
def _(outcomes, n):
    from helpers.bench.wire import agrees
    block_bytes = 18960 * 8
    for o in outcomes:
        got = _returned(o)
        assert got["forward"] == {"all_gather": 3}, got
        assert got["backward"] == {"all_gather": 3, "reduce_scatter": 3}, got
        assert agrees(got["sent"], 3 * (n - 1) / n * block_bytes, 3, n), got["sent"]


@case("27-parallelize-module-all-reduces", sizes=(2, 4))
def parallelize_module_all_reduces(rank, world_size):
    """parallelize_module (q, k, v and the first MLP layer column-wise, o and the second
    row-wise) on one toy block: the collectives of its forward and of its backward."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module

    from helpers.scale.planner_runs import debug_counts, make_stack, tp_plan
    from helpers.transformer.block import loss_fn, make_tokens
    mesh = init_device_mesh("cpu", (world_size,))
    stack = parallelize_module(make_stack(1), mesh, tp_plan(1))
    X, Y = make_tokens()
    with CommDebugMode() as forward:
        loss = loss_fn(stack(X), Y)
    with CommDebugMode() as backward:
        loss.backward()
    return {"forward": debug_counts(forward), "backward": debug_counts(backward)}


@expect("27-parallelize-module-all-reduces")
def _(outcomes, n):
    for o in outcomes:
        got = _returned(o)
        assert got == {"forward": {"all_reduce": 2}, "backward": {"all_reduce": 4}}, got


@case("27-sp-plan-counts", sizes=(2, 4))
def sp_plan_counts(rank, world_size):
    """Notebook 20's sequence-parallel plan (planner_runs.sp_plan) on a stack of 2 toy
    blocks: the collectives of its forward and of its backward (CommDebugMode)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import parallelize_module

    from helpers.scale.planner_runs import debug_counts, make_stack, sp_plan
    from helpers.transformer.block import make_tokens
    model = parallelize_module(make_stack(2), init_device_mesh("cpu", (world_size,)),
                               sp_plan(2))
    X, Y = make_tokens()
    step = X.shape[1] // world_size
    mine = slice(rank * step, (rank + 1) * step)
    with CommDebugMode() as forward:
        out = model(X[:, mine].clone().requires_grad_(True))
    with CommDebugMode() as backward:
        ((out - Y[:, mine]) ** 2).sum().backward()
    return {"forward": debug_counts(forward), "backward": debug_counts(backward)}


@expect("27-sp-plan-counts")
def _(outcomes, n):
    for o in outcomes:
        got = _returned(o)
        want = {"all_gather": 4, "reduce_scatter": 4}
        assert got == {"forward": want, "backward": want}, got
