"""Notebook 25: all_reduce and broadcast built by hand three ways, and what they cost.

The taught loops (every `batch_isend_irecv`) are in the notebook's `%%px` cells; here are
the shapes they follow (which rank talks to which), the model of what each rank sends,
the timing plumbing, the α-β predictions and the crossover table.

- ring: notebook 10's schedule (helpers.collectives.ring), 2(n − 1) steps.
- binary tree: ranks in heap order (parent (v − 1) // 2, children 2v + 1, 2v + 2); reduce up
  to rank 0, then broadcast down. Our double binary tree runs a second, mirrored tree
  (v = n − 1 − r) on the other half of the data (NCCL builds its two trees otherwise:
  src/graph/trees.cc); it evens the bytes per rank at 2 and 4 ranks only.
- recursive halving-doubling (Rabenseifner): partners r XOR 2^k, so a power-of-two number
  p of ranks; with n ranks, the n − p extra ones first hand their tensor to rank r − p
  (the fold) and get the result back at the end.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from helpers.bench import nccl_tests
from helpers.bench.alpha_beta import terms
from helpers.bench.traffic import tree_children
from helpers.checks import Report

HAND_BUILT = ("ring", "tree", "double_tree", "halving_doubling")
TIMED = HAND_BUILT
# our algorithm → its α-β terms in helpers.bench.alpha_beta.ALGORITHMS (not pipelined)
MODELS = {"ring": "ring", "tree": "binary_tree", "double_tree": "double_binary_tree",
          "halving_doubling": "halving_doubling"}
FIT_BOUND = 0.5        # above this fit error, no prediction: the model does not describe the run
NAMES = {"ring": "ring", "tree": "binary tree", "double_tree": "double binary tree",
         "halving_doubling": "halving-doubling", "library": "dist.all_reduce (gloo)",
         "chain": "chain broadcast", "binomial": "binomial-tree broadcast"}


# ---------------------------------------------------------------- shapes

@dataclass(frozen=True)
class TreeNode:
    """One rank's place in a binary tree of n ranks (ranks, not heap labels)."""

    parent: int | None
    children: tuple[int, ...]
    depth: int          # this rank's distance from the root
    height: int         # the tree's deepest depth


