"""Pipeline parallelism plumbing: the stages, the reference, a measured timeline, plots.

The taught code (the send/recv of activations and gradients, the GPipe and 1F1B
schedules) lives in notebook 18's `%%px` cells; this module builds the stages, records
and draws what the engines measured, and computes the bubble. Used by notebook 18.

    stages = make_stages(n_stages, width)        # the same weights for the same seed
    timeline = Timeline(); timeline.start()       # on an engine, right after a barrier
    with timeline.span("forward", microbatch=3):  # one bar of the timeline
        ...
    bubble_fraction(events_by_rank)               # 1 − compute time / step time, per rank
"""
from __future__ import annotations

import contextlib
import time
from typing import Iterator, Sequence

import torch
from torch import nn

from helpers.training.toy import D_IN, D_OUT, DTYPE, loss_fn

KINDS = ("forward", "backward", "send", "recv", "send+recv")
COMPUTE = ("forward", "backward")
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


def theory_bubble(n_stages: int, n_microbatches: int) -> float:
    """GPipe's bubble, (p − 1)/(m + p − 1), for equal stage times and free communication."""
    return (n_stages - 1) / (n_microbatches + n_stages - 1)


class Timeline:
    """Spans (kind, micro-batch, start, end) in seconds since `start()`, on one rank.

    On a CUDA device each span ends with `torch.cuda.synchronize`: kernels and NCCL
    calls return before the GPU has done the work, so without it a span would measure
    the launch, not the work.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.events: list[tuple[str, int | None, float, float]] = []
        self._sync = torch.device(device).type == "cuda"
        self._device = torch.device(device)
        self._t0 = time.perf_counter()

    def start(self) -> None:
        self.events.clear()
        self._t0 = time.perf_counter()

    @contextlib.contextmanager
    def span(self, kind: str, microbatch: int | None = None) -> Iterator[None]:
        if kind not in KINDS:
            raise ValueError(f"unknown span kind {kind!r}; use one of {KINDS}")
        begin = time.perf_counter() - self._t0
        try:
            yield
        finally:
            if self._sync:
                torch.cuda.synchronize(self._device)
            self.events.append((kind, microbatch, begin, time.perf_counter() - self._t0))


def step_time(events_by_rank: Sequence[Sequence]) -> float:
    """From the common start to the last event of any rank."""
    return max(end for events in events_by_rank for _, _, _, end in events)


def busy_time(events: Sequence, kinds: Sequence[str] = COMPUTE) -> float:
    return sum(end - begin for kind, _, begin, end in events if kind in kinds)


def bubble_fraction(events_by_rank: Sequence[Sequence]) -> list[float]:
    """Per rank: the share of the step during which it did not compute."""
    total = step_time(events_by_rank)
    return [1.0 - busy_time(events) / total for events in events_by_rank]


def plot_timelines(timelines: dict[str, Sequence[Sequence]], title: str):
    """One panel per schedule, one row per rank: coloured spans, idle left blank."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(len(timelines), 1, figsize=(11, 1.0 + 0.55 * len(timelines)
                                                         * len(next(iter(timelines.values())))),
                             squeeze=False)
    for ax, (name, events_by_rank) in zip(axes[:, 0], timelines.items()):
        for r, events in enumerate(events_by_rank):
            for kind, mb, begin, end in events:
                ax.broken_barh([(begin * 1e3, (end - begin) * 1e3)], (r - 0.4, 0.8),
                               color=COLOURS[kind])
                if kind in COMPUTE and mb is not None and (end - begin) * 1e3 > 0.02 * (
                        step_time(events_by_rank) * 1e3):
                    ax.text((begin + end) / 2 * 1e3, r, str(mb), ha="center", va="center",
                            fontsize=7, color="white")
        bubbles = bubble_fraction(events_by_rank)
        ax.set_yticks(range(len(events_by_rank)),
                      [f"rank {r} · bubble {b:.0%}" for r, b in enumerate(bubbles)])
        ax.invert_yaxis()
        ax.set_title(f"{name}: step {step_time(events_by_rank) * 1e3:.1f} ms", fontsize=10)
        ax.set_xlabel("ms since the common start (white space: idle)")
    handles = [Patch(color=c, label=k) for k, c in COLOURS.items()]
    handles.append(Patch(facecolor="white", edgecolor="grey", label="idle (nothing recorded)"))
    fig.legend(handles=handles, loc="upper right", ncol=len(handles), fontsize=8)
    fig.suptitle(title, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig


def plot_bubbles(table: Sequence[dict], n_stages: int, title: str):
    """Measured bubble (mean over ranks) per schedule against (p − 1)/(m + p − 1)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    ms = sorted({row["m"] for row in table})
    dense = torch.linspace(min(ms), max(ms), 200).tolist()
    ax.plot(dense, [theory_bubble(n_stages, m) for m in dense], "k--",
            label=f"(p − 1)/(m + p − 1), p = {n_stages}")
    for schedule, marker in (("GPipe", "o"), ("1F1B", "s")):
        rows = sorted((r for r in table if r["schedule"] == schedule), key=lambda r: r["m"])
        ax.plot([r["m"] for r in rows], [r["measured"] for r in rows], marker=marker,
                label=f"{schedule}, measured")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ms, [str(m) for m in ms])
    ax.set_xlabel("micro-batches m")
    ax.set_ylabel("bubble fraction")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
