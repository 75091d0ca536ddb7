"""The gloo cases of the ledger for notebook 28 (see claim_cases.py for the conventions:
a case runs on every disposable rank as case(rank, world_size); its expectation gets every
rank's outcome and the world size, and fails when torch or gloo behave otherwise)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _returned, case, expect

if TYPE_CHECKING:   # a case's `dist` is the disposable rank's own global
    import torch.distributed as dist


@case("28-dump-while-blocked", sizes=(2, 3), alone=True, timeout_s=3.0)
def dump_while_blocked(rank, world_size):
    """Every rank but the last enters an all_reduce on a thread; the main thread dumps the
    Flight Recorder while that thread still waits, then the wait ends at the timeout."""
    import pickle
    import threading
    import time
    import torch
    from torch._C._distributed_c10d import _dump_fr_trace
    dist.all_reduce(torch.ones(2))
    waiting = None
    if rank != world_size - 1:
        def call():
            try:
                dist.all_reduce(torch.ones(2))
            except RuntimeError:
                pass
        waiting = threading.Thread(target=call)
        waiting.start()
        time.sleep(1.0)
    blocked = waiting is not None and waiting.is_alive()
    trace = pickle.loads(_dump_fr_trace())
    if waiting is not None:
        waiting.join()
    return {"blocked_while_dumped": blocked,
            "names": [e["profiling_name"] for e in trace["entries"]],
            "seqs": [e["collective_seq_id"] for e in trace["entries"]]}


@expect("28-dump-while-blocked")
def _(outcomes, n):
    *callers, last = outcomes
    for o in callers:
        got = _returned(o)
        assert got["blocked_while_dumped"], got
        assert got["names"] == ["gloo:all_reduce"] * 2 and got["seqs"] == [1, 2], got
    assert _returned(last)["seqs"] == [1], last.summary()


@case("28-buffer-size-read-at-init", sizes=(2, 3))
def buffer_size_read_at_init(rank, world_size):
    """TORCH_FR_BUFFER_SIZE set after the group exists: the buffer keeps its own size (the
    rank's was read when its group was made: the disposable ranks leave it unset, 2,000),
    so 5 collectives all stay; a group made after the variable is set keeps only 2."""
    import os
    import pickle
    import torch
    from torch._C._distributed_c10d import _dump_fr_trace
    os.environ["TORCH_FR_BUFFER_SIZE"] = "2"
    for _ in range(5):
        dist.all_reduce(torch.ones(1))
    after_init = len(pickle.loads(_dump_fr_trace())["entries"])
    del os.environ["TORCH_FR_BUFFER_SIZE"]
    return {"kept_after_init": after_init}


@expect("28-buffer-size-read-at-init")
def _(outcomes, n):
    for o in outcomes:
        assert _returned(o)["kept_after_init"] >= 5, o.summary()


@case("28-sigint-waits-for-gloo", sizes=(2, 3), alone=True, timeout_s=3.0)
def sigint_waits_for_gloo(rank, world_size):
    """SIGINT 0.5 s in, to every rank: the last sleeps in Python code and raises
    KeyboardInterrupt at once; the others wait in an all_reduce the last never calls, and
    raise KeyboardInterrupt only when gloo gives up, at the 3 s timeout."""
    import os
    import signal
    import threading
    import time
    import torch
    signal.signal(signal.SIGINT, signal.default_int_handler)   # as a kernel's engine has
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.perf_counter()
    raised = None
    try:
        if rank == world_size - 1:
            time.sleep(10)
        else:
            dist.all_reduce(torch.ones(2))
    except BaseException as err:          # noqa: B902 (KeyboardInterrupt is the point)
        raised = type(err).__name__
    return {"raised": raised, "after_s": time.perf_counter() - start}


@expect("28-sigint-waits-for-gloo")
def _(outcomes, n):
    *callers, last = outcomes
    got = _returned(last)
    assert got["raised"] == "KeyboardInterrupt" and got["after_s"] < 1.5, got
    for o in callers:
        got = _returned(o)
        assert got["raised"] == "KeyboardInterrupt" and got["after_s"] >= 2.7, got
