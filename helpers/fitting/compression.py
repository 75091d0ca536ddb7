"""Notebook 23's compressed gradients: DDP with a communication hook, probed and trained.

    g, row = probe(ddp, x, y, loss_fn)        # the 3rd backward's gradient and its bytes
    losses = train(ddp, x, y, loss_fn, steps, lr)
    compression_text(rows, n)                 # hook × calls × S × model × measured × error

The hooks themselves are registered in the notebook's `%%px` cells; DDP and torch's hooks
call `dist.all_reduce(..., async_op=True)`, which `count_collectives` counts (its size and
model; the measured bytes are the whole pass's, `measured_bytes`). DDP's own all_reduce,
without a hook, is sent from C++: no call is counted, its bytes are measured all the same.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from helpers.fitting.accumulation import flat_grad, ring_all_reduce
from helpers.training.comm import count_collectives
from helpers.training.toy import reference_train

PASSES = 3   # PowerSGD compresses from its 3rd pass on (start_powerSGD_iter=2, DDP's rule)


def probe(ddp: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable,
          passes: int = PASSES) -> tuple[torch.Tensor, dict[str, Any]]:
    """`passes` forward and backward passes at the same parameters (no optimizer step):
    the last pass's gradient (after the hook) and what it sent (its calls counted, sizes,
    ring model, measured bytes)."""
    for _ in range(passes):
        ddp.zero_grad()
        with count_collectives() as log:
            loss_fn(ddp(x), y).backward()
    return flat_grad(ddp.module), {"calls": log.calls, "sizes": [c.size for c in log.entries],
                                   "model": log.model_bytes, "measured": log.measured_bytes}


def train(ddp: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable,
          steps: int, lr: float) -> list[float]:
    """`steps` SGD steps (the toy's training loop, on this rank's share); this rank's loss
    before each step."""
    return reference_train(ddp, x, y, steps, lr, loss=loss_fn).losses


def default_model(n_params: int, n: int, itemsize: int = 8) -> float:
    """DDP's own all_reduce of every gradient, in the ring model (its calls are in C++)."""
    return ring_all_reduce(n_params * itemsize, n)


def errors(grad: Any, reference: torch.Tensor) -> tuple[float, float]:
    """(max |g − g_ref|, ‖g − g_ref‖ / ‖g_ref‖) against the single-process gradient."""
    gap = torch.as_tensor(grad, dtype=reference.dtype) - reference
    return gap.abs().max().item(), (gap.norm() / reference.norm()).item()


def compression_rows(probes: dict[str, dict[str, Any]], reference: torch.Tensor,
                     n: int) -> list[dict[str, Any]]:
    """One rank's probes {hook: {"grad", "calls", "sizes", "model", "measured"}} as rows
    with the error against the reference gradient; a hook with no counted call is DDP's
    own all_reduce, modelled as one all_reduce of every gradient."""
    rows = []
    for hook, p in probes.items():
        model = p["model"] if p["calls"] else default_model(reference.numel(), n,
                                                            reference.element_size())
        worst, relative = errors(p["grad"], reference)
        rows.append({"hook": hook, "calls": p["calls"], "size": sum(p["sizes"]),
                     "model": model, "measured": p["measured"], "max_error": worst,
                     "rel_error": relative})
    return rows


def compression_text(rows: Sequence[dict[str, Any]], baseline: str) -> str:
    """The table: hook, calls counted, Σ S, model and measured bytes of one backward pass,
    measured as a share of `baseline`'s (× base), and the errors against the exact gradient."""
    base = next(r["measured"] for r in rows if r["hook"] == baseline)
    out = [f"{'hook':<26}{'calls':>6}{'Σ S (B)':>10}{'model (B)':>11}{'measured (B)':>14}"
           f"{'× base':>8}{'max |error|':>13}{'rel. error':>12}"]
    for r in rows:
        measured = "not measured" if r["measured"] is None else f"{r['measured']:,}"
        share = "" if r["measured"] is None or not base else f"{r['measured'] / base:.3f}"
        out.append(f"{r['hook']:<26}{r['calls']:>6}{r['size']:>10,}{r['model']:>11,.0f}"
                   f"{measured:>14}{share:>8}{r['max_error']:>13.1e}{r['rel_error']:>12.1e}")
    return "\n".join(out)
