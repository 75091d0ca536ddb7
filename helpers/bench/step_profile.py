"""Where a training step's time goes on one rank, from torch.profiler's timeline.

    events = profile_step(step, steps=3)      # the profiled step of median length
    breakdown(events)                         # {"step": 182.0, "compute": 120.3, ...} ms

The parts of the step's wall time on this rank (they add up to "step"):
- compute: the step's thread inside aten operators, not in a collective (the spans
  around them, an autograd node's, a hook's, also hold Python and blocking waits);
- communication: a collective or point-to-point call in flight (gloo's `gloo:*` spans,
  on its own threads or, for a blocking send/recv, on the step's thread; c10d's launch
  calls) while the step's thread computes nothing: communication that was not hidden;
- waiting: the rest: Python between operators, hooks, and a thread blocked on a peer
  outside any gloo span (e.g. a work.wait() whose transfer ended on gloo's thread).
`overlapped` (not a part of the sum) is communication hidden under compute.
On NCCL the kernels run on the GPU, not in these CPU spans: this breakdown is gloo's.
"""
from __future__ import annotations

from typing import Callable, Iterable

MARK = "bench step"
COMMUNICATION = ("gloo:", "c10d::", "c10d_functional::", "_c10d_functional::",
                 "record_param_comms", "nccl:")

Span = tuple[float, float]


def union(spans: Iterable[Span]) -> list[Span]:
    """Merged, sorted, non-overlapping spans."""
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(spans: Iterable[Span]) -> float:
    return sum(b - a for a, b in spans)


def intersect(a: list[Span], b: list[Span]) -> list[Span]:
    """The spans in both (each list already a union)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Span], b: list[Span]) -> list[Span]:
    """The spans of a outside b (both unions)."""
    out = []
    for start, end in a:
        cursor = start
        for s, e in b:
            if e <= cursor or s >= end:
                continue
            if s > cursor:
                out.append((cursor, s))
            cursor = max(cursor, e)
        if cursor < end:
            out.append((cursor, end))
    return out


def is_communication(name: str) -> bool:
    return name.startswith(COMMUNICATION)


def is_call(name: str) -> bool:
    """A collective's call on the calling thread (launch, or a functional wait)."""
    return is_communication(name) and not name.startswith(("gloo:", "nccl:"))


def profile_step(step: Callable[[], object], steps: int = 3) -> list[tuple[str, int, Span]]:
    """Run `step` `steps` times under torch.profiler (CPU); return the events (name,
    thread, (start, end) in µs) of the run of median length, its mark included."""
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function

    runs = []
    with profile(activities=[ProfilerActivity.CPU]):
        pass                                  # the profiler's first start is slow
    for _ in range(steps):
        if dist.is_initialized():
            dist.barrier()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function(MARK):
                step()
        events = [(e.name, e.thread, (e.time_range.start, e.time_range.end))
                  for e in prof.events()]
        mark = next(e for e in events if e[0] == MARK)
        runs.append((mark[2][1] - mark[2][0], events))
    runs.sort(key=lambda run: run[0])
    return runs[len(runs) // 2][1]


def breakdown(events: list[tuple[str, int, Span]]) -> dict[str, float]:
    """The step's parts in ms (module docstring): step, compute, communication,
    waiting, and overlapped."""
    mark = next(e for e in events if e[0] == MARK)
    thread, (t0, t1) = mark[1], mark[2]

    def clipped(spans):
        return union((max(a, t0), min(b, t1)) for a, b in spans if min(b, t1) > max(a, t0))
    inside = [e for e in events if e[0] != MARK]
    comm = clipped(s for name, _, s in inside if is_communication(name))
    # compute: aten operators only; the spans around them (an autograd node, a Python
    # autograd Function, a hook, FSDP's record_function) also hold Python and waits
    # and not a collective called inside an operator (a DTensor's redistribute): c10d's
    # call spans are subtracted, not gloo's, whose isend span on this thread lasts until
    # the transfer ends while the thread computes on
    compute = subtract(
        clipped(s for name, th, s in inside if th == thread and name.startswith("aten::")),
        clipped(s for name, th, s in inside if th == thread and is_call(name)))
    # gloo's work on its own threads under the step's compute is hidden, the rest exposed
    exposed = subtract(comm, compute)
    step = (t1 - t0) / 1e3
    parts = {"step": step, "compute": length(compute) / 1e3,
             "communication": length(exposed) / 1e3}
    parts["waiting"] = max(0.0, step - parts["compute"] - parts["communication"])
    parts["overlapped"] = length(intersect(comm, compute)) / 1e3
    return parts
