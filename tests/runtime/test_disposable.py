"""helpers.runtime.disposable: a rank that gloo aborts dumps no core, so its peer fails at once.

CI once ran the 2-rank shape-mismatch case four times and the surviving rank waited out
the 3 s timeout every time: with core dumps on, the kernel keeps the aborting process's
sockets open while the dump is written (189 MB here with `ulimit -c unlimited`, and a
`core` file in the working folder). The rank script turns dumps off for itself.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import resource

import pytest

if TYPE_CHECKING:   # a case's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist

from helpers.runtime.disposable import run_disposable


def all_reduce_shapes_differ(rank, world_size):
    tensor = torch.ones(5 if rank == 1 else 4)
    dist.all_reduce(tensor)
    return tensor


@pytest.fixture
def core_dumps_allowed():
    """Raise this process's soft core limit to its hard limit; the ranks inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if hard == 0:
        pytest.skip("core dumps are forbidden here (hard RLIMIT_CORE is 0)")
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    yield
    resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))


def test_an_aborted_rank_leaves_no_core_and_its_peer_fails_at_once(
        core_dumps_allowed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcomes = run_disposable(all_reduce_shapes_differ, world_size=2, timeout_s=3.0)
    killed = [o for o in outcomes if o.killed]
    assert [o.signal for o in killed] == ["SIGABRT"], [o.summary() for o in outcomes]
    survivor = next(o for o in outcomes if not o.killed)
    assert survivor.error and "Timed out" not in survivor.error, survivor.summary()
    assert survivor.seconds < 3, survivor.summary()
    assert not list(tmp_path.iterdir()), "left behind: " + ", ".join(
        p.name for p in tmp_path.iterdir())
