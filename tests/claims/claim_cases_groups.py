"""The gloo cases of the ledger for notebook 14 (process groups, device meshes, a rank that
skips `new_group`).

Registered into claim_cases.CASES (same conventions: a case runs on every disposable rank
as case(rank, world_size); its expectation gets every rank's outcome and the world size).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _returned, case, expect

if TYPE_CHECKING:   # a case's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist


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


@case("14-skipper-gloo-connect-timeout", sizes=(2, 4), alone=True, timeout_s=20.0)
def skipper_connect_timeout(rank, world_size):
    """Notebook 14's pitfall, round after round (1 s group timeout) until the skipper's
    set-up fails in gloo's connect wait: which way it fails depends on the ports."""
    import time
    from datetime import timedelta
    timeout = timedelta(seconds=1)
    skipper, others = world_size - 1, list(range(world_size - 1))
    rounds = []
    for _ in range(12):
        if rank != skipper:
            dist.new_group(others, timeout=timeout)       # the skipper forgets this one
        start = time.monotonic()
        try:
            group = dist.new_group(list(range(world_size)), timeout=timeout)
            dist.all_reduce(torch.ones(1), group=group)
            outcome = "worked"
        except Exception as err:
            outcome = f"{type(err).__name__}: {err}"
        rounds.append({"outcome": outcome[-300:], "seconds": time.monotonic() - start})
        if rank == skipper:
            dist.new_group(others, timeout=timeout)       # the missed call: in step again
        connect = torch.tensor([float("Connect timeout" in outcome)])
        dist.all_reduce(connect)                          # the default group is unharmed
        if connect.item():
            break
    return rounds


@expect("14-skipper-gloo-connect-timeout")
def _(outcomes, n):
    per_rank = [_returned(o) for o in outcomes]
    assert len({len(rounds) for rounds in per_rank}) == 1
    for i, skipper in enumerate(per_rank[-1]):
        for caller in (rounds[i] for rounds in per_rank[:-1]):   # the 1 s store wait
            assert caller["outcome"].startswith("DistStoreError") and \
                "wait timeout after 1000ms" in caller["outcome"], caller
            assert 0.95 <= caller["seconds"] < 4, caller
        if "Connect timeout" in skipper["outcome"]:       # gloo's own: 5 × the timeout
            assert "connectFullMesh failed" in skipper["outcome"], skipper
            assert 4.9 <= skipper["seconds"] < 9, skipper
        else:                                             # connected; its all_reduce waits
            assert "Timed out waiting 1000ms" in skipper["outcome"], skipper
            assert 0.95 <= skipper["seconds"] < 4, skipper
    assert "Connect timeout" in per_rank[-1][-1]["outcome"], per_rank[-1]


@case("14-new-group-local-synchronization", sizes=(2, 4), alone=True, timeout_s=10.0)
def new_group_local_synchronization(rank, world_size):
    """use_local_synchronization=True: only members wait; a non-member may skip the call or
    gets None at once; a later such group of ranks that did and did not join is named
    differently on them (its name counts the groups the rank has) and cannot form."""
    import time
    from datetime import timedelta
    short = timedelta(seconds=1)

    def summed_ones(group):
        one = torch.ones(1)
        dist.all_reduce(one, group=group)
        return one.item()

    seen = {}
    members = list(range(world_size - 1))
    if rank in members:                                   # A: the last rank skips the call
        seen["A"] = summed_ones(dist.new_group(members, timeout=short,
                                               use_local_synchronization=True))
    start = time.monotonic()                              # B: every rank calls
    group = dist.new_group(members, timeout=short, use_local_synchronization=True)
    seen["B"] = summed_ones(group) if rank in members else [repr(group),
                                                             time.monotonic() - start]
    seen["counted"] = summed_ones(dist.new_group(timeout=short))   # named by the count
    start = time.monotonic()                              # C: everyone, named by the ranks
    try:
        seen["C"] = summed_ones(dist.new_group(timeout=short, use_local_synchronization=True))
    except Exception as err:
        seen["C"] = [f"{type(err).__name__}: {err}", time.monotonic() - start]
    return seen


@expect("14-new-group-local-synchronization")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        if o.rank < n - 1:
            assert seen["A"] == seen["B"] == n - 1, seen  # formed without the last rank
        else:
            assert "A" not in seen and seen["B"][0] == "None" and seen["B"][1] < 0.5, seen
        assert seen["counted"] == n, seen
        error, seconds = seen["C"]
        assert error.startswith("DistStoreError: wait timeout after 1000ms"), seen
        assert 0.95 <= seconds < 5, seen
    names = {o.result["C"][0].split("keys: ")[1].split("//")[1] for o in outcomes}
    assert len(names) == 2, names                         # one name on the members, one on it
