"""The notebooks' NCCL-only claims, as a checklist that `make gpu-check` runs on GPUs.

Each item is a sentence of the series about NCCL (the notebook, the claim, the source it
comes from) and a check. Checks that one GPU can run use a one-rank NCCL group in this
process; the others need 2+ GPUs and run on a cluster of the notebooks' own kind, or
are marked as needing them. tests/claims/test_claims.py (the ledger) points at these keys.
Used by tools/gpu_check.py; no notebook imports it.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from helpers.paths import REPO_ROOT
from helpers.runtime.torchrun import torchrun_command


@dataclass(frozen=True)
class NcclClaim:
    """One NCCL-only sentence and how to check it."""

    key: str
    notebook: str
    claim: str
    source: str
    min_gpus: int
    check: Callable[[int], str] | None   # returns what it saw; AssertionError when false


@contextmanager
def one_rank_nccl_group() -> Iterator[None]:
    """A NCCL group of one rank on cuda:0 in this process, set up as the engines do."""
    import torch
    import torch.distributed as dist

    os.environ.setdefault("TORCH_NCCL_BLOCKING_WAIT", "1")   # as helpers.runtime.engine sets it
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        yield
    finally:
        dist.destroy_process_group()


def _refused(call: Callable[[], object]) -> str:
    """The first line of the error `call` raises; AssertionError when it does not."""
    try:
        call()
    except (RuntimeError, ValueError, TypeError) as err:
        return f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    raise AssertionError("accepted, not refused")


def check_one_rank_group(_n_gpus: int) -> str:
    import torch
    import torch.distributed as dist

    with one_rank_nccl_group():
        tensor = torch.tensor([1.0, 2.0], device="cuda:0")
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        assert dist.get_backend() == "nccl" and tensor.tolist() == [1.0, 2.0], tensor
    return "all_reduce on 1 rank: [1.0, 2.0] → [1.0, 2.0]"


def check_cpu_tensor_refused(_n_gpus: int) -> str:
    import torch
    import torch.distributed as dist

    with one_rank_nccl_group():
        return _refused(lambda: dist.all_reduce(torch.ones(2)))


def check_bitwise_refused(_n_gpus: int) -> str:
    import torch
    import torch.distributed as dist

    seen = []
    with one_rank_nccl_group():
        for op in ("BAND", "BOR", "BXOR"):
            tensor = torch.tensor([1, 3], device="cuda:0")
            reduce_op = getattr(dist.ReduceOp, op)
            seen.append(f"{op}: {_refused(lambda: dist.all_reduce(tensor, op=reduce_op))}")
    return "; ".join(seen)


def check_premul_sum_accepted(_n_gpus: int) -> str:
    import torch
    import torch.distributed as dist

    with one_rank_nccl_group():
        tensor = torch.tensor([1.0, 2.0], device="cuda:0")
        dist.all_reduce(tensor, op=dist._make_nccl_premul_sum(3.0))
        torch.cuda.synchronize()
        assert tensor.tolist() == [3.0, 6.0], tensor
    return "PREMUL_SUM(3) of [1, 2] on 1 rank: [3.0, 6.0]"


def check_isend_to_self(_n_gpus: int) -> str:
    import torch
    import torch.distributed as dist

    with one_rank_nccl_group():
        mine = torch.tensor([1.0, 2.0], device="cuda:0")
        back = torch.zeros(2, device="cuda:0")
        for request in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 0),
                                               dist.P2POp(dist.irecv, back, 0)]):
            request.wait()
        torch.cuda.synchronize()
        assert back.tolist() == [1.0, 2.0], back
    return "batched isend/irecv to self: received [1.0, 2.0]"


def check_collective_on_its_own_stream(_n_gpus: int) -> str:
    """An async all_reduce finishes while the current stream is still busy (its own stream)."""
    import time

    import torch
    import torch.distributed as dist

    with one_rank_nccl_group():
        tensor = torch.tensor([1.0, 2.0], device="cuda:0")
        dist.all_reduce(tensor)                  # the communicator exists before we time
        torch.cuda.synchronize()
        work = dist.all_reduce(tensor, async_op=True)
        torch.cuda._sleep(4_000_000_000)         # the current stream: busy for ~seconds
        deadline = time.monotonic() + 10
        while not work.is_completed() and time.monotonic() < deadline:
            time.sleep(0.001)
        busy = not torch.cuda.current_stream().query()
        done = work.is_completed()
        torch.cuda.synchronize()
        assert done and busy, f"all_reduce completed: {done}; current stream busy: {busy}"
    return "async all_reduce completed while the current stream was still running a kernel"


def check_bytes_not_on_sockets(_n_gpus: int) -> str:
    """A 64 MiB all_reduce on NCCL writes nothing to this process's TCP connections, and
    count_collectives reports its bytes as the model only (measured None)."""
    import torch
    import torch.distributed as dist

    from helpers.training.comm import count_collectives
    from helpers.bench.wire import counters, difference

    with one_rank_nccl_group():
        tensor = torch.ones(16 * 1024 * 1024, device="cuda:0")
        before = counters()
        with count_collectives() as log:
            dist.all_reduce(tensor)
            torch.cuda.synchronize()
        written = sum(difference(counters(), before).values())
        assert log.measured_bytes is None and log.entries[0].measured is None, log.table()
        assert written == 0, f"{written} B written to TCP connections"
    return ("64 MiB all_reduce: 0 B on this process's TCP connections; count_collectives: "
            f"model {log.model_bytes:.0f} B, measured None (on 2+ GPUs, "
            "`nvidia-smi nvlink -gt d` before and after shows NVLink's bytes)")


def check_more_ranks_than_gpus(n_gpus: int) -> str:
    from helpers.runtime.cluster import start_cluster
    from helpers.runtime.config import ClusterConfigError

    try:
        start_cluster(n_ranks=n_gpus + 1, backend="nccl")
    except ClusterConfigError as err:
        text = str(err)
        names_gpus = f"{n_gpus} GPU(s)" in text or (n_gpus == 0 and "no GPU" in text)
        assert f"{n_gpus + 1} rank(s)" in text and names_gpus, text
        return text
    raise AssertionError("asking for more NCCL ranks than GPUs was not refused")


def _on_cluster(n_gpus: int, code: str, *names: str) -> list[dict]:
    from helpers.runtime.cluster import start_cluster

    with start_cluster(n_ranks=n_gpus, backend="nccl") as cluster:
        cluster.client.direct_view(cluster.engine_ids).execute(code, block=True)
        return cluster.pull(*names)


def check_reduce_leaves_non_dst(n_gpus: int) -> str:
    states = _on_cluster(n_gpus, "t = torch.arange(8.0, device=device) + 10 * rank\n"
                                 "dist.reduce(t, dst=0)\ntorch.cuda.synchronize()", "t")
    for s in states[1:]:
        expected = [10.0 * s["rank"] + i for i in range(8)]
        assert s["t"].tolist() == expected, (s["rank"], s["t"])
    return f"{n_gpus} ranks, 8 elements: every rank but dst 0 holds its input"


def check_uneven_all_to_all_list(n_gpus: int) -> str:
    code = ("ins = [torch.full((j + 1,), 10.0 * rank + j, device=device) "
            "for j in range(world_size)]\n"
            "outs = [torch.zeros(rank + 1, device=device) for _ in range(world_size)]\n"
            "dist.all_to_all(outs, ins)\ntorch.cuda.synchronize()")
    states = _on_cluster(n_gpus, code, "outs")
    for s in states:
        r = s["rank"]
        got = [piece.tolist() for piece in s["outs"]]
        assert got == [[10.0 * i + r] * (r + 1) for i in range(n_gpus)], (r, got)
    return f"{n_gpus} ranks: uneven pieces delivered"


def _tuning_log(n_gpus: int, max_bytes: str) -> str:
    """What an all_reduce sweep (8 B to `max_bytes`) on up to 2 GPUs prints with
    NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=TUNING (torchrun, this package's bench)."""
    env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="TUNING",
               TORCH_NCCL_BLOCKING_WAIT="1")
    with tempfile.TemporaryDirectory(prefix="nccl-claims-logs-") as logs:
        done = subprocess.run(
            torchrun_command(min(n_gpus, 2), "-m", "helpers.bench", "--backend", "nccl",
                             "--collectives", "all_reduce", "--min-bytes", "8", "--max-bytes",
                             max_bytes, "--json", log_dir=logs),
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout + done.stderr


def check_tuning_table(n_gpus: int) -> str:
    """Notebook 25: NCCL_DEBUG=INFO + NCCL_DEBUG_SUBSYS=TUNING print the tuner's table
    (algorithm × protocol) when a communicator is made."""
    log = _tuning_log(n_gpus, "8")
    lines = [line for line in log.splitlines() if "Algorithm" in line or "Protocol" in line]
    assert any("Ring" in line for line in lines) and any("LL128" in line for line in lines), \
        log[-2000:]
    return " / ".join(" ".join(line.split()) for line in lines[:2])


def check_tuning_per_call(n_gpus: int) -> str:
    """Notebook 25: with NCCL_DEBUG=INFO + NCCL_DEBUG_SUBSYS=TUNING rank 0 logs the
    algorithm and protocol of every call (NCCL 2.20+, src/enqueue.cc: "... Bytes -> Algo")."""
    log = _tuning_log(n_gpus, "1M")
    lines = [line for line in log.splitlines() if "Bytes -> Algo" in line]
    sizes = {line.split("Bytes -> Algo")[0].split()[-1] for line in lines}
    assert len(sizes) > 1, log[-2000:]
    return f"{len(lines)} per-call lines, {len(sizes)} sizes; e.g. {' '.join(lines[0].split())}"


def check_algo_changes_time(n_gpus: int) -> str:
    """Notebook 25: forcing NCCL_ALGO (Ring or Tree, Simple protocol) changes an all_reduce's
    time at some size of a sweep up to 64 MiB."""
    from helpers.bench.alpha_beta import nccl_algo_sweep

    runs = nccl_algo_sweep(n_gpus)
    ring, tree = runs["Ring/Simple"], runs["Tree/Simple"]
    assert ring and tree, {k: len(v) for k, v in runs.items()}
    ratios = {r["bytes"]: t["time_us"] / r["time_us"] for r, t in zip(ring, tree)}
    assert any(abs(x - 1) > 0.1 for x in ratios.values()), ratios
    return ", ".join(f"{size} B: tree/ring {x:.2f}" for size, x in list(ratios.items())[::4])


def check_bf16_hook_on_gloo(_n_gpus: int) -> str:
    """Notebook 23: on a CUDA build with NCCL 2.10+, DDP over a gloo group accepts
    bf16_compress_hook (DistributedDataParallel._check_comm_hook reads the build, not the
    backend) and a backward runs it: gloo all_reduces the bucket in bfloat16."""
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    assert torch.version.cuda is not None or torch.version.hip is not None, \
        "a CPU-only torch build: this item is about a CUDA build"
    nccl = torch.cuda.nccl.version()
    assert nccl >= (2, 10), f"NCCL {nccl}: torch refuses the hook below 2.10"
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(4, 3))                     # CPU module, gloo group
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
        x = torch.randn(2, 4)
        model(x).sum().backward()
        grad = model.module.weight.grad
        rounded = grad.to(torch.bfloat16).float()
        expected = x.sum(0).expand(3, 4)
        assert dist.get_backend() == "gloo" and torch.equal(grad, rounded), grad
        assert torch.allclose(grad, expected, rtol=1e-2, atol=1e-6), (grad, expected)
        assert not torch.allclose(grad, expected, rtol=1e-5, atol=0), "not rounded: no hook"
    finally:
        dist.destroy_process_group()
    return (f"torch {torch.__version__} (NCCL {'.'.join(map(str, nccl))}): DDP on gloo "
            "registered bf16_compress_hook; the weight gradient came back bfloat16-rounded")


