"""The gloo cases of the ledger for notebook 26 (see claim_cases.py for the conventions:
a case runs on every disposable rank as case(rank, world_size); its expectation gets every
rank's outcome and the world size, and fails when torch or gloo behave otherwise)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _returned, case, expect

if TYPE_CHECKING:   # a case's `dist` is the disposable rank's own global
    import torch.distributed as dist




@case("26-dead-peer-fails-fast", sizes=(2, 3), alone=True, timeout_s=3.0)
def dead_peer_fails_fast(rank, world_size):
    """The last rank ends its process (os._exit) inside an FSDP2 step; the others are in
    backward's collectives: each raises (reset/closed by peer, or the group's timeout)."""
    import os
    import time
    from torch.distributed.device_mesh import init_device_mesh
    from helpers.scale import checkpoints as ck
    from helpers.training.toy import loss_fn
    model, _ = ck.make_sharded(init_device_mesh("cpu", (world_size,)))
    x, y = ck.batch_of(rank, world_size)
    loss = loss_fn(model(x), y)
    if rank == world_size - 1:
        os._exit(1)
    start = time.monotonic()
    try:
        loss.backward()
    except RuntimeError as err:
        return {"error": str(err), "seconds": time.monotonic() - start}
    return {"error": None}


@expect("26-dead-peer-fails-fast")
def _(outcomes, n):
    *survivors, dead = outcomes
    assert dead.returncode == 1, dead.summary()
    fast = 0
    for o in survivors:
        got = _returned(o)
        assert got["error"] is not None, o.summary()
        closed = any(f"Connection {how} by peer" in got["error"] for how in ("reset", "closed"))
        assert closed or "Timed out waiting 3000ms" in got["error"], got
        assert got["seconds"] < 3.0 + 10, got        # a generous margin: CI is busy
        fast += closed and got["seconds"] < 1.5
    assert fast >= 1, [o.result for o in survivors]


@case("26-dcp-reshards", sizes=(2, 3), alone=True, timeout_s=10.0)
def dcp_reshards(rank, world_size):
    """FSDP2 + Adam saved with DCP at world_size ranks, loaded by the first half of them
    (a mesh of their own group; one rank at 2): the rows each rank holds, and the whole
    state (model and Adam) against the saved one."""
    import tempfile
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from helpers.scale import checkpoints as ck
    from helpers.training.toy import loss_fn
    where = [tempfile.mkdtemp(prefix="dcp-claim-") if rank == 0 else None]
    dist.broadcast_object_list(where, src=0)
    model, opt = ck.make_sharded(init_device_mesh("cpu", (world_size,)))
    x, y = ck.batch_of(rank, world_size)
    for _ in range(2):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=where[0])
    saved, before = ck.full_state(model, opt), ck.rows_held(model)
    half = max(1, world_size // 2)
    group = dist.new_group(list(range(half)))
    if rank >= half:
        return {"before": before}
    mesh = DeviceMesh.from_group(group, "cpu")
    model2, opt2 = ck.make_sharded(mesh)
    msd, osd = get_state_dict(model2, opt2)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=where[0], process_group=group)
    set_state_dict(model2, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    loaded = ck.full_state(model2, opt2)
    dist.barrier(group=group)
    if rank == 0:
        import shutil
        shutil.rmtree(where[0])
    return {"before": before, "after": ck.rows_held(model2), "diff": ck.state_diff(loaded, saved),
            "adam": sum(k.startswith("optim/") for k in loaded)}


@expect("26-dcp-reshards")
def _(outcomes, n):
    half = max(1, n // 2)
    size, after_size = -(-50 // n), -(-50 // half)
    for o in outcomes:
        got = _returned(o)
        assert tuple(got["before"]["0.weight"]) == (o.rank * size, min(50, (o.rank + 1) * size))
        if o.rank < half:
            assert tuple(got["after"]["0.weight"]) == (o.rank * after_size,
                                                       min(50, (o.rank + 1) * after_size))
            assert got["diff"] == 0 and got["adam"] == 12, got


@case("26-async-save-returns-early", sizes=(2, 3), alone=True, timeout_s=10.0)
def async_save_returns_early(rank, world_size):
    """dcp.async_save of an FSDP2 model + Adam and a 16 MB tensor per rank (so that the
    write takes long enough to be seen): is its future done when the call returns, and
    does the written state load back equal?"""
    import tempfile
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from helpers.scale import checkpoints as ck
    from helpers.training.toy import loss_fn
    where = [tempfile.mkdtemp(prefix="dcp-claim-") if rank == 0 else None]
    dist.broadcast_object_list(where, src=0)
    mesh = init_device_mesh("cpu", (world_size,))
    model, opt = ck.make_sharded(mesh)
    x, y = ck.batch_of(rank, world_size)
    opt.zero_grad()
    loss_fn(model(x), y).backward()
    opt.step()
    import torch
    from torch.distributed.tensor import DTensor, Shard
    big = DTensor.from_local(torch.randn(2_000_000, dtype=torch.float64), mesh, [Shard(0)])
    msd, osd = get_state_dict(model, opt)
    future = dcp.async_save({"model": msd, "optim": osd, "big": big}, checkpoint_id=where[0])
    pending = not future.done()
    future.result()
    model2, opt2 = ck.make_sharded(mesh)
    msd, osd = get_state_dict(model2, opt2)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=where[0])
    set_state_dict(model2, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    diff = ck.state_diff(ck.full_state(model2, opt2), ck.full_state(model, opt))
    dist.barrier()
    if rank == 0:
        import shutil
        shutil.rmtree(where[0])
    return {"pending": pending, "diff": diff}


@expect("26-async-save-returns-early")
def _(outcomes, n):
    for o in outcomes:
        got = _returned(o)
        assert got["pending"] is True and got["diff"] == 0, got
