"""The gloo cases of the ledger for notebooks 15 (data parallelism, DDP's buckets, gloo's
headers per call) and 16 (ZeRO/FSDP2: shards, DDP's reducer, mistakes that abort or wait).

Registered into claim_cases.CASES (same conventions: a case runs on every disposable rank
as case(rank, world_size); its expectation gets every rank's outcome and the world size).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _killed_by_gloo, _returned, case, expect

if TYPE_CHECKING:   # a case's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist


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


@case("15-ddp-buckets-default", sizes=(2, 4))
def ddp_buckets_default(rank, world_size):
    """DDP's default buckets, on 27.75 MiB of float32 gradients whose sizes tell the caps
    apart, and the bytes of each step (a comm hook that sends nothing: the plan only)."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    from helpers.bench.wire import on_the_wire
    kib = 1024 // 4                                     # float32 elements per KiB

    class Chain(torch.nn.Module):
        """Used last to first: the gradients become ready first to last (definition order,
        the reverse of the order DDP assumes before it has seen a backward)."""
        def __init__(self, sizes_kib):
            super().__init__()
            self.weights = torch.nn.ParameterList(
                torch.nn.Parameter(torch.empty(k * kib)) for k in sizes_kib)

        def forward(self, x):
            for w in reversed(self.weights):
                x = x + w.sum()
            return x

    # In the order the gradients become ready: a 1 MiB first cap closes the first bucket
    # after two 768 KiB tensors (a 2 MiB cap would take the 8 MiB one too); a 25 MiB cap
    # closes the second after 3 × 8 MiB + 2 × 768 KiB = 25.5 MiB (24.75 MiB is below it).
    module = Chain([768, 768, 8192, 8192, 8192, 768, 768, 768])
    model = DDP(module, init_sync=False)                # no first broadcast: values unused
    index = {id(p): i for i, p in enumerate(module.weights)}
    plan = []

    def hook(state, bucket):
        plan.append(sorted(index[id(p)] for p in bucket.parameters()))
        done = torch.futures.Future()
        done.set_result(bucket.buffer())
        return done

    model.register_comm_hook(None, hook)
    steps, written = [], []
    for _ in range(3):
        plan.clear()
        with on_the_wire() as wire:
            model(torch.zeros(1)).sum().backward()
        steps.append(sorted(plan))
        written.append(wire.sent)
    return {"steps": steps, "written": written}


@expect("15-ddp-buckets-default")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        # step 1: every gradient in one bucket, beyond the 25 MiB cap; then the buckets
        # follow the order the gradients became ready: the first of 1 MiB, then 25 MiB
        assert seen["steps"][0] == [list(range(8))], seen
        assert seen["steps"][1] == seen["steps"][2] == [[0, 1], [2, 3, 4, 5, 6], [7]], seen
        # the hook sends nothing; at the second step's forward the ranks agree on the
        # rebuilt buckets (rank 0 sends the plan), and nothing more is sent
        assert seen["written"][0] == seen["written"][2] == 0, seen
        assert seen["written"][1] > 0 or o.rank != 0, seen


@case("15-all-reduce-headers-per-call", sizes=(2, 4))
def all_reduce_headers_per_call(rank, world_size):
    from helpers.training.comm import count_collectives
    headers = {}
    largest = 2 * world_size << 20                       # 2n MiB: still 2n segments
    for size in (64, 4096, 1 << 18, 1 << 20, largest, 2 * largest):   # bytes of float32
        x = torch.ones(size // 4)
        with count_collectives() as log:
            dist.all_reduce(x)
        headers[size] = log.measured_bytes - log.model_bytes
    pieces = [torch.ones(16) for _ in range(12)]          # 12 tensors of 64 B
    with count_collectives() as many:
        for piece in pieces:
            dist.all_reduce(piece)
    with count_collectives() as one:
        dist.all_reduce(torch.cat(pieces))
    return {"headers": headers, "same model": many.model_bytes == one.model_bytes,
            "12 calls": many.measured_bytes, "1 call": one.measured_bytes}


@expect("15-all-reduce-headers-per-call")
def _(outcomes, n):
    per_call = 12 * (n - 1) * 48                          # 12(n − 1) headers of 48 B
    largest = 2 * n << 20
    for o in outcomes:
        seen = _returned(o)
        headers = {int(size): value for size, value in seen["headers"].items()}
        # from 64 B up to 2n MiB the same headers whatever the size; beyond, more segments
        assert {v for s, v in headers.items() if s <= largest} == {per_call}, seen
        assert headers[2 * largest] > per_call, seen
        assert seen["same model"] and seen["12 calls"] - seen["1 call"] == 11 * per_call, seen


@case("16-fsdp2-chunk-rows", sizes=(2, 3, 4))
def fsdp2_chunk_rows(rank, world_size):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 5),
                                torch.nn.Linear(5, world_size + 1))
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
        for k, rows in (("0.bias", 4), ("1.weight", 5), ("2.bias", n + 1)):
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


