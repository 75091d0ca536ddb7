"""Notebook 21's plumbing: which tokens a rank holds, a timeline of spans, the references
and the tables. The taught code (the online-softmax merge, the ring of K/V blocks with
`batch_isend_irecv`, the causal skip) lives in the notebook's `%%px` cells.

    token_positions(rank, n, "zigzag")      # the global positions of rank's tokens
    chunks(rank, n, "zigzag")               # its 2 chunks: (local rows, global positions)
    spans = Spans(device); spans.start()    # on an engine, right after a barrier
    with spans.span("compute", step): ...   # one bar of the per-rank timeline
    full_qkv(); full_attention(causal)      # the single-process reference
    scores_needed(n, layout, causal)        # the model of each rank's work

Runs on the engines and in the notebook alike (torch only).
"""
from __future__ import annotations

from typing import Sequence

import torch

from helpers.training.measured import bytes_text
from helpers.training.pipeline import Timeline
from helpers.training.tensor_parallel import max_diff  # noqa: F401  (the checks call it here)
from helpers.transformer.block import SEQ, attention, make_block, make_tokens, split_heads

LAYOUTS = ("contiguous", "zigzag")
KINDS = ("compute", "post", "wait")


def chunk_count(n: int, layout: str) -> int:
    """How many equal chunks the sequence is cut into: n (contiguous) or 2n (zig-zag)."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; use one of {LAYOUTS}")
    return n if layout == "contiguous" else 2 * n


def token_positions(rank: int, n: int, layout: str, seq: int = SEQ) -> list[int]:
    """The global positions of the tokens `rank` holds, in the order it holds them.

    contiguous: chunk `rank` of n; zigzag: chunks `rank` and 2n − 1 − `rank` of 2n
    (the first rank gets the first and the last chunk, and so on inwards).
    """
    chunks = chunk_count(n, layout)
    if n < 1 or not 0 <= rank < n:
        raise ValueError(f"rank {rank} is not in a world of {n}")
    if seq % chunks:
        raise ValueError(f"a sequence of {seq} tokens does not split into {chunks} equal "
                         f"chunks ({layout}, {n} ranks)")
    size = seq // chunks
    mine = [rank] if layout == "contiguous" else [rank, 2 * n - 1 - rank]
    return [c * size + i for c in mine for i in range(size)]


def chunks(rank: int, n: int, layout: str, seq: int = SEQ,
           device: torch.device | str = "cpu") -> list[tuple[slice, torch.Tensor]]:
    """The two chunks of 2n that `rank` holds, for both splits (so that the work is cut
    the same way): (their rows in the rank's local block, their global positions).
    contiguous: chunks 2·rank and 2·rank + 1; zigzag: chunks rank and 2n − 1 − rank."""
    positions = token_positions(rank, n, layout, seq)
    if seq % (2 * n):
        raise ValueError(f"a sequence of {seq} tokens does not split into {2 * n} chunks")
    size = seq // (2 * n)
    return [(slice(i, i + size), torch.tensor(positions[i:i + size], device=device))
            for i in range(0, len(positions), size)]


class Spans(Timeline):
    """(kind, step, start, end) in seconds since `start()`, on one rank: notebook 18's
    timeline, its spans the ring's (compute a block, post the transfer, wait for it)."""

    kinds = KINDS


def total(events: Sequence, kind: str) -> float:
    """Seconds spent in spans of `kind`."""
    return sum(end - begin for k, _, begin, end in events if k == kind)


# ------------------------------------------------------------------ references (one process)
def full_qkv(X: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v of the whole sequence X (default: the toy's 24 tokens), (batch, heads, seq,
    head_dim), from the block's LN1 and projections: what the ranks split."""
    X = make_tokens()[0] if X is None else X
    block = make_block()
    with torch.no_grad():
        h = block.ln1(X)
        a = block.attn
        return tuple(split_heads(p(h), a.n_heads) for p in (a.q, a.k, a.v))


def full_attention(causal: bool, X: torch.Tensor | None = None) -> torch.Tensor:
    """The block's own `attention` on the whole sequence, in one process."""
    return attention(*full_qkv(X), causal=causal)


# ------------------------------------------------------------------ the model of the work
def scores_needed(n: int, layout: str, causal: bool, seq: int = SEQ) -> list[int]:
    """Query·key scores each rank computes (per batch element and head) when it skips every
    (query chunk, key chunk) pair wholly in the future: the model the measurement is held to."""
    work = []
    for r in range(n):
        count = 0
        for s in range(n):
            for _, q in chunks(r, n, layout, seq):
                for _, k in chunks(s, n, layout, seq):
                    if not causal or k.min() <= q.max():
                        count += len(q) * len(k)
        work.append(count)
    return work


def owner_of(fingerprint: float, own: Sequence[float]) -> int:
    """Whose K/V block a rank held: the rank whose own block has this first K value."""
    found = [r for r, value in enumerate(own) if value == fingerprint]
    if len(found) != 1:
        raise ValueError(f"K value {fingerprint!r} matches ranks {found}, not exactly one")
    return found[0]


# ------------------------------------------------------------------ tables
def work_table(rows: dict[str, list[dict]]) -> str:
    """Per layout and rank: K/V blocks merged, scores computed, compute time (measured)."""
    lines = [f"{'layout':<12}{'rank':>5}{'blocks merged':>15}{'scores computed':>17}"
             f"{'compute (ms)':>14}"]
    for layout, per_rank in rows.items():
        for r, row in enumerate(per_rank):
            lines.append(f"{layout:<12}{r:>5}{row['blocks']:>15}{row['scores']:>17}"
                         f"{row['compute_ms']:>14.2f}")
    return "\n".join(lines)


def bytes_table(ring: dict, theirs: dict, n: int) -> str:
    """One rank's bytes: the ring by hand and torch's context_parallel, model and measured."""
    rows = [f"{'':<28}{'calls':>7}{'model (B)':>12}{'measured (B)':>14}",
            f"{'ring: isend (K/V blocks)':<28}{ring['sends']:>7}{bytes_text(ring['model']):>12}"
            f"{bytes_text(ring['measured']):>14}",
            f"{'context_parallel: all_gather':<28}{theirs['all_gather']:>7}"
            f"{bytes_text(theirs['model']):>12}{bytes_text(theirs['measured']):>14}"]
    return "\n".join(rows)
