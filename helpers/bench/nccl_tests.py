"""nccl-tests' bandwidth definitions, in plain Python (no torch needed).

For one collective call on n ranks that moves S bytes in t seconds
(NVIDIA/nccl-tests doc/PERFORMANCE.md):

    algbw = S / t                   in GB/s, GB = 1e9 bytes
    busbw = algbw * bus_factor(n)   2(n-1)/n for all_reduce, (n-1)/n for the
                                    split collectives, 1 for broadcast and reduce

S is nccl-tests' size column: the tensor for all_reduce, broadcast and reduce; the
whole output (n pieces) for all_gather and gather; the whole input (n pieces) for
reduce_scatter, scatter and all_to_all. busbw is the number to compare with the
hardware's link bandwidth: it does not depend on n for an optimal algorithm.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from helpers.collectives.registry import positive_int, bus_factor, check_benchmarked

# Collectives whose S is n pieces of one rank's count; each piece is trimmed to a
# multiple of ALIGN_BYTES, as nccl-tests (2.13.12 and later) trims it.
SPLIT = ("scatter", "gather", "all_gather", "reduce_scatter", "all_to_all")

DTYPE_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8,
               "int8": 1, "uint8": 1, "int32": 4, "int64": 8}
# nccl-tests' names for the type column.
NCCL_TYPE_NAMES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16",
                   "float64": "double", "int8": "int8", "uint8": "uint8",
                   "int32": "int32", "int64": "int64"}
ALIGN_BYTES = 16
MiB = 1 << 20
GB = 1e9


def algbw(collective: str, size_bytes: int, time_s: float) -> float:
    """Algorithm bandwidth S / t in GB/s; `size_bytes` is S as nccl-tests counts it."""
    check_benchmarked(collective)
    if size_bytes == 0:
        return 0.0   # nothing moved (a point of count 0): 0, as nccl-tests prints it
    if not time_s > 0:
        raise ValueError(f"time_s must be > 0, got {time_s!r}")
    return size_bytes / time_s / GB


def busbw(collective: str, size_bytes: int, time_s: float, world_size: int) -> float:
    """Bus bandwidth in GB/s: algbw times bus_factor(collective, world_size)."""
    return algbw(collective, size_bytes, time_s) * bus_factor(collective, world_size)


def sweep_sizes(min_bytes: int = 8, max_bytes: int = 64 * MiB, factor: int = 2) -> list[int]:
    """Sizes min_bytes, min_bytes*factor, ... up to max_bytes (as nccl-tests -b -e -f)."""
    positive_int("min_bytes", min_bytes)
    positive_int("max_bytes", max_bytes)
    if min_bytes > max_bytes:
        raise ValueError(f"min_bytes ({min_bytes}) must be <= max_bytes ({max_bytes})")
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 2:
        raise ValueError(f"factor must be an integer > 1, got {factor!r}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


@dataclass(frozen=True)
class Plan:
    """Buffer sizes for one point: S in bytes, its element count, and one rank's piece.

    `piece` is the count passed to the call and nccl-tests' count column: the whole
    tensor for all_reduce/broadcast/reduce, one rank's share for the split collectives.
    """

    collective: str
    world_size: int
    dtype_size: int
    bytes: int   # S, after rounding
    total: int   # S / dtype_size
    piece: int   # elements per rank (== total unless the collective splits)

    @property
    def split(self) -> bool:
        return self.collective in SPLIT


def plan(collective: str, size_bytes: int, world_size: int, dtype_size: int) -> Plan:
    """Element counts for a requested size, computed as nccl-tests computes them.

    count = size_bytes // dtype_size. all_reduce, broadcast and reduce move count
    elements. The split collectives give each rank count // world_size elements, trimmed
    down to a multiple of 16 bytes, as nccl-tests does since 2.13.12 (its
    *GetCollByteCount functions, e.g. src/all_gather.cu). A piece of 0 elements is a
    point like any other: nccl-tests prints and runs every size of its sweep.
    """
    check_benchmarked(collective)
    positive_int("world_size", world_size)
    positive_int("dtype_size", dtype_size)
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes < 0:
        raise ValueError(f"size_bytes must be a non-negative integer, got {size_bytes!r}")
    count = size_bytes // dtype_size
    if collective in SPLIT:
        align = max(1, ALIGN_BYTES // dtype_size)   # elements in 16 bytes
        piece = count // world_size // align * align
        total = piece * world_size
    else:
        piece = total = count
    return Plan(collective, world_size, dtype_size, total * dtype_size, total, piece)


# ------------------------------------------------------------------ the ring model, per rank

ROOT_RANK = 0


def model_sent(collective: str, size_bytes: float, n: int, rank: int,
               root: int = ROOT_RANK) -> float:
    """Bytes `rank` sends in one call of S = size_bytes on n ranks, in the ring model.

    The model is NCCL's ring algorithms for all_reduce, all_gather, reduce_scatter,
    broadcast and reduce (NVIDIA/nccl src/device/*.h, `runRing`; for the first three its
    tuner may pick others: Tree, PAT, NVLS, CollNet, src/graph/tuning.cc), point to point for
    all_to_all, gather and scatter (torch's ProcessGroupNCCL issues ncclSend/ncclRecv).

    all_reduce 2(n−1)/n·S; all_gather, reduce_scatter, all_to_all (n−1)/n·S; broadcast
    S on every rank but the ring's last (root − 1); reduce S on every rank but the root;
    gather S/n on every rank but the root; scatter (n−1)/n·S on the root only.
    """
    if collective == "send":
        return float(size_bytes)
    if collective == "recv" or n < 2:
        return 0.0
    check_benchmarked(collective)
    if collective == "all_reduce":
        return 2 * (n - 1) / n * size_bytes
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n * size_bytes
    if collective == "broadcast":
        return 0.0 if rank == (root - 1) % n else float(size_bytes)
    if collective == "reduce":
        return 0.0 if rank == root else float(size_bytes)
    if collective == "gather":
        return 0.0 if rank == root else size_bytes / n
    return (n - 1) / n * size_bytes if rank == root else 0.0      # scatter


# ------------------------------------------------------------------ the table

def _time_str(time_us: float) -> str:
    """nccl-tests' time column: fewer decimals as the number grows."""
    if time_us >= 10000:
        return f"{time_us:7.0f}"
    if time_us >= 100:
        return f"{time_us:7.1f}"
    return f"{time_us:7.2f}"


# A line of `table_row`, read back: the sweep's columns (size, count, type, redop, root),
# then what the run timed (time, algbw, busbw).
ROW = re.compile(r"^(?P<sweep>[ \t]*\d+[ \t]+\d+[ \t]+\S+[ \t]+\S+[ \t]+-?\d+)"
                 r"(?P<timed>(?:[ \t]+[\d.]+){3})[ \t]*$", re.M)


def table_row(row: Mapping[str, Any]) -> str:
    """One result (a dict from helpers.bench.measurement.measure) as an nccl-tests line."""
    dtype = NCCL_TYPE_NAMES.get(row["dtype"], row["dtype"])
    op = row.get("op") or "none"
    root = -1 if row.get("root") is None else row["root"]
    return (f"{row['bytes']:12d}  {row['count']:12d}  {dtype:>8s}  {op:>6s}  {root:6d}"
            f"  {_time_str(row['time_us'])}  {row['algbw']:6.2f}  {row['busbw']:6.2f}")


def nccl_tests_table(rows: Sequence[Mapping[str, Any]], title: str | None = None) -> str:
    """Results as nccl-tests prints them (out-of-place columns), with the average busbw."""
    lines = [f"# {title}"] if title else []
    lines += [
        f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}           out-of-place",
        f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}"
        f"  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s}",
        f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}"
        f"  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}",
    ]
    lines += [table_row(row) for row in rows]
    if rows:
        average = sum(row["busbw"] for row in rows) / len(rows)
        lines.append(f"# Avg bus bandwidth    : {average:g} ")
    else:
        lines.append("# (no sizes: every rank's piece would have been empty)")
    return "\n".join(lines)
