"""Pipeline parallelism plumbing: the stages, the reference, a measured timeline, plots.

The taught code (the send/recv of activations and gradients, the GPipe and 1F1B
schedules) lives in notebook 18's `%%px` cells; this module builds the stages, records
and draws what the engines measured (timelines, and torch's own schedule's; the bytes
between stages, model and measured), and computes the bubble.

    stages = make_stages(n_stages, width)        # the same weights for the same seed
    timeline = Timeline(); timeline.start()       # on an engine, right after a barrier
    with timeline.span("forward", microbatch=3):  # one bar of the timeline
        ...
    bubble_fraction(events_by_rank)               # 1 − compute time / step time, per rank
    with record_schedule(schedule, timeline):     # torch's schedule, timed span by span
        ...
    compute_order(events)                         # ["F0", "F1", "B0", ...]
    p2p_counts(log)                               # a step's sends, model and measured bytes
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Sequence

import torch
from torch import nn

from helpers.training.measured import bytes_text
from helpers.training.toy import D_IN, D_OUT, DTYPE, loss_fn

KINDS = ("forward", "backward", "send", "recv", "send+recv")
COMPUTE = ("forward", "backward")
TRANSFERS = ("send", "recv", "send+recv")
COLOURS = {"forward": "#4c8bf5", "backward": "#2e9e5b", "send": "#f0a030",
           "recv": "#d9534f", "send+recv": "#9b59b6"}


def make_stages(n_stages: int, width: int, d_in: int = D_IN, d_out: int = D_OUT,
                seed: int = 0, dtype: torch.dtype = DTYPE) -> list[nn.Sequential]:
    """A deep MLP cut into `n_stages` stages of equal work.

    Every stage holds one width × width Linear + Tanh (its main work); stage 0 starts
    with Linear(d_in → width) + Tanh, the last stage ends with Linear(width → d_out).
    """
    if n_stages < 1:
        raise ValueError(f"a pipeline needs at least one stage, got {n_stages}")
    torch.manual_seed(seed)
    stages = []
    for s in range(n_stages):
        layers: list[nn.Module] = []
        if s == 0:
            layers += [nn.Linear(d_in, width), nn.Tanh()]
        layers += [nn.Linear(width, width), nn.Tanh()]
        if s == n_stages - 1:
            layers.append(nn.Linear(width, d_out))
        stages.append(nn.Sequential(*layers).to(dtype))
    return stages


def reference_gradients(n_stages: int, width: int, X: torch.Tensor, Y: torch.Tensor
                        ) -> tuple[float, list[dict[str, torch.Tensor]]]:
    """The whole model, unsplit, on the whole batch: the loss and each stage's gradients."""
    model = nn.Sequential(*make_stages(n_stages, width))
    loss = loss_fn(model(X), Y)
    loss.backward()
    grads = [{name: p.grad.detach().clone() for name, p in stage.named_parameters()}
             for stage in model]
    return loss.item(), grads


class _BackwardBegins(torch.autograd.Function):
    """Identity; its backward, the first of the stage's, notes when the backward began."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, clock: dict) -> torch.Tensor:
        ctx.clock = clock
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.clock["backward"] = time.perf_counter()
        return grad, None


class _BackwardEnds(torch.autograd.Function):
    """Identity; its backward, the last of the stage's, waits out the backward's time."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, clock: dict, seconds: float) -> torch.Tensor:
        ctx.clock, ctx.seconds = clock, seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        _wait_until(ctx.clock["backward"] + ctx.seconds)
        return grad, None, None


def _wait_until(deadline: float) -> None:
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)       # the core is free meanwhile, as while a GPU computes


def pace(stage: nn.Module, forward_s: float, backward_s: float) -> nn.Module:
    """Make `stage` take a fixed time per sample, as a kernel on a GPU of its own does,
    without holding a CPU core: each forward (backward) runs the real layers, then sleeps
    until `forward_s` (`backward_s`) × the micro-batch's rows have passed since it began.
    The values and gradients are the real ones; the same module comes back, hooked."""
    if forward_s <= 0 or backward_s <= 0:
        raise ValueError(f"a paced stage needs positive times per sample, got forward "
                         f"{forward_s} s and backward {backward_s} s")
    clock: dict[str, float] = {}

    def before(module, inputs):
        clock["forward"] = time.perf_counter()
        x, = inputs
        x = x if x.requires_grad else x.detach().requires_grad_(True)
        return (_BackwardEnds.apply(x, clock, backward_s * x.shape[0]),)

    def after(module, inputs, y):
        _wait_until(clock["forward"] + forward_s * inputs[0].shape[0])
        return _BackwardBegins.apply(y, clock)

    stage.register_forward_pre_hook(before)
    stage.register_forward_hook(after)
    return stage


