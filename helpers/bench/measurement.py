"""Time the eight collectives like nccl-tests, on an initialised torch.distributed group.

In a notebook, every engine calls ``measure(...)`` (or ``sweep(...)``) through
``apply``; from a shell, the same code runs under torchrun::

    torchrun --standalone --nproc_per_node 4 -m helpers.bench --max-bytes 1M
    torchrun --standalone --nproc_per_node 2 -m helpers.bench --json --collectives all_reduce

Per point: buffers allocated once, `warmup` untimed calls, a barrier, then `iters`
timed calls; each rank's mean time per call is averaged over the ranks (as
nccl-tests does), and algbw/busbw come from that time (see helpers.bench.nccl_tests).
With `batches` > 1 the timed calls are split into that many batches, each after its
own barrier: the mean over all calls is still `time_us`, and `time_min_us` is the
fastest batch (time per call, averaged over the ranks), the statistic the α-β fit
uses: another process only ever slows a batch down, never speeds it up.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import time
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist

from helpers.bench import nccl_tests as bandwidth
from helpers.bench.nccl_tests import DTYPE_SIZES
from helpers.collectives.registry import (BENCHMARKED, REDUCING, ROOT, call_keywords,
                                          check_benchmarked, tensor_arguments)

OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}
ROOT_RANK = 0

Point = tuple[str, int]


def check_options(dtype: str, op: str) -> None:
    """ValueError unless `dtype` and `op` are names measure() accepts together."""
    if dtype not in DTYPE_SIZES:
        raise ValueError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPE_SIZES)}")
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; valid: {', '.join(OPS)}")
    if op == "avg" and not dtype.startswith(("float", "bfloat")):
        raise ValueError(f"op 'avg' needs a floating dtype, not {dtype!r}")


def _device() -> torch.device:
    if "nccl" in str(dist.get_backend()):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# nccl-tests' all_gather, reduce_scatter and all_to_all move flat buffers: torch's
# *_single variants (the pre-2.13 names, now deprecated, as fallback).
TORCH_CALL = {"all_gather": "all_gather_single", "reduce_scatter": "reduce_scatter_single",
              "all_to_all": "all_to_all_single"}
_FUNCTIONS = {"all_gather_single": getattr(dist, "all_gather_single", None)
              or dist.all_gather_into_tensor,
              "reduce_scatter_single": getattr(dist, "reduce_scatter_single", None)
              or dist.reduce_scatter_tensor}


def _call(collective: str, plan: bandwidth.Plan, dtype: torch.dtype, op: Any,
          device: torch.device) -> Callable[..., Any]:
    """One collective call on buffers allocated now: `call(async_op=False)`.

    The arguments each rank passes come from the registry (helpers.collectives.registry); gather
    and scatter of 0 elements are not called at all (nccl-tests returns early for them
    at count 0); every other collective is called, on empty buffers if need be.
    """
    if collective in ("scatter", "gather") and plan.piece == 0:
        return lambda async_op=False: None

    def zeros(pieces: int) -> torch.Tensor:  # zeros: sums stay finite and never denormal
        return torch.zeros(pieces * plan.piece, dtype=dtype, device=device)

    name = TORCH_CALL.get(collective, collective)
    function = _FUNCTIONS.get(name) or getattr(dist, name)
    roots = {ROOT[name]: ROOT_RANK} if name in ROOT else {}
    arguments = {**tensor_arguments(name, dist.get_rank(), plan.world_size,
                                    piece=lambda j: zeros(1), zeros=zeros, concat=torch.cat,
                                    params=roots),
                 **call_keywords(name, root=ROOT_RANK, op=op)}
    return lambda async_op=False: function(**arguments, async_op=async_op)


# How a point is timed on GPUs. "nccl-tests": every call launched without waiting,
# then one wait and one synchronize after the loop, timed on the host (nccl-tests'
# method). "per-call": every call waits for its result, as the notebooks' own cells do;
# with TORCH_NCCL_BLOCKING_WAIT=1 (set by helpers.runtime.engine so that a hung collective
# raises) that wait polls, which inflates the time of small messages. On the CPU
# (gloo) both are the same synchronous loop.
TIMINGS = ("nccl-tests", "per-call")


def _time_per_call(call: Callable[..., Any], iters: int, device: torch.device,
                   timing: str = "nccl-tests") -> float:
    """Mean seconds per call on this rank, after a barrier."""
    if device.type == "cuda" and timing == "nccl-tests":
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        start_s = time.perf_counter()
        works = [call(async_op=True) for _ in range(iters)]
        for work in works:
            if work is not None:
                work.wait()
        torch.cuda.synchronize()
        return (time.perf_counter() - start_s) / iters
    if device.type == "cuda":
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            call()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    dist.barrier()
    start_s = time.perf_counter()
    for _ in range(iters):
        call()
    return (time.perf_counter() - start_s) / iters


def measure(collective: str, size_bytes: int, dtype: str = "float32", op: str = "sum",
            iters: int = 20, warmup: int = 5, timing: str = "nccl-tests",
            batches: int = 1) -> dict:
    """Time one collective at one size on every rank; the same result dict on every rank.

    Call it on all ranks of the default process group. Every size is a point, as in
    nccl-tests: one too small for the world size has count 0 (and algbw 0).
    `timing`: one of TIMINGS (it matters on GPUs only). `batches` (1 to `iters`): the
    timed calls in that many batches, each after a barrier.
    The dict: collective, world_size, backend, dtype, op (None unless it reduces),
    root (None unless rooted), bytes (S), count (elements per rank in the call,
    nccl-tests' count column), time_us (mean over ranks and calls), time_min_us (the
    fastest batch's time per call, mean over ranks), batches, timing (how it was timed),
    algbw, busbw (GB/s, from time_us).
    """
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
    if not dist.is_initialized():
        raise RuntimeError("measure() needs an initialised default process group "
                           "(dist.init_process_group) on every rank")
    check_benchmarked(collective)
    check_options(dtype, op)
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be an integer >= 1, got {iters!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, got {warmup!r}")
    if isinstance(batches, bool) or not isinstance(batches, int) or not 1 <= batches <= iters:
        raise ValueError(f"batches must be an integer from 1 to iters ({iters}), "
                         f"got {batches!r}")
    n = dist.get_world_size()
    plan = bandwidth.plan(collective, size_bytes, n, DTYPE_SIZES[dtype])
    device = _device()
    call = _call(collective, plan, getattr(torch, dtype), OPS[op], device)
    for _ in range(warmup):
        call()
    calls = [iters // batches + (b < iters % batches) for b in range(batches)]
    seconds = torch.tensor([_time_per_call(call, k, device, timing) for k in calls],
                           dtype=torch.float64, device=device)
    dist.all_reduce(seconds, op=dist.ReduceOp.SUM)
    per_batch_s = (seconds / n).tolist()          # per call, mean over the ranks
    mean_s = sum(s * k for s, k in zip(per_batch_s, calls)) / iters
    return {"collective": collective, "world_size": n, "backend": str(dist.get_backend()),
            "dtype": dtype, "op": op if collective in REDUCING else None,
            "root": ROOT_RANK if collective in ROOT else None,
            "bytes": plan.bytes, "count": plan.piece, "time_us": mean_s * 1e6,
            "time_min_us": min(per_batch_s) * 1e6, "batches": batches,
            "timing": timing if device.type == "cuda" else "per-call",
            "algbw": bandwidth.algbw(collective, plan.bytes, mean_s),
            "busbw": bandwidth.busbw(collective, plan.bytes, mean_s, n)}


def sweep(collectives: Sequence[str], sizes: Sequence[int], dtype: str = "float32",
          op: str = "sum", iters: int = 20, warmup: int = 5,
          progress: Callable[[list[Point]], Iterable[Point]] | None = None,
          timing: str = "nccl-tests", batches: int = 1) -> list[dict]:
    """measure() every (collective, size), collective by collective: every size is a row.

    `progress`, if given, receives the list of points and returns an iterable over
    them (e.g. ``tqdm``, or ``lambda points: tqdm(points, desc="bench")``).
    """
    for collective in collectives:
        check_benchmarked(collective)
    check_options(dtype, op)
    points = [(collective, size) for collective in collectives for size in sizes]
    results = []
    for collective, size in (progress(points) if progress else points):
        result = measure(collective, size, dtype, op, iters, warmup, timing, batches)
        if result is not None:
            results.append(result)
    return results


# ------------------------------------------------------------------ the command

JSON_KEYS = ("collective", "world_size", "backend", "dtype", "op", "root", "bytes", "count",
             "time_us", "time_min_us", "batches", "algbw", "busbw")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """'8' → 8, '1K' → 1024, '64M' → 67108864 (K/M/G are powers of 1024, as in nccl-tests)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", str(text), flags=re.IGNORECASE)
    if not match or int(match[1]) == 0:
        raise argparse.ArgumentTypeError(
            f"bad size {text!r}: want a positive number of bytes, optionally with K, M or G")
    return int(match[1]) * _UNITS[match[2].upper()]


def _collective_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = [name for name in names if name not in BENCHMARKED]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown collective(s) {', '.join(bad) or repr(text)}; "
                                         f"valid: {', '.join(BENCHMARKED)}")
    return names


