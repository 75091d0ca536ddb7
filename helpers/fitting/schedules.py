"""Pipeline schedules after 1F1B (notebook 24): the plans, a unit-time simulation of them,
the bubble formulas, and a recorder of what torch's multi-stage schedules run.

The taught code (running a plan with send/recv, the B/W split of the backward) lives in
notebook 24's `%%px` cells; this module says *what* each rank runs and in which order.

    order = plan("interleaved", p=4, m=8, v=2)   # per rank: [("F", stage, mb), ...]
    grid = simulate(order, p)                    # unit-time slots: grid[rank][t] = action
    measured_bubble(events_by_rank)              # 1 − compute time / step time, per rank
    with record_stages(stages, timeline):        # torch's schedule, action by action
        ...
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator, Sequence

from helpers.training.pipeline import Timeline, bubble_fraction, step_time  # noqa: F401

Action = tuple[str, int, int]      # (kind, stage, micro-batch)
# torch's letters: F forward, B full backward, I input-gradient backward, W weight gradient
SCHEDULES = ("1F1B", "interleaved", "ZB-H1")
COMPUTE = ("F", "B", "I", "W")
TORCH_SCHEDULES = ("ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble",
                   "ScheduleZBVZeroBubble", "ScheduleDualPipeV")
V_SHAPED = ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")


def check_split(schedule: str, p: int, m: int, v: int = 1) -> None:
    """Raise a ValueError naming the problem when `schedule` cannot run p ranks, m, v."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; use one of {SCHEDULES}")
    if p < 2:
        raise ValueError(f"a pipeline needs 2+ ranks, got p = {p}")
    if m < 1 or v < 1:
        raise ValueError(f"need m ≥ 1 micro-batches and v ≥ 1 chunks, got m = {m}, v = {v}")
    if schedule == "interleaved" and m % p:
        raise ValueError(f"interleaved 1F1B sends micro-batches in groups of p: m = {m} is "
                         f"not a multiple of p = {p}")
    if schedule != "interleaved" and v != 1:
        raise ValueError(f"{schedule} runs one stage per rank (v = 1), got v = {v}")


def stages_of_rank(rank: int, p: int, v: int, placement: str = "loop") -> list[int]:
    """The stages rank `rank` holds: s with s mod p = rank ("loop"), or r and 2p − 1 − r
    ("V", v = 2: the first rank holds the first and the last stage)."""
    if placement == "V":
        if v != 2:
            raise ValueError(f"the V placement holds 2 stages per rank, got v = {v}")
        return [rank, 2 * p - 1 - rank]
    if placement != "loop":
        raise ValueError(f"unknown placement {placement!r}; use 'loop' or 'V'")
    return [rank + k * p for k in range(v)]


def _one_f_one_b(rank: int, p: int, m: int) -> list[Action]:
    warmup = min(p - 1 - rank, m)
    order = [("F", rank, i) for i in range(warmup)]
    for i in range(m - warmup):
        order += [("F", rank, warmup + i), ("B", rank, i)]
    return order + [("B", rank, i) for i in range(m - warmup, m)]