def theory_bubble(n_stages: int, n_microbatches: int) -> float:
    """GPipe's bubble, (p − 1)/(m + p − 1), for equal stage times and free communication."""
    return (n_stages - 1) / (n_microbatches + n_stages - 1)


class Timeline:
    """Spans (kind, label, start, end) in seconds since `start()`, on one rank; the label
    is the micro-batch here (a subclass may name another: a ring's step, "stage.mb"), and
    `kinds` the spans a subclass allows.

    On a CUDA device each span ends with `torch.cuda.synchronize`: kernels and NCCL
    calls return before the GPU has done the work, so without it a span would measure
    the launch, not the work.
    """

    kinds: tuple[str, ...] = KINDS

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.events: list[tuple[str, Any, float, float]] = []
        self._sync = torch.device(device).type == "cuda"
        self._device = torch.device(device)
        self._t0 = time.perf_counter()

    def start(self) -> None:
        self.events.clear()
        self._t0 = time.perf_counter()

    @contextlib.contextmanager
    def span(self, kind: str, microbatch: Any = None) -> Iterator[None]:
        if kind not in self.kinds:
            raise ValueError(f"unknown span kind {kind!r}; use one of {self.kinds}")
        begin = time.perf_counter() - self._t0
        try:
            yield
        finally:
            if self._sync:
                torch.cuda.synchronize(self._device)
            self.events.append((kind, microbatch, begin, time.perf_counter() - self._t0))


@contextlib.contextmanager
def record_schedule(schedule, timeline: Timeline) -> Iterator[None]:
    """Record what a `torch.distributed.pipelining` schedule runs on this rank, as spans.

    Each `forward_one_chunk` and `backward_one_chunk` of its stage becomes a "forward" or
    "backward" span of that micro-batch, each wait for its batched transfers (the
    module's `_wait_batch_p2p`) a "send+recv" span: the order torch really ran, timed.
    """
    from torch.distributed.pipelining import schedules

    stage, wait = schedule._stage, schedules._wait_batch_p2p

    def timed(kind: str, function):
        def run(chunk, *args, **kwargs):
            with timeline.span(kind, chunk):
                return function(chunk, *args, **kwargs)
        return run

    def timed_wait(work):
        if not work:
            return wait(work)
        with timeline.span("send+recv"):
            return wait(work)

    stage.forward_one_chunk = timed("forward", stage.forward_one_chunk)
    stage.backward_one_chunk = timed("backward", stage.backward_one_chunk)
    schedules._wait_batch_p2p = timed_wait
    try:
        yield
    finally:
        del stage.forward_one_chunk, stage.backward_one_chunk   # the class's methods again
        schedules._wait_batch_p2p = wait


def compute_order(events: Sequence) -> list[str]:
    """The forwards and backwards of one rank's events, in the order they started: F0, B0…"""
    spans = sorted((begin, kind, mb) for kind, mb, begin, _ in events if kind in COMPUTE)
    return [f"{kind[0].upper()}{mb}" for _, kind, mb in spans]


def in_flight(order: Sequence, done: Sequence[str] = ("B",)) -> int:
    """The most micro-batches forwarded and not yet done with, along an order ("F0", "B0"…,
    or notebook 24's ("F", stage, mb) and "F0.1"): each F adds one, each action of a kind in
    `done` ends one. Notebook 24 splits B into I and W: done=("B", "W") counts what a rank
    keeps until its last backward, done=("I",) what waits for its input gradient."""
    held = peak = 0
    for step in order:
        held += (step[0] == "F") - (step[0] in done)
        peak = max(peak, held)
    return peak


def warmup_forwards(order: Sequence[str]) -> int:
    """How many forwards a rank ran before its first backward."""
    return next((i for i, step in enumerate(order) if step.startswith("B")), len(order))


def p2p_counts(log) -> dict:
    """One step's point-to-point traffic from a `count_collectives` log: sends (send and
    isend), receives, how many of them were batched (isend, irecv), the model's bytes
    (S a send) and the measured bytes."""
    by_name = log.by_name()
    calls = {name: by_name.get(name, {}).get("calls", 0) for name in
             ("send", "isend", "recv", "irecv")}
    return {"sends": calls["send"] + calls["isend"], "recvs": calls["recv"] + calls["irecv"],
            "batched": calls["isend"] + calls["irecv"], "model": log.model_bytes,
            "measured": log.measured_bytes}