def _profiling_names(blob: bytes) -> list[str]:
    return [e["profiling_name"] for e in pickle.loads(blob).get("entries", [])]


def check_fr_nccl_records_all_reduce(_n_gpus: int) -> str:
    """Notebook 28: on NCCL the Flight Recorder is on by default (2,000 entries unless
    TORCH_FR_BUFFER_SIZE / TORCH_NCCL_TRACE_BUFFER_SIZE say otherwise), records
    `nccl:all_reduce`, and `_dump_nccl_trace()` returns it while `_dump_fr_trace()` (the
    c10::Event buffer gloo fills) holds no NCCL entry."""
    import torch
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    sizes = {k: os.environ.get(k) for k in ("TORCH_FR_BUFFER_SIZE",
                                           "TORCH_NCCL_TRACE_BUFFER_SIZE")}
    assert all(v in (None, "") or int(v) > 0 for v in sizes.values()), sizes
    assert hasattr(c10d, "_dump_nccl_trace"), "no _dump_nccl_trace: not a CUDA/NCCL build"
    with one_rank_nccl_group():
        tensor = torch.ones(4, device="cuda:0")
        dist.all_reduce(tensor)
        torch.cuda.synchronize()
        nccl_names = _profiling_names(c10d._dump_nccl_trace())
        fr_names = _profiling_names(c10d._dump_fr_trace())
    assert "nccl:all_reduce" in nccl_names, nccl_names[-5:]
    assert not any(n.startswith("nccl:") for n in fr_names), fr_names[-5:]
    return (f"env {sizes}: _dump_nccl_trace() ends {nccl_names[-3:]}; _dump_fr_trace() holds "
            f"{len(fr_names)} entries, none nccl:")


