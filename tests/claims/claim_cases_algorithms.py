"""The gloo cases of the ledger for notebook 25 (see claim_cases.py for the conventions:
a case runs on every disposable rank as case(rank, world_size); its expectation gets every
rank's outcome and the world size, and fails when torch or gloo behave otherwise)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _returned, case, expect  # noqa: F401

if TYPE_CHECKING:   # a case's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist


@case("25-ranks-disagree-on-root", sizes=(2, 4), alone=True, timeout_s=3.0)
def disagree_on_root(rank, world_size):
    root = 0 if rank == 0 else 1                    # the bug of the notebook's pitfall
    v, d = (rank - root) % world_size, 1
    x = torch.full((4,), float(rank))
    while d < world_size:
        if v < d and v + d < world_size:
            dist.send(x, (v + d + root) % world_size)
        elif d <= v < 2 * d:
            dist.recv(x, (v - d + root) % world_size)
        d *= 2
    return x.tolist()


@expect("25-ranks-disagree-on-root")
def _(outcomes, n):
    assert all(o.returncode is not None for o in outcomes), [o.summary() for o in outcomes]
    failed = [o for o in outcomes if o.error or o.killed]
    assert failed, [o.summary() for o in outcomes]
    assert all(o.seconds is None or o.seconds < 30 for o in failed)
    assert any("Timed out" in (o.error or "") for o in outcomes), [o.summary() for o in outcomes]