def traffic_table(traffic_by_rank: Sequence[Sequence[dict]], schedule: str) -> str:
    """One row per stage: the model's bytes for one step (S a send, whatever m), then the
    bytes measured on gloo at every m (`p2p_counts` rows with "schedule" and "m")."""
    ms = sorted({row["m"] for row in traffic_by_rank[0] if row["schedule"] == schedule})
    lines = [f"{schedule}: bytes each stage sent in one step",
             f"{'':<6}{'model: S a send':>16}   measured on gloo (B)",
             f"{'stage':<6}{'(B)':>16}" + "".join(f"{f'm = {m}':>12}" for m in ms)]
    for rank, rows in enumerate(traffic_by_rank):
        mine = {row["m"]: row for row in rows if row["schedule"] == schedule}
        models = {mine[m]["model"] for m in ms}
        model = bytes_text(models.pop()) if len(models) == 1 else "varies with m"
        lines.append(f"{rank:<6}{model:>16}"
                     + "".join(f"{bytes_text(mine[m]['measured']):>12}" for m in ms))
    return "\n".join(lines)


def traffic_report(traffic_by_rank: Sequence[Sequence[dict]]):
    """✓ per stage when every step wrote exactly its payload plus gloo's headers: 96 B a
    send and 48 B a receive (`measured.p2p_check`)."""
    from helpers.training.measured import NOT_MEASURED, p2p_check
    from helpers.checks import Report

    report = Report("each stage's measured bytes against the model, every schedule and m")
    for rank, rows in enumerate(traffic_by_rank):
        if any(row["measured"] is None for row in rows):
            return report.note(NOT_MEASURED)
        checks = [(row, *p2p_check(row["measured"], row["model"], row["sends"], row["recvs"]))
                  for row in rows]
        wrong = [check for check in checks if not check[1]]
        row, _, text = (wrong or sorted(checks, key=lambda check: check[0]["sends"]))[-1]
        report.add(rank, not wrong, f"{len(checks) - len(wrong)} of {len(rows)} steps exact; "
                                    f"{row['schedule']}, m = {row['m']}: {text}")
    return report


def step_time(events_by_rank: Sequence[Sequence]) -> float:
    """From the common start to the last event of any rank."""
    return max(end for events in events_by_rank for _, _, _, end in events)


def busy_time(events: Sequence, kinds: Sequence[str] = COMPUTE) -> float:
    return sum(end - begin for kind, _, begin, end in events if kind in kinds)


def bubble_fraction(events_by_rank: Sequence[Sequence],
                    kinds: Sequence[str] = COMPUTE) -> list[float]:
    """Per rank: the share of the step during which it did not compute (spans of `kinds`)."""
    total = step_time(events_by_rank)
    return [1.0 - busy_time(events, kinds) / total for events in events_by_rank]


def bubble_trend(table: Sequence[dict]) -> str:
    """Per schedule: the measured bubble with one micro-batch, the smallest with more
    (and at which m), and the one at the largest m (rows of the notebook's table)."""
    lines = []
    for schedule in dict.fromkeys(row["schedule"] for row in table):
        bubble = {row["m"]: row["measured"] for row in table if row["schedule"] == schedule}
        best = min((m for m in bubble if m > 1), key=bubble.get)
        lines.append(f"{schedule}: {bubble[1]:.0%} with one micro-batch, {bubble[best]:.0%} at "
                     f"best with more (m = {best}), {bubble[max(bubble)]:.0%} at m = "
                     f"{max(bubble)}")
    return "\n".join(lines)


def compute_ms(events_by_rank: Sequence[Sequence], kinds: Sequence[str] = COMPUTE) -> float:
    """The time one step spent in spans of `kinds` (forward and backward), mean over the
    ranks, in ms."""
    return 1e3 * sum(busy_time(events, kinds) for events in events_by_rank) / len(events_by_rank)


def bubble_fall(table: Sequence[dict]) -> str:
    """Per schedule: the measured bubble as m grows, beside the formula's, and whether it
    fell at every step."""
    lines = []
    for schedule in dict.fromkeys(row["schedule"] for row in table):
        rows = sorted((row for row in table if row["schedule"] == schedule),
                      key=lambda row: row["m"])
        measured = [row["measured"] for row in rows]
        formula = " → ".join(f"{row['theory']:.2f}" for row in rows)
        fell = all(b < a for a, b in zip(measured, measured[1:]))
        lines.append(f"{schedule}: m = {', '.join(str(row['m']) for row in rows)}: measured "
                     f"{' → '.join(f'{b:.2f}' for b in measured)}, formula "
                     f"{formula}; "
                     f"{'fell at every step' if fell else 'did not fall at every step'}")
    return "\n".join(lines)
