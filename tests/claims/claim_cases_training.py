"""The gloo cases of the ledger for notebooks 17-19 (TP, PP, 2-D); 14 is in
claim_cases_groups.py, 15-16 in claim_cases_data_parallel.py.

Registered into claim_cases.CASES (same conventions: a case runs on every disposable rank
as case(rank, world_size); its expectation gets every rank's outcome and the world size).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _returned, case, expect

if TYPE_CHECKING:   # a case's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist


@case("17-parallelize-module-functional")
def parallelize_module_functional(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    torch.manual_seed(0)
    hidden = 4 * world_size
    model = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Tanh(),
                                torch.nn.Linear(hidden, 4))
    x = torch.randn(6, 8)
    want = model(x).detach()
    mesh = init_device_mesh("cpu", (world_size,))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    calls = []
    originals = {name: getattr(dist, name) for name in ("all_reduce", "all_gather")}
    for name, function in originals.items():
        setattr(dist, name,
                lambda *a, _f=function, _n=name, **k: calls.append(_n) or _f(*a, **k))
    try:
        out = model(x)
    finally:
        for name, function in originals.items():
            setattr(dist, name, function)
    return {"type": type(out).__name__, "calls": calls,
            "dtensor": isinstance(model[0].weight, DTensor),
            "local": list(model[0].weight.to_local().shape),
            "same": torch.allclose(out * 1.0, want, atol=1e-6)}


@expect("17-parallelize-module-functional")
def _(outcomes, n):
    for o in outcomes:
        assert _returned(o) == {"type": "AsyncCollectiveTensor", "calls": [], "dtensor": True,
                                "local": [4, 8], "same": True}, o.result


@case("17-function-backward-needs-grad")
def function_backward_needs_grad(rank, world_size):
    calls = []

    class Copy(torch.autograd.Function):              # f: identity forward, sum backward
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            calls.append("f")
            dist.all_reduce(grad)
            return grad

    weight = torch.ones(2, 3, requires_grad=True)
    seen = {}
    for needs in (False, True):
        calls.clear()
        x = torch.ones(4, 3, requires_grad=needs)
        (Copy.apply(x) @ weight.T).sum().backward()
        seen[f"input needs grad={needs}"] = {"f backward": len(calls),
                                              "x.grad": None if x.grad is None
                                              else x.grad[0, 0].item()}
    return seen


@expect("17-function-backward-needs-grad")
def _(outcomes, n):
    for o in outcomes:
        assert _returned(o) == {"input needs grad=False": {"f backward": 0, "x.grad": None},
                                "input needs grad=True": {"f backward": 1,
                                                          "x.grad": 2.0 * n}}, o.result


@case("18-gpipe-scale-grads")
def gpipe_scale_grads(rank, world_size):
    import inspect
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 4) for _ in range(world_size)]
    module = layers[rank]
    last = rank == world_size - 1
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    grads = {}
    for name, make, scale in (("GPipe", ScheduleGPipe, True), ("GPipe", ScheduleGPipe, False),
                              ("1F1B", Schedule1F1B, True)):
        module.zero_grad()
        stage = PipelineStage(module, rank, world_size, torch.device("cpu"))
        loss_fn = torch.nn.functional.mse_loss
        schedule = make(stage, n_microbatches=4, loss_fn=loss_fn, scale_grads=scale)
        if rank == 0:
            schedule.step(x, target=y if last else None)
        elif last:
            schedule.step(target=y)
        else:
            schedule.step()
        grads[name, scale] = module.weight.grad.clone()
    default = inspect.signature(ScheduleGPipe.__init__).parameters["scale_grads"].default
    return {"default": default,
            "proportional": torch.allclose(grads["GPipe", False], 4 * grads["GPipe", True],
                                           rtol=1e-5),
            "1F1B same": torch.allclose(grads["1F1B", True], grads["GPipe", True], rtol=1e-5)}


@expect("18-gpipe-scale-grads")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen == {"default": True, "proportional": True, "1F1B same": True}, seen



@case("18-torch-schedule-order", sizes=(2, 4))
def torch_schedule_order(rank, world_size):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from helpers.training.pipeline import Timeline, compute_order, record_schedule
    from helpers.bench.wire import on_the_wire
    torch.manual_seed(0)
    module, cpu = torch.nn.Linear(4, 4), torch.device("cpu")
    loss_fn = torch.nn.functional.mse_loss
    seen = {}
    for name, make in (("GPipe", ScheduleGPipe), ("1F1B", Schedule1F1B)):
        for m in (world_size, 2 * world_size):          # m = p and m = 2p
            x, y = torch.randn(2 * m, 4), torch.randn(2 * m, 4)
            schedule = make(PipelineStage(module, rank, world_size, cpu), n_microbatches=m,
                            loss_fn=loss_fn)
            timeline = Timeline()
            with record_schedule(schedule, timeline):   # every forward_one_chunk, backward_...
                if rank == 0:
                    schedule.step(x)
                elif rank == world_size - 1:
                    schedule.step(target=y)
                else:
                    schedule.step()
            seen[f"{name} m={m}"] = compute_order(timeline.events)
    with on_the_wire() as wire:                         # m = p − 1: refused, nothing sent
        try:
            Schedule1F1B(PipelineStage(module, rank, world_size, cpu),
                         n_microbatches=world_size - 1, loss_fn=loss_fn)
            seen["m = p - 1"] = "accepted"
        except ValueError as err:
            seen["m = p - 1"] = f"ValueError: {err}"
    seen["bytes sent while refusing"] = wire.sent
    return seen


@expect("18-torch-schedule-order")
def _(outcomes, n):
    for o in outcomes:
        seen, s = _returned(o), o.rank
        for m in (n, 2 * n):
            assert seen[f"GPipe m={m}"] == [f"F{i}" for i in range(m)] + [
                f"B{i}" for i in range(m)], seen
            # 1F1B: p − s forwards (min(m, p − s)), then a backward and a forward in turn
            warmup = min(m, n - s)
            order = [f"F{i}" for i in range(warmup)]
            for i in range(m):
                order += [f"B{i}"] + ([f"F{warmup + i}"] if warmup + i < m else [])
            assert seen[f"1F1B m={m}"] == order, (m, seen[f"1F1B m={m}"])
            held = [sum(1 if step[0] == "F" else -1 for step in order[:k + 1])
                    for k in range(len(order))]
            assert max(held) == n - s                 # at most p − s in flight on stage s
        assert seen["m = p - 1"] == (f"ValueError: Number of microbatches ({n - 1}) must be "
                                     f"greater than or equal to the number of stages ({n}).")
        assert seen["bytes sent while refusing"] == 0


# What torch's training classes call on gloo, recorded by torch's profiler (its c10d ops):
# the evidence of notebook 19's map for the collectives no `dist.*` call shows.
TORCH_API_COLLECTIVES = {
    "DistributedDataParallel built": ["all_gather", "broadcast"],
    "DistributedDataParallel step": ["all_reduce"],
    "init_device_mesh": [], "mesh groups": [],
    "fully_shard built": [], "fully_shard step": ["all_gather", "reduce_scatter"],
    "parallelize_module built": ["broadcast", "scatter"],
    "parallelize_module step": ["all_reduce"],
    "PipelineStage built": [], "ScheduleGPipe step": ["recv", "send"],
}
C10D_COLLECTIVES = {"broadcast_": "broadcast", "scatter_": "scatter", "gather_": "gather",
                    "reduce_": "reduce", "allreduce_": "all_reduce", "allgather_": "all_gather",
                    "_allgather_base_": "all_gather", "reduce_scatter_": "reduce_scatter",
                    "_reduce_scatter_base_": "reduce_scatter", "alltoall_": "all_to_all",
                    "alltoall_base_": "all_to_all", "send": "send", "recv_": "recv",
                    "barrier": "barrier"}


@case("19-map-torch-apis", sizes=(2, 4))
def map_torch_apis(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile

    def called(step):                                   # the c10d and gloo ops it ran
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        return sorted({e.name for e in prof.events() if e.name.startswith(("c10d::", "gloo:"))})

    def mlp():
        torch.manual_seed(rank)
        return torch.nn.Sequential(torch.nn.Linear(8, 4 * world_size), torch.nn.Tanh(),
                                   torch.nn.Linear(4 * world_size, 4))

    def pipeline_step():
        if rank == 0:
            made["schedule"].step(torch.ones(4, 8))
        elif rank == world_size - 1:
            made["schedule"].step(target=torch.ones(4, 8))
        else:
            made["schedule"].step()

    def shard(model):
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=made["mesh"])
        return fully_shard(model, mesh=made["mesh"])

    x, made = torch.ones(6, 8, requires_grad=True), {}
    seen = {"DistributedDataParallel built":
            called(lambda: made.update(ddp=DistributedDataParallel(mlp()))),
            "DistributedDataParallel step": called(lambda: made["ddp"](x).sum().backward()),
            "init_device_mesh": called(lambda: made.update(
                mesh=init_device_mesh("cpu", (world_size,)),
                grid=init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("dp", "tp")))),
            "mesh groups": called(lambda: [made["grid"][d].get_group() for d in ("dp", "tp")]),
            "fully_shard built": called(lambda: made.update(fsdp=shard(mlp())))}
    seen["fully_shard step"] = called(lambda: made["fsdp"](x).sum().backward())
    seen["parallelize_module built"] = called(lambda: made.update(tp=parallelize_module(
        mlp(), made["mesh"], {"0": ColwiseParallel(), "2": RowwiseParallel()})))
    seen["parallelize_module step"] = called(lambda: (made["tp"](x) * 1.0).sum().backward())
    seen["PipelineStage built"] = called(lambda: made.update(stage=PipelineStage(
        torch.nn.Linear(8, 8), rank, world_size, torch.device("cpu"))))
    made["schedule"] = ScheduleGPipe(made["stage"], n_microbatches=2,
                                     loss_fn=torch.nn.functional.mse_loss)
    seen["ScheduleGPipe step"] = called(pipeline_step)
    return seen


@expect("19-map-torch-apis")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert set(seen) == set(TORCH_API_COLLECTIVES), seen
        for api, ops in seen.items():
            c10d = sorted({C10D_COLLECTIVES[op.removeprefix("c10d::")]
                           for op in ops if op.startswith("c10d::")})
            assert c10d == TORCH_API_COLLECTIVES[api], (api, ops)
        # gloo runs FSDP2's reduce_scatter as an all_reduce (notebook 11)
        assert [op for op in seen["fully_shard step"] if op.startswith("gloo:")] == [
            "gloo:all_gather", "gloo:all_reduce"], seen["fully_shard step"]


@case("19-ddp-broadcasts-when-built", sizes=(2, 4))
def ddp_broadcasts_when_built(rank, world_size):
    from torch.nn.parallel import DistributedDataParallel
    from torch.profiler import ProfilerActivity, profile
    from helpers.bench.wire import on_the_wire
    torch.manual_seed(rank)                              # every rank starts different
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    torch.manual_seed(0)
    rank0 = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))
    with on_the_wire() as wire, profile(activities=[ProfilerActivity.CPU]) as prof:
        ddp = DistributedDataParallel(model)
    return {"broadcasts": sum(e.name == "c10d::broadcast_" for e in prof.events()),
            "sent": wire.sent, "parameter bytes": size,
            "rank 0's parameters": all(torch.equal(a, b) for a, b in
                                       zip(ddp.module.parameters(), rank0.parameters()))}


@expect("19-ddp-broadcasts-when-built")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen["broadcasts"] >= 1 and seen["rank 0's parameters"], seen
    first = _returned(outcomes[0])
    assert first["sent"] >= first["parameter bytes"], first     # the parameters leave rank 0


@case("19-fewer-calls-fewer-bytes", sizes=(2, 4))
def fewer_calls_fewer_bytes(rank, world_size):
    from helpers.bench.wire import on_the_wire
    k = 4                                                # 19's shards at a 2 × 2 mesh
    shards = [torch.ones(n, dtype=torch.float64) for n in (8 * k, k, 4 * k, 4)]
    dist.all_reduce(torch.ones(1))                       # connections up
    with on_the_wire() as four:
        for shard in shards:
            dist.all_reduce(shard)
    with on_the_wire() as one:
        dist.all_reduce(torch.cat(shards))
    return {"S": sum(s.numel() * 8 for s in shards), "four calls": four.sent,
            "one call": one.sent}


@expect("19-fewer-calls-fewer-bytes")
def _(outcomes, n):
    from helpers.bench.wire import agrees
    for o in outcomes:
        seen = _returned(o)
        model = 2 * (n - 1) / n * seen["S"]
        assert agrees(seen["one call"], model, 1, n), seen
        assert agrees(seen["four calls"], model, 4, n), seen
        assert seen["four calls"] > seen["one call"], seen
        assert seen["four calls"] - model > model, seen   # the headers outweigh the data


@case("19-torch-2d-composition", sizes=(2, 4))
def torch_2d_composition(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    from helpers.training.comm import count_collectives
    from helpers.training.toy import loss_fn, make_data, make_mlp, shard
    import warnings

    def optimizer(name, params):
        return (torch.optim.SGD(params, lr=0.1) if name == "sgd"
                else torch.optim.AdamW(params, lr=0.01))

    X, Y = make_data()
    seen = {}
    for dp in (1, 2):                                   # a 1 × n mesh, and 2 × n/2
        tp = world_size // dp
        mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        row = mesh.get_coordinate()[0]
        for name in ("sgd", "adamw"):
            model = parallelize_module(make_mlp(d_hidden=4 * tp), mesh["tp"],
                                       {"0": ColwiseParallel(), "2": RowwiseParallel()})
            model = fully_shard(model, mesh=mesh["dp"])
            opt = optimizer(name, model.parameters())
            with count_collectives() as log, warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always")
                for _ in range(3):
                    opt.zero_grad()
                    loss_fn(model(shard(X, row, dp)), shard(Y, row, dp)).backward()
                    opt.step()
            reference = make_mlp(d_hidden=4 * tp)
            ref_opt = optimizer(name, reference.parameters())
            for _ in range(3):
                ref_opt.zero_grad()
                loss_fn(reference(X), Y).backward()
                ref_opt.step()
            full = {k: p.full_tensor() for k, p in model.named_parameters()}
            W1 = model[0].weight
            seen[f"{dp} x {tp} {name}"] = {
                "diff": max((full[k] - v).abs().max().item()
                            for k, v in reference.named_parameters()),
                "calls": [[c.name, c.group] for c in log.entries],
                "W1 placements": [type(p).__name__ + f"({p.dim})" for p in W1.placements],
                "W1 rows here": W1.to_local().shape[0], "W1 rows": W1.shape[0],
                "warned: output a view": any("returned a view tensor" in str(w.message)
                                             for w in said)}
    return seen


@expect("19-torch-2d-composition")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        for dp in (1, 2):
            tp = n // dp
            column = [r for r in range(n) if r % tp == o.rank % tp]
            for name in ("sgd", "adamw"):
                got = seen[f"{dp} x {tp} {name}"]
                assert got["diff"] < 1e-12, got                  # equal to one process
                # FSDP2: per step one all_gather and one reduce_scatter on the column;
                # none at all on a column of one rank
                assert got["calls"] == ([] if dp == 1 else [
                    ["all_gather_single", column], ["reduce_scatter_single", column]] * 3), got
                # W1: rows on "tp" (ColwiseParallel), rows of those rows on "dp" (FSDP2)
                assert got["W1 placements"] == [
                    "_StridedShard(0)" if tp > 1 else "Shard(0)", "Shard(0)"], got
                assert got["W1 rows here"] * n == got["W1 rows"] == 4 * tp, got
                # FSDP2 warns that the model's output is a view (an in-place op on it
                # would skip its hook); nothing here changes it in place
                assert got["warned: output a view"], got
