"""The gloo cases of the ledger for notebooks 14-19 (groups, DDP, FSDP2, TP, PP).

Registered into claim_cases.CASES (same conventions: a case runs on every disposable rank
as case(rank, world_size); its expectation gets every rank's outcome and the world size).
"""
from __future__ import annotations

from claim_cases import _returned, case, expect


@case("14-new-group-every-rank")
def new_group_every_rank(rank, world_size):
    evens = list(range(0, world_size, 2))
    group = dist.new_group(evens)                      # every rank calls it
    seen = {"group_rank": dist.get_rank(group),
            "placeholder": group is dist.GroupMember.NON_GROUP_MEMBER}
    if rank in evens:
        total = torch.ones(1)
        dist.all_reduce(total, group=group)            # members only
        seen["sum"] = total.item()
    return seen


@expect("14-new-group-every-rank")
def _(outcomes, n):
    evens = list(range(0, n, 2))
    for o in outcomes:
        seen = _returned(o)
        if o.rank in evens:
            assert seen == {"group_rank": evens.index(o.rank), "placeholder": False,
                            "sum": len(evens)}, seen
        else:
            assert seen == {"group_rank": -1, "placeholder": True}, seen


@case("14-new-group-waits-only-for-members", alone=True, timeout_s=3.0)
def skipper_not_waited_for(rank, world_size):
    import time
    others = list(range(world_size - 1))
    start = time.monotonic()
    if rank != world_size - 1:                         # the last rank skips the call
        group = dist.new_group(others)
        ones = torch.ones(1)
        dist.all_reduce(ones, group=group)
        return {"seconds": time.monotonic() - start, "sum": ones.item()}
    return {"seconds": 0.0, "skipped": True}


@expect("14-new-group-waits-only-for-members")
def _(outcomes, n):
    for o in outcomes[:-1]:
        seen = _returned(o)
        assert seen["sum"] == n - 1 and seen["seconds"] < 2.5, seen
    assert _returned(outcomes[-1])["skipped"]


@case("14-new-subgroups-consecutive", sizes=(2, 4))
def new_subgroups_consecutive(rank, world_size):
    mine, groups = dist.new_subgroups(group_size=2)
    one = torch.ones(1)
    dist.all_reduce(one, group=mine)
    return {"groups": [dist.get_process_group_ranks(g) for g in groups],
            "group_rank": dist.get_rank(mine),
            "global": [dist.get_global_rank(mine, i) for i in range(2)], "sum": one.item()}


@expect("14-new-subgroups-consecutive")
def _(outcomes, n):
    consecutive = [[i, i + 1] for i in range(0, n, 2)]
    for o in outcomes:
        seen = _returned(o)
        row = o.rank // 2
        assert seen == {"groups": consecutive, "group_rank": o.rank % 2,
                        "global": consecutive[row], "sum": 2.0}, seen