def tree_node(rank: int, n: int, mirrored: bool = False) -> TreeNode:
    """Rank `rank` in the heap-ordered binary tree of n ranks (mirrored: v = n − 1 − r)."""
    if not 0 <= rank < n:
        raise ValueError(f"rank {rank} is not in a group of {n} ranks")
    label = (lambda r: n - 1 - r) if mirrored else (lambda r: r)
    v = label(rank)
    parent = None if v == 0 else label((v - 1) // 2)
    children = tuple(label(c) for c in (2 * v + 1, 2 * v + 2) if c < n)
    return TreeNode(parent, children, (v + 1).bit_length() - 1, n.bit_length() - 1)


def check_power_of_two(n: int) -> int:
    """n, when it is a power of two; else ValueError naming the problem and the fix."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"recursive halving-doubling pairs rank r with r XOR 2^k, so it needs "
                         f"a power-of-two number of ranks, not {n}: fold the "
                         f"{n - fold_size(n) if n > 0 else 0} extra rank(s) into the first "
                         f"ones first")
    return n


def fold_size(n: int) -> int:
    """p: the largest power of two ≤ n (the ranks that run halving-doubling)."""
    if n < 1:
        raise ValueError(f"a group needs at least one rank, got {n}")
    return 1 << (n.bit_length() - 1)


def partners(rank: int, n: int) -> list[int]:
    """Halving-doubling's partner of `rank` at each reduce-scatter step (distance p/2 … 1)."""
    p = check_power_of_two(n)
    return [rank ^ (p >> (k + 1)) for k in range(p.bit_length() - 1)]


def binomial_children(rank: int, n: int) -> list[int]:
    """The ranks `rank` sends to in a binomial-tree broadcast from rank 0 (v → v + 2^i):
    gloo's own broadcast tree (helpers.bench.traffic.tree_children)."""
    return tree_children(rank, n, 0)


def unit(n: int) -> int:
    """Elements a tensor's length must be a multiple of, for every algorithm on ≤ n ranks."""
    return math.lcm(*range(1, n + 1), 2)


# ---------------------------------------------------------------- the model

def model_sent(algorithm: str, size: float, n: int, rank: int) -> float:
    """Payload bytes `rank` sends in one call of `algorithm` (S = size bytes), the model."""
    if algorithm in ("ring", "library"):        # gloo's all_reduce is the ring (notebook 11)
        return nccl_tests.model_sent("all_reduce", size, n, rank)
    if algorithm == "tree":
        node = tree_node(rank, n)
        return size * ((node.parent is not None) + len(node.children))
    if algorithm == "double_tree":
        return sum(size / 2 * ((t.parent is not None) + len(t.children))
                   for t in (tree_node(rank, n), tree_node(rank, n, mirrored=True)))
    if algorithm == "halving_doubling":
        p = fold_size(n)
        if rank >= p:
            return float(size)                        # its tensor, to rank r − p
        return 2 * (p - 1) / p * size + size * (rank + p < n)   # + the result, sent back
    if algorithm == "chain":
        return float(size) * (rank < n - 1)
    if algorithm == "binomial":
        return float(size) * len(binomial_children(rank, n))
    raise ValueError(f"unknown algorithm {algorithm!r}; valid: {', '.join(NAMES)}")


def model_terms(algorithm: str, n: int) -> tuple[float, float]:
    """(steps one after the other, bytes / S on the busiest link) of our all_reduce
    `algorithm` on n ranks: helpers.bench.alpha_beta.terms of its model (MODELS)."""
    if algorithm not in MODELS:
        raise ValueError(f"no α-β model for {algorithm!r}; valid: {', '.join(MODELS)}")
    return terms("all_reduce", n, MODELS[algorithm])


def predicted_crossover(a: str, b: str, n: int, alpha_us: float,
                        beta_gbps: float) -> float | None:
    """S (bytes) where the model's times of a and b are equal; None if they never cross."""
    (sa, ba), (sb, bb) = model_terms(a, n), model_terms(b, n)
    da, db = sa - sb, ba - bb
    if da == 0 or db == 0 or (da > 0) == (db > 0):
        return None                     # one of them is ahead (or level) at every size
    return alpha_us * beta_gbps * 1e3 * (-da) / db


def measured_crossover(sizes: Sequence[int], times_a: Sequence[float],
                       times_b: Sequence[float]) -> tuple[int, int] | None:
    """(last size, next size) between which the faster of a and b changes first; None if the
    same one is faster at every size of the sweep."""
    faster = [ta < tb for ta, tb in zip(times_a, times_b)]
    for i in range(1, len(faster)):
        if faster[i] != faster[0]:
            return sizes[i - 1], sizes[i]
    return None


# ---------------------------------------------------------------- timing, on each rank

def iters_for(size_bytes: int, budget_bytes: int = 64 << 10, most: int = 2) -> int:
    """Calls per timed batch: `most` for small messages, fewer as they grow (≥ 1), so that
    a batch is long enough to time and the sweep stays short."""
    return max(1, min(most, budget_bytes // max(size_bytes, 1)))


def interleaved_us(calls: Mapping[str, Callable[[], Any]], barrier: Callable[[], Any],
                   batches: int = 7, iters: int = 1) -> dict[str, tuple[float, float]]:
    """Per call: (fastest, slowest) of `batches` batches of `iters` calls, µs per call,
    after one warm-up each. Interleaved: every batch round times each call once, one after
    the other, each after a barrier, so that all of them see the same background load.
    The fastest is the figure: another process only ever slows a batch down."""
    if batches < 1 or iters < 1:
        raise ValueError(f"need batches >= 1 and iters >= 1, got {batches}, {iters}")
    for call in calls.values():
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(batches):
        for name, call in calls.items():
            barrier()
            start = time.perf_counter()
            for _ in range(iters):
                call()
            times[name].append((time.perf_counter() - start) / iters * 1e6)
    return {name: (min(t), max(t)) for name, t in times.items()}


# ---------------------------------------------------------------- in the notebook

def report_results(pulled: Sequence[dict], reference: Any, name: str = "results") -> Report:
    """Every algorithm's all_reduce on every rank against the single-process sum."""
    import torch

    report = Report("each hand-built all_reduce against the sum in this process")
    for state in pulled:
        lines = []
        ok = True
        for algorithm, got in state[name].items():
            diff = (torch.as_tensor(got) - reference).abs().max().item()
            ok = ok and diff == 0
            lines.append(f"{algorithm} {'=' if diff == 0 else f'off by {diff:.1e} from'} Σ")
        report.add(state["rank"], ok, ", ".join(lines))
    return report


def sent_by(log: Sequence[Sequence[Any]], n: int) -> list[list[int]]:
    """A run's log of (step, src, dst, lo, hi) sends → elements sent[src][dst]."""
    sent = [[0] * n for _ in range(n)]
    for _, src, dst, lo, hi in log:
        sent[src][dst] += hi - lo
    return sent


def bytes_rows(pulled: Sequence[dict], size: int, n: int) -> list[dict]:
    """Per algorithm and rank: measured bytes written, the model's payload, ✓ when measured
    is the model plus gloo's headers (helpers.bench.wire.agrees)."""
    from helpers.bench.wire import agrees

    rows = []
    for state in pulled:
        r = state["rank"]
        for algorithm, sent in state["wire"].items():
            model = model_sent(algorithm, size, n, r)
            calls = int(model_terms(algorithm, n)[0]) if algorithm in MODELS else 1
            ok = sent is None or agrees(sent, model, calls, n)
            rows.append({"algorithm": algorithm, "rank": r, "measured": sent, "model": model,
                         "ok": ok})
    return rows


def bytes_report(rows: Sequence[dict], size: int, n: int) -> tuple[Report, str]:
    """The ✓ per rank and a printed table: measured / model per algorithm, per rank."""
    report = Report(f"bytes each rank wrote, S = {size} B: measured (gloo) = model + headers")
    algorithms = list(dict.fromkeys(row["algorithm"] for row in rows))
    head = f"{'algorithm':<26}" + "".join(f"{f'rank {r}':>22}" for r in range(n))
    lines = [head, f"{'':<26}" + "".join(f"{'measured / model':>22}" for _ in range(n))]
    for a in algorithms:
        cells = [row for row in rows if row["algorithm"] == a]
        lines.append(f"{NAMES[a]:<26}" + "".join(
            f"{_bytes(row['measured']):>11} /{_bytes(row['model']):>9}"
            + ("" if row["ok"] else "✗")
            for row in cells))
    for r in range(n):
        mine = [row for row in rows if row["rank"] == r]
        report.add(r, all(row["ok"] for row in mine),
                   ", ".join(f"{row['algorithm']} {_bytes(row['measured'])}" for row in mine))
    return report, "\n".join(lines)


def _bytes(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value / 1024:.1f} KiB" if value >= 1024 else f"{value:.0f} B"


def crossover_table(timings: dict, fits: Mapping[int, tuple[float, float]]) -> list[dict]:
    """Per world size and pair of algorithms: the predicted and the measured crossover.

    `timings`: {world size: {"sizes": [...], algorithm: [µs per size]}}; `fits`: {world
    size: (α µs, β GB/s)} for the sizes whose fit predicts; elsewhere no prediction
    ("predicted" None, "fitted" False).
    """
    rows = []
    for n, t in sorted(timings.items()):
        for i, a in enumerate(TIMED):
            for b in TIMED[i + 1:]:
                rows.append(_crossover_row(n, a, b, t, *fits.get(n, (None, None))))
    return rows


def _crossover_row(n: int, a: str, b: str, t: dict, alpha_us: float | None,
                   beta_gbps: float | None) -> dict:
    """One row of the crossover table: world size n, algorithms a and b."""
    measured = measured_crossover(t["sizes"], t[a], t[b])
    return {"world_size": n, "pair": f"{a} / {b}", "fitted": alpha_us is not None,
            "predicted": (predicted_crossover(a, b, n, alpha_us, beta_gbps)
                          if alpha_us is not None and beta_gbps is not None else None),
            "measured": list(measured) if measured else None,
            "faster": [a if ta < tb else b for ta, tb in zip(t[a], t[b])]}


def crossover_text(rows: Sequence[dict], unfitted: Mapping[int, str]) -> str:
    """The crossover table, printed; `unfitted`: per world size, what the predicted column
    says where its fit does not predict."""
    short = {"ring": "R", "tree": "T", "double_tree": "D", "halving_doubling": "H"}
    lines = [f"{'n':>2}  {'pair':<30}{'predicted (model)':>18}{'measured (first change)':>26}"
             "   faster, size by size",
             f"{'':>2}  {'':<30}{'':>18}{'':>26}   (R ring, T tree, D double tree,",
             f"{'':>2}  {'':<30}{'':>18}{'':>26}    H halving-doubling)"]
    for row in rows:
        pred = (unfitted.get(row["world_size"], "no fit") if not row["fitted"] else
                "never" if row["predicted"] is None else _bytes(row["predicted"]))
        meas = ("none in the sweep" if row["measured"] is None
                else f"{_bytes(row['measured'][0])} – {_bytes(row['measured'][1])}")
        lines.append(f"{row['world_size']:>2}  {row['pair']:<30}{pred:>18}{meas:>26}   "
                     + " ".join(short[a] for a in row["faster"]))
    return "\n".join(lines)