def _interleaved(rank: int, p: int, m: int, v: int) -> list[Action]:
    """Megatron-LM's interleaved 1F1B: forwards in groups of p micro-batches per chunk,
    (p − r − 1)·2 + (v − 1)·p warm-up forwards, then one forward, one backward."""
    total = m * v

    def nth(k: int, backward: bool) -> tuple[int, int]:
        chunk = (k // p) % v
        if backward:
            chunk = v - 1 - chunk
        return chunk * p + rank, (k // (p * v)) * p + k % p

    warmup = min((p - rank - 1) * 2 + (v - 1) * p, total)
    order = [("F", *nth(k, False)) for k in range(warmup)]
    for k in range(total - warmup):
        order += [("F", *nth(warmup + k, False)), ("B", *nth(k, True))]
    return order + [("B", *nth(k, True)) for k in range(total - warmup, total)]


def plan(schedule: str, p: int, m: int, v: int = 1) -> list[list[Action]]:
    """Every rank's order of actions for `schedule` on p ranks, m micro-batches, v chunks.

    "1F1B" (notebook 18), "interleaved" (v chunks per rank, stage s on rank s mod p) and
    "ZB-H1" (the backward split in I, input gradient, and W, weight gradient; W fills what
    would be the bubble).
    """
    check_split(schedule, p, m, v)
    if schedule == "1F1B":
        return [_one_f_one_b(r, p, m) for r in range(p)]
    if schedule == "interleaved":
        return [_interleaved(r, p, m, v) for r in range(p)]
    return _zb_h1(p, m)


def _zb_h1(p: int, m: int) -> list[list[Action]]:
    """ZB-H1 by a unit-time list schedule: each slot, each rank runs its ready I first,
    else its next F (while fewer than p − r micro-batches wait for their B, as in 1F1B,
    and fewer than 2p − 1 − r for their W: W delayed by up to p − 1 − r), else its oldest W."""
    done: dict[Action, int] = {}                     # action → slot it ends
    order: list[list[Action]] = [[] for _ in range(p)]
    next_f, next_b, pending_w = [0] * p, [0] * p, [[] for _ in range(p)]
    t = 0
    while len(done) < 3 * p * m:
        chosen = []
        for r in range(p):
            b, f = ("I", r, next_b[r]), ("F", r, next_f[r])
            b_ready = next_b[r] < m and all(done.get(d, t + 1) <= t for d in _needs(b, p))
            f_ready = next_f[r] < m and all(done.get(d, t + 1) <= t for d in _needs(f, p))
            held = next_f[r] - next_b[r]                      # forwarded, not yet B
            kept = held + len(pending_w[r])                   # forwarded, not yet W
            if b_ready:
                chosen.append(b)
            elif f_ready and held < p - r and kept < 2 * p - 1 - r:
                chosen.append(f)
            elif pending_w[r]:
                chosen.append(("W", r, pending_w[r][0]))
            else:
                chosen.append(None)
        for r, action in enumerate(chosen):
            if action is None:
                continue
            kind, _, i = action
            if kind == "I":
                next_b[r] += 1
                pending_w[r].append(i)
            elif kind == "F":
                next_f[r] += 1
            else:
                pending_w[r].pop(0)
            done[action] = t + 1
            order[r].append(action)
        t += 1
        if t > 10 * p * m + 10:
            raise RuntimeError("ZB-H1 plan did not finish: a bug in the plan")
    return order


def owner(stage: int, p: int, placement: str = "loop") -> int:
    """The rank that holds `stage`."""
    if placement == "V":
        return stage if stage < p else 2 * p - 1 - stage
    return stage % p


def simulate(order: Sequence[Sequence[Action]], n_stages: int | None = None
             ) -> list[list[Action | None]]:
    """Run every rank's order on a unit-time clock (each action one slot, transfers
    free): grid[rank][t] is the action in slot t or None (idle). Raises if the orders
    wait on each other for ever (a deadlock)."""
    p = len(order)
    if n_stages is None:
        n_stages = 1 + max(s for actions in order for _, s, _ in actions)
    done: dict[tuple, int] = {}
    position, grid = [0] * p, [[] for _ in range(p)]
    total = sum(len(actions) for actions in order)
    while len(done) < total:
        ready = []
        t = len(grid[0])
        for r in range(p):
            action = order[r][position[r]] if position[r] < len(order[r]) else None
            if action is not None and all(done.get(d, t + 1) <= t
                                          for d in _needs(action, n_stages)):
                ready.append(action)
            else:
                ready.append(None)
        if not any(ready):
            raise RuntimeError(f"deadlock at slot {t}: every rank waits "
                               f"({[order[r][position[r]:position[r] + 1] for r in range(p)]})")
        for r, action in enumerate(ready):
            grid[r].append(action)
            if action is not None:
                position[r] += 1
                done[action] = t + 1
    return grid


def _needs(action: Action, n_stages: int) -> list[Action]:
    kind, s, i = action
    if kind == "F":
        return [("F", s - 1, i)] if s > 0 else []
    if kind in ("B", "I"):
        return [("F", s, i)] + ([(kind, s + 1, i)] if s < n_stages - 1 else [])
    return [("I", s, i)]


def grid_bubble(grid: Sequence[Sequence[Action | None]]) -> float:
    """The idle share of the simulated slots, over all ranks."""
    slots = sum(len(row) for row in grid)
    return sum(a is None for row in grid for a in row) / slots


def formula_bubble(schedule: str, p: int, m: int, v: int = 1) -> float:
    """The bubble in the formula, equal stage times, free transfers: 1F1B
    (p − 1)/(m + p − 1); interleaved (p − 1)/(v·m + p − 1), i.e. bubble time
    (p − 1)/(v·m) of the compute; ZB-H1 with F = B = W: (p − 1)/(3m + p − 1)."""
    check_split(schedule, p, m, v)
    if schedule == "1F1B":
        return (p - 1) / (m + p - 1)
    if schedule == "interleaved":
        return (p - 1) / (v * m + p - 1)
    return (p - 1) / (3 * m + p - 1)


def bubble_ranking(table: Sequence[dict]) -> str:
    """Per m: the schedules from the largest measured bubble to the smallest, beside the
    formulas' order (rows with schedule, m, measured, formula)."""
    lines = []
    for m in sorted({row["m"] for row in table}):
        rows = [row for row in table if row["m"] == m]
        measured = sorted(rows, key=lambda row: -row["measured"])
        formula = sorted(rows, key=lambda row: -row["formula"])
        same = [row["schedule"] for row in measured] == [row["schedule"] for row in formula]
        lines.append(f"m = {m}: measured "
                     + " > ".join(f"{row['schedule']} {row['measured']:.2f}" for row in measured)
                     + "; formulas "
                     + " > ".join(f"{row['schedule']} {row['formula']:.2f}" for row in formula)
                     + ("; the same order" if same else "; not the same order"))
    return "\n".join(lines)


class Spans(Timeline):
    """Spans (kind, "stage.mb", start, end) in seconds since `start()`, on one rank:
    notebook 18's timeline, with kinds F, B, I, W (compute) and wait (for a transfer)."""

    kinds = (*COMPUTE, "wait")

    def span(self, kind: str, stage: int | None = None,  # type: ignore[override]
             mb: int | None = None) -> contextlib.AbstractContextManager[None]:
        return super().span(kind, None if stage is None else f"{stage}.{mb}")


@contextlib.contextmanager
def hold(seconds: float) -> Iterator[None]:
    """Run the block, then sleep until `seconds` have passed since it began (at once if it
    took longer): an action of fixed length, as a kernel on a GPU of its own, during
    which the CPU core is free for the other ranks."""
    if seconds < 0:
        raise ValueError(f"an action cannot last {seconds} s")
    start = time.perf_counter()
    yield
    left = start + seconds - time.perf_counter()
    if left > 0:
        time.sleep(left)


def compute_order(events: Sequence) -> list[str]:
    """A rank's compute spans in the order they started: ["F0.0", "F0.1", "B0.0", ...]
    (kind, stage.micro-batch)."""
    return [f"{kind}{label}" for kind, label, begin, _ in sorted(events, key=lambda e: e[2])
            if kind in COMPUTE]


def measured_bubble(events_by_rank: Sequence[Sequence]) -> list[float]:
    """Per rank: 1 − (its F, B, I and W time) / the step time (notebook 18's measure)."""
    return bubble_fraction(events_by_rank, COMPUTE)


@contextlib.contextmanager
def record_stages(stages: Sequence, spans: Spans) -> Iterator[list[int]]:
    """Record what a torch multi-stage schedule runs on this rank's `stages`: each
    forward_one_chunk (F), backward_one_chunk (B, a full backward; I when called with
    full_backward=False: the input gradient only) and backward_weight_one_chunk (W) as a
    span; the
    yielded list gets, after every action, the stage inputs this rank holds for a
    backward (forward caches + backward states), to measure the peak."""
    held: list[int] = []

    def wrap(stage, name: str, kind: str):
        function = getattr(stage, name)

        def run(chunk, *args, **kwargs):
            full = kwargs.get("full_backward", True)
            with spans.span("I" if kind == "B" and not full else kind, stage.stage_index,
                            chunk):
                out = function(chunk, *args, **kwargs)
            held.append(sum(len(s.fwd_cache) + len(s.backward_state) for s in stages))
            return out
        setattr(stage, name, run)

    for stage in stages:
        wrap(stage, "forward_one_chunk", "F")
        wrap(stage, "backward_one_chunk", "B")
        wrap(stage, "backward_weight_one_chunk", "W")
    try:
        yield held
    finally:
        for stage in stages:
            for name in ("forward_one_chunk", "backward_one_chunk",
                         "backward_weight_one_chunk"):
                del stage.__dict__[name]