def _env_rank() -> int:
    return int(os.environ.get("RANK", "0"))


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors only rank 0 prints (every rank exits 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        if _env_rank() == 0:
            self.print_usage(sys.stderr)
            self.exit(2, f"{self.prog}: error: {message}\n")
        time.sleep(1)  # let rank 0 print first: torchrun kills the others at the first exit
        self.exit(2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="torchrun --standalone --nproc_per_node N -m helpers.bench",
                description="nccl-tests style bandwidth sweep over torch.distributed "
                            "collectives (rank 0 prints the results).")
    p.add_argument("--collectives", type=_collective_list, default=list(BENCHMARKED),
                   help=f"comma-separated list (default: all: {','.join(BENCHMARKED)})")
    p.add_argument("--min-bytes", type=parse_size, default=8, help="default 8")
    p.add_argument("--max-bytes", type=parse_size, default=64 * bandwidth.MiB,
                   help="default 64M")
    p.add_argument("--factor", type=int, default=2, help="size multiplier per step (default 2)")
    p.add_argument("--dtype", default="float32", choices=list(DTYPE_SIZES))
    p.add_argument("--op", default="sum", choices=list(OPS))
    p.add_argument("--iters", type=int, default=20, help="timed calls per size (default 20)")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed calls first (default 5; nccl-tests' own -w defaults to 1)")
    p.add_argument("--batches", type=int, default=1,
                   help="split the timed calls into this many batches, each after a barrier; "
                        "time_min_us: the fastest (default 1; the α-β fit uses it)")
    p.add_argument("--timing", default="nccl-tests", choices=list(TIMINGS),
                   help="GPUs: one wait after the loop (nccl-tests, default) or per call")
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"],
                   help="auto: nccl when there is a GPU for every local rank, else gloo")
    p.add_argument("--json", action="store_true",
                   help="print a JSON list, one object per measurement, instead of tables")
    p.add_argument("--fit", action="store_true",
                   help="then fit the α-β model per collective (helpers.bench.alpha_beta) "
                        "and print α (µs), β (GB/s) and the fit error")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds for init_process_group and every collective (default 300)")
    return p


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> list[int]:
    """The sweep's sizes; p.error (exit 2) on any bad option."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        p.error("RANK/WORLD_SIZE are not set: run me under torchrun, e.g. "
                "torchrun --standalone --nproc_per_node 2 -m helpers.bench")
    try:
        sizes = bandwidth.sweep_sizes(args.min_bytes, args.max_bytes, args.factor)
        check_options(args.dtype, args.op)
    except ValueError as error:
        p.error(str(error))
    if args.iters < 1 or args.warmup < 0:
        p.error(f"need --iters >= 1 and --warmup >= 0, got {args.iters} and {args.warmup}")
    if not 1 <= args.batches <= args.iters:
        p.error(f"--batches must be from 1 to --iters ({args.iters}), got {args.batches}")
    if not args.timeout > 0:
        p.error(f"--timeout must be > 0, got {args.timeout}")
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if args.backend == "auto":
        args.backend = "nccl" if dist.is_nccl_available() and gpus >= local_ranks else "gloo"
    elif args.backend == "nccl" and gpus < local_ranks:
        p.error(f"--backend nccl needs a GPU per local rank: {local_ranks} ranks, {gpus} GPUs")
    return sizes


def _init(backend: str, timeout_s: float) -> None:
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", timeout=timeout,
                                device_id=torch.device("cuda", local_rank))
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", timeout=timeout)


def _progress_bar(total: int) -> Any:
    """A tqdm bar on stderr, shown only on a terminal (disable=None)."""
    from tqdm import tqdm
    return tqdm(total=total, file=sys.stderr, disable=None, unit="point", desc="bench",
                leave=False)


def _print_fit(rows: list[dict], n: int, file: Any) -> None:
    """The α-β fit of every collective (ring terms), or why one cannot be fitted."""
    from helpers.bench import alpha_beta

    print(f"\n# α-β fit, ring terms, world size {n}: t = α·steps + bytes·S/β "
          f"(fit err: RMS relative residual)", file=file)
    if n < 2:
        print("# no fit: one rank moves no data", file=file)
        return
    print(alpha_beta.fit_table(alpha_beta.fit_all(rows)), file=file, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """The torchrun entry point; rank 0 prints the tables (or JSON), the others nothing."""
    p = parser()
    args = p.parse_args(argv)
    sizes = _check_args(p, args)
    _init(args.backend, args.timeout)
    try:
        rank, n = dist.get_rank(), dist.get_world_size()
        if rank == 0 and not args.json:
            print(f"# helpers.bench: minBytes {sizes[0]} maxBytes {sizes[-1]} "
                  f"step: {args.factor}(factor) warmup iters: {args.warmup} "
                  f"iters: {args.iters} dtype: {args.dtype} op: {args.op}", flush=True)
        bar = _progress_bar(len(args.collectives) * len(sizes)) if rank == 0 else None

        def progress(points: list[Point]) -> Iterable[Point]:
            for point in points:
                if bar is not None:
                    bar.set_postfix_str(f"{point[0]} {point[1]} B", refresh=False)
                yield point
                if bar is not None:
                    bar.update()

        everything = []
        for collective in args.collectives:
            rows = sweep([collective], sizes, args.dtype, args.op, args.iters, args.warmup,
                         progress=progress, timing=args.timing, batches=args.batches)
            everything += rows
            if rank == 0 and not args.json:
                title = f"{collective}: world size {n}, backend {dist.get_backend()}"
                text = "\n" + bandwidth.nccl_tests_table(rows, title=title)
                bar.write(text, file=sys.stdout)  # above the progress bar, if shown
                sys.stdout.flush()
        if bar is not None:
            bar.close()
        if rank == 0 and args.json:
            print(json.dumps([{k: row[k] for k in JSON_KEYS} for row in everything], indent=1))
        if rank == 0 and args.fit:
            _print_fit(everything, n, file=sys.stderr if args.json else sys.stdout)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