@case("16-ddp-reducer-copy", sizes=(2, 4))
def ddp_reducer_copy(rank, world_size):
    """The reducer's bucket buffers (what its comm hook is given) beside the tensors a
    rank holds: parameters, .grad, Adam's state."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    seen = {}
    for as_view in (False, True):
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)),
                    gradient_as_bucket_view=as_view)
        optimizer = torch.optim.Adam(model.parameters())
        buffers = {}

        def hook(state, bucket):
            buffers[bucket.index()] = bucket.buffer()
            work = dist.all_reduce(bucket.buffer(), async_op=True)
            return work.get_future().then(lambda fut: fut.value()[0])

        model.register_comm_hook(None, hook)
        storages = []
        for _ in range(3):                                # buckets rebuilt at step 2
            buffers.clear()
            model(torch.ones(2, 64)).sum().backward()
            optimizer.step()
            storages.append(sorted(b.untyped_storage().data_ptr() for b in buffers.values()))
        params = list(model.module.parameters())
        state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
        held = {t.untyped_storage().data_ptr() for t in params + [p.grad for p in params]
                + state}
        seen[f"view={as_view}"] = {
            "bucket bytes": sum(b.numel() * b.element_size() for b in buffers.values()),
            "grad bytes": sum(p.grad.numel() * p.grad.element_size() for p in params),
            "kept from step to step": storages[1] == storages[2],
            "buckets a held tensor leads to": len(set(storages[-1]) & held),
            "grads inside a bucket": sum(p.grad.untyped_storage().data_ptr()
                                         in storages[-1] for p in params),
            "buckets": len(buffers)}
    return seen


@expect("16-ddp-reducer-copy")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        copy, view = seen["view=False"], seen["view=True"]
        for got in (copy, view):                          # buffers as large as the grads,
            assert got["bucket bytes"] == got["grad bytes"] and got["kept from step to step"]
        # a second copy that no parameter, gradient or optimizer state leads to ...
        assert copy["buckets a held tensor leads to"] == copy["grads inside a bucket"] == 0
        # ... unless gradient_as_bucket_view=True: every .grad a view into a bucket
        assert view["grads inside a bucket"] == 4, view
        assert view["buckets a held tensor leads to"] == view["buckets"], view


@case("16-uneven-all-gather-aborts", sizes=(2, 4), alone=True, timeout_s=3.0)
def uneven_all_gather(rank, world_size):
    rows = 3 if rank == 0 else 2                          # rank 0's piece is a row larger
    out = torch.empty(rows * world_size, 2)
    dist.all_gather_single(out, torch.full((rows, 2), float(rank)))
    return "returned"


@expect("16-uneven-all-gather-aborts")
def _(outcomes, n):
    _killed_by_gloo(outcomes[1])                          # it receives rank 0's larger piece
    assert not outcomes[0].killed, outcomes[0].summary()


@case("16-skipped-collective-waits", sizes=(2, 4), alone=True, timeout_s=2.0)
def skipped_reduce_scatter_in_backward(rank, world_size):
    """Three reduce_scatters inside backward; rank 1 skips the last one."""
    import time
    entered = []

    class Scatter(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x * 1.0

        @staticmethod
        def backward(ctx, grad):
            if rank == 1 and ctx.k == 0:                   # rank 1's bug: it skips the last
                return grad, None
            entered.append(ctx.k)
            mine = grad.new_empty(len(grad) // world_size)
            try:
                dist.reduce_scatter_single(mine, grad.contiguous())
            except RuntimeError as err:
                raise RuntimeError(f"in reduce_scatter {ctx.k}: {err}") from None
            return grad, None

    x = torch.ones(4 * world_size, requires_grad=True)
    y = x
    for k in range(3):
        y = Scatter.apply(y, k)
    start = time.monotonic()
    try:
        y.sum().backward()
        outcome = "backward returned"
    except RuntimeError as err:
        outcome = str(err)
    return {"entered": entered, "outcome": outcome, "seconds": time.monotonic() - start}


@expect("16-skipped-collective-waits")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        if o.rank == 1:                                   # it goes on, one call short
            assert seen["entered"] == [2, 1] and seen["outcome"] == "backward returned", seen
            continue
        assert seen["entered"] == [2, 1, 0], seen         # the others wait in that one
        assert seen["outcome"].startswith("in reduce_scatter 0: "), seen
        assert "Timed out waiting 2000ms" in seen["outcome"], seen
        assert 1.9 <= seen["seconds"] < 6, seen