_COLL_SCRIPT = """
import torch, torch.distributed as dist
from tools.nccl_claims import one_rank_nccl_group
with one_rank_nccl_group():
    t = torch.ones(4, device="cuda:0")
    for _ in range(3):
        dist.all_reduce(t)
    torch.cuda.synchronize()
"""


def check_coll_line_per_call(_n_gpus: int) -> str:
    """Notebook 28: NCCL_DEBUG=INFO + NCCL_DEBUG_SUBSYS=COLL print one line per collective
    call (NVIDIA/nccl src/enqueue.cc ncclEnqueueCheck: INFO(NCCL_COLL, "%s: opCount %lx
    sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d] stream
    %p"); printed before the one-rank shortcut, so one GPU shows it. A fresh process: NCCL
    reads NCCL_DEBUG once."""
    env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="COLL")
    done = subprocess.run([sys.executable, "-c", _COLL_SCRIPT], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [ln for ln in (done.stdout + done.stderr).splitlines()
             if "AllReduce: opCount" in ln]
    assert len(lines) == 3, (len(lines), (done.stdout + done.stderr)[-2000:])
    for word in ("count 4", "datatype", "stream"):
        assert word in lines[0], lines[0]
    return f"3 all_reduce calls, {len(lines)} COLL lines; e.g. {' '.join(lines[0].split()[-16:])}"


CHECKLIST: tuple[NcclClaim, ...] = (
    NcclClaim("one-rank-group", "00", "a NCCL group of one rank works (one GPU, one rank)",
              "torch.distributed init_process_group; NCCL ncclCommInitRank", 1,
              check_one_rank_group),
    NcclClaim("cpu-tensor-refused", "03", "NCCL refuses a CPU tensor",
              "PyTorch distributed docs, backends table (NCCL: CUDA tensors only)", 1,
              check_cpu_tensor_refused),
    NcclClaim("bitwise-refused", "05", "NCCL has no bitwise ops (BAND, BOR, BXOR refused)",
              "NCCL docs, ncclRedOp_t (sum, prod, max, min, avg only)", 1,
              check_bitwise_refused),
    NcclClaim("premul-sum-accepted", "05",
              "PREMUL_SUM (a scaled sum) is NCCL-only and accepted",
              "NCCL docs, ncclRedOpCreatePreMulSum; torch dist._make_nccl_premul_sum", 1,
              check_premul_sum_accepted),
    NcclClaim("isend-to-self", "09", "NCCL accepts an isend to self batched with its irecv",
              "torch isend docstring (allows src == dst); NCCL docs, ncclSend/ncclRecv", 1,
              check_isend_to_self),
    NcclClaim("collective-own-stream", "15", "NCCL runs a collective on a CUDA stream of "
              "its own, beside the computation", "torch ProcessGroupNCCL.cpp (ncclStreams_, "
              "syncStream); Li et al., VLDB 2020, sec. 3.2.3", 1,
              check_collective_on_its_own_stream),
    NcclClaim("nccl-bytes-not-on-sockets", "11", "NCCL's bytes pass through no socket of "
              "the process: the byte figures on NCCL are the model (measured: None)",
              "helpers/bench/wire.py (TCP_INFO of the process's connections); NVIDIA nvidia-smi "
              "docs, `nvidia-smi nvlink -gt d` (NVLink data counters)", 1,
              check_bytes_not_on_sockets),
    NcclClaim("more-ranks-than-gpus", "README", "NCCL with more ranks than GPUs is refused, "
              "naming both numbers", "helpers/runtime/config.py (this series)", 0,
              check_more_ranks_than_gpus),
    NcclClaim("reduce-non-dst-untouched", "04", "after reduce, NCCL leaves non-dst buffers as "
              "they were", "NCCL docs, ncclReduce (recvbuff only used on root)", 2,
              check_reduce_leaves_non_dst),
    NcclClaim("uneven-all-to-all-list", "08", "NCCL's list all_to_all accepts pieces of "
              "different sizes", "torch ProcessGroupNCCL alltoall (one send/recv per piece)",
              2, check_uneven_all_to_all_list),
    NcclClaim("send-blocks-large", "09", "ncclSend may let small messages through and "
              "blocks on large ones", "NCCL docs, ncclSend ('blocking for the GPU')", 2, None),
    NcclClaim("nccl-tuning-table", "25", "NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=TUNING "
              "prints the tuner's latency/bandwidth table per algorithm and protocol",
              "NVIDIA/nccl src/graph/tuning.cc ncclTopoTuneModel (INFO(NCCL_TUNING, ...)); "
              "NVIDIA/nccl#1847", 2, check_tuning_table),
    NcclClaim("nccl-tuning-per-call", "25", "NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=TUNING "
              "logs, on rank 0, the algorithm and protocol NCCL picked for every call "
              "('<bytes> Bytes -> Algo ... proto ...')",
              "NVIDIA/nccl src/enqueue.cc (v2.20.3-1 and later): if (comm->rank == 0) "
              "INFO(NCCL_TUNING, \"... Bytes -> Algo ...\")", 2, check_tuning_per_call),
    NcclClaim("nccl-algo-changes-time", "25", "NCCL_ALGO=Ring vs NCCL_ALGO=Tree (NCCL_PROTO="
              "Simple) changes an all_reduce's time at some size (2+ GPUs)",
              "NCCL docs, Environment Variables (NCCL_ALGO, NCCL_PROTO); "
              "helpers.bench.alpha_beta.nccl_algo_sweep", 2, check_algo_changes_time),
    NcclClaim("bf16-hook-gloo-cuda-build", "23", "on a CUDA build with NCCL 2.10+, DDP over "
              "gloo accepts bf16_compress_hook (refused on a CPU-only build)",
              "torch/nn/parallel/distributed.py (torch 2.13), "
              "DistributedDataParallel._check_comm_hook, lines 2485-2504: the build's "
              "CUDA/HIP + NCCL >= 2.10 or XPU + XCCL, not the backend", 1,
              check_bf16_hook_on_gloo),

    NcclClaim("fr-nccl-records-all-reduce", "28", "on NCCL the Flight Recorder records "
              "`nccl:all_reduce` by default and `_dump_nccl_trace()` returns it; "
              "`_dump_fr_trace()` reads the other (gloo's) buffer",
              "torch 2.13 FlightRecorder.hpp:110-111 getCvarInt({\"TORCH_FR_BUFFER_SIZE\", "
              "\"TORCH_NCCL_TRACE_BUFFER_SIZE\"}, 2000); FlightRecorder.hpp:321 dump_fr_trace vs "
              "ProcessGroupNCCL.hpp:1508 dump_nccl_trace; pytorch FlightRecorder.cpp dump_fr_trace "
              "-> FlightRecorder<c10::Event>; ProcessGroupNCCL.cpp FlightRecorderCUDA = "
              "FlightRecorder<at::cuda::CUDAEvent>, dump_nccl_trace -> FlightRecorderCUDA", 1,
              check_fr_nccl_records_all_reduce),
    NcclClaim("fr-nccl-dump-on-timeout-file", "28", "on a NCCL timeout torch writes every "
              "rank's buffer to <prefix><global rank> (TORCH_NCCL_DUMP_ON_TIMEOUT=1; "
              "prefix TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE, default "
              "~/.cache/torch/comm_lib_trace_rank_)",
              "pytorch ProcessGroupNCCL.cpp HeartbeatMonitor: dumpOnTimeoutOrEx_ = "
              "getCvarBool(TORCH_NCCL_DUMP_ON_TIMEOUT, true), dumpDebuggingInfo -> "
              "DebugInfoWriter::getWriter(globalRank()); FlightRecorder.cpp getWriter "
              "(TORCH_FR_DUMP_TEMP_FILE, TORCH_NCCL_DEBUG_INFO_TEMP_FILE, comm_lib_trace_rank_)",
              2, None),
    NcclClaim("nccl-coll-line-per-call", "28", "NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=COLL "
              "prints a line per collective call (count, datatype, buffers, stream)",
              "NVIDIA/nccl src/enqueue.cc ncclEnqueueCheck INFO(NCCL_COLL, \"%s: opCount ...\") "
              "(v2.18.3-1 to v2.30.7-1); NCCL docs troubleshooting/logging.rst, COLL", 1,
              check_coll_line_per_call),
    # TUNING per call and NCCL_ALGO/NCCL_PROTO: the existing items nccl-tuning-per-call and
    # nccl-algo-changes-time (2 GPUs: a one-rank communicator skips the tuner,
    # src/enqueue.cc taskAppend `if (comm->nRanks == 1) ncclLaunchOneRank(...)`).
)


def run_checklist(n_gpus: int) -> list[tuple[NcclClaim, str, str]]:
    """Run every item this machine can; print and return (item, mark, what was seen).

    mark: ✓ held, ✗ did not (or failed), "2+ GPUs" / "source only": not run here.
    """
    results = []
    for item in CHECKLIST:
        if item.check is None:
            mark, seen = "source only", f"not run (a hang would abort NCCL): {item.source}"
        elif n_gpus < item.min_gpus:
            mark, seen = f"{item.min_gpus}+ GPUs", f"needs {item.min_gpus}+ GPUs, not run"
        else:
            try:
                mark, seen = "✓", item.check(n_gpus)
            except Exception as err:   # a failed check is reported, the others still run
                mark, seen = "✗", f"{type(err).__name__}: {err}"
        print(f"{mark:>12}  [{item.notebook}] {item.claim}\n{'':>14}{seen}")
        results.append((item, mark, seen))
    return results


def compare_timings(n_gpus: int, sizes: tuple[str, ...] = ("8", "64M")) -> list[dict]:
    """helpers.bench on NCCL with both timings (TORCH_NCCL_BLOCKING_WAIT=1, as the engines)."""
    rows = []
    env = dict(os.environ, TORCH_NCCL_BLOCKING_WAIT="1")
    for timing in ("nccl-tests", "per-call"):
        for size in sizes:
            with tempfile.TemporaryDirectory(prefix="nccl-claims-logs-") as logs:
                done = subprocess.run(
                    torchrun_command(n_gpus, "-m", "helpers.bench", "--json", "--collectives",
                                     "all_reduce", "--min-bytes", size, "--max-bytes", size,
                                     "--timing", timing, log_dir=logs),
                    cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
            assert done.returncode == 0, done.stderr[-2000:]
            rows += json.loads(done.stdout)
    print(f"{'timing':<12} {'size (B)':>10} {'time (µs)':>10} {'busbw (GB/s)':>13}")
    for row in rows:
        print(f"{row['timing']:<12} {row['bytes']:>10} {row['time_us']:>10.1f} "
              f"{row['busbw']:>13.2f}")
    return rows