@case("14-device-mesh-row-major", sizes=(2, 4))
def device_mesh_row_major(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (2, world_size // 2), mesh_dim_names=("dp", "tp"))
    one = torch.ones(1)
    dist.all_reduce(one, group=mesh["dp"].get_group())
    return {"coordinate": mesh.get_coordinate(),
            "tp": dist.get_process_group_ranks(mesh["tp"].get_group()),
            "dp": dist.get_process_group_ranks(mesh["dp"].get_group()), "dp_sum": one.item()}


@expect("14-device-mesh-row-major")
def _(outcomes, n):
    cols = n // 2
    for o in outcomes:
        row, col = divmod(o.rank, cols)
        assert _returned(o) == {"coordinate": [row, col],
                                "tp": [row * cols + c for c in range(cols)],
                                "dp": [col, cols + col], "dp_sum": 2.0}, o.result


@case("15-async-returns-at-once")
def async_returns_at_once(rank, world_size):
    import time
    if rank != 0:
        time.sleep(0.6)                                # rank 0 launches alone first
    start = time.monotonic()
    work = dist.all_reduce(torch.ones(1 << 10), async_op=True)
    launched = time.monotonic() - start
    done_at_launch = work.is_completed()
    work.wait()
    return {"launch": launched, "done_at_launch": done_at_launch,
            "total": time.monotonic() - start}


@expect("15-async-returns-at-once")
def _(outcomes, n):
    first = _returned(outcomes[0])
    assert first["launch"] < 0.2 and not first["done_at_launch"], first
    assert first["total"] >= 0.4, first                # completes once every rank joined


@case("15-ddp-buckets")
def ddp_buckets(rank, world_size):
    from torch.nn.parallel import DistributedDataParallel as DDP
    seen = {}
    for as_view in (False, True):
        torch.manual_seed(0)
        layers = [torch.nn.Linear(512, 512) for _ in range(3)]   # 1 MiB + 2 KiB each
        model = DDP(torch.nn.Sequential(*layers), gradient_as_bucket_view=as_view)
        index = {p.data_ptr(): i for i, p in enumerate(model.module.parameters())}
        calls = []

        def hook(state, bucket):
            calls.append((bucket.index(), [index[p.data_ptr()] for p in bucket.parameters()]))
            work = dist.all_reduce(bucket.buffer(), async_op=True)
            return work.get_future().then(lambda fut: fut.value()[0])

        model.register_comm_hook(None, hook)
        steps = []
        for _ in range(2):
            calls.clear()
            model.zero_grad(set_to_none=False)
            model(torch.ones(2, 512)).sum().backward()
            steps.append([params for _, params in sorted(calls)])
        storages = {p.grad.untyped_storage().data_ptr() for p in model.module.parameters()}
        seen[f"view={as_view}"] = {"steps": steps, "grad storages": len(storages)}
    return seen


@expect("15-ddp-buckets")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        for as_view in (False, True):
            got = seen[f"view={as_view}"]
            # step 1: every gradient in one bucket, in parameter order; then rebuilt in the
            # order the gradients became ready (last layer first), the first one of 1 MiB
            assert got["steps"][0] == [[0, 1, 2, 3, 4, 5]], got
            assert got["steps"][1] == [[5, 4], [3, 2, 1, 0]], got
        assert seen["view=False"]["grad storages"] == 6          # .grad: copies of their own
        assert seen["view=True"]["grad storages"] == 2           # .grad: views of 2 buckets


@case("16-fsdp2-chunk-rows")
def fsdp2_chunk_rows(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 5))
    full = {k: p.detach().clone() for k, p in model.named_parameters()}
    mesh = init_device_mesh("cpu", (world_size,))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    seen = {}
    for k, p in model.named_parameters():
        seen[k] = {"dtensor": isinstance(p, DTensor), "rows": p.to_local().shape[0],
                   "full": torch.equal(p.full_tensor(), full[k])}
    return seen


@expect("16-fsdp2-chunk-rows")
def _(outcomes, n):
    import torch
    for o in outcomes:
        for k, rows in (("0.bias", 4), ("1.weight", 5)):
            chunks = torch.chunk(torch.arange(rows), n)
            want = len(chunks[o.rank]) if o.rank < len(chunks) else 0
            assert _returned(o)[k] == {"dtensor": True, "rows": want, "full": True}, o.result


@case("16-adam-step-counter")
def adam_step_counter(rank, world_size):
    some, none = torch.zeros(3, 2, requires_grad=True), torch.zeros(0, 2, requires_grad=True)
    optimizer = torch.optim.Adam([some, none], lr=0.1)
    some.grad, none.grad = torch.ones(3, 2), torch.ones(0, 2)
    optimizer.step()
    return [{k: [v.dtype == torch.float32, v.numel() * v.element_size()]
             for k, v in optimizer.state[p].items()} for p in (some, none)]


@expect("16-adam-step-counter")
def _(outcomes, n):
    for o in outcomes:
        some, none = _returned(o)
        assert some["step"] == none["step"] == [True, 4], o.result   # 4 bytes, even for 0 rows
        assert some["exp_avg"][1] == some["exp_avg_sq"][1] == 24 and none["exp_avg"][1] == 0


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

