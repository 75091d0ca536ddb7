"""The ledger: what notebooks 00-24 say about torch, gloo, NCCL, nccl-tests and ipyparallel.

CLAIMS lists every such sentence: its notebook and cell, a quote that must still be in
that cell (so ledger and notebooks cannot drift apart), and its evidence:

- ``gloo``: a case of tests/claims/claim_cases.py (notebook 14: claim_cases_groups.py, 15-16:
  claim_cases_data_parallel.py, 17-19: claim_cases_training.py),
  run for real on disposable gloo processes (helpers.runtime.disposable) at the world sizes
  given, with an expectation that fails when the behaviour changes; the test id names
  the claim
  (``test_gloo_claim[05-avg-int-leaves-the-sum-n2]``);
- ``test``: an existing test that runs the notebook's own cells on gloo;
- ``gpu-check``: an NCCL-only claim, with its source, checked by ``make gpu-check``
  (tools/nccl_claims.py; some items need 2+ GPUs and say so);
- ``source``: a behaviour of NCCL or nccl-tests (or of torch on CUDA, or an internal of
  torch, gloo or the C library) that only its documentation or source shows here (named in
  the entry).
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import nbformat
import pytest

from claim_cases import CASES, _returned
import claim_cases_data_parallel  # noqa: F401  (registers the cases of notebooks 15-16)
import claim_cases_groups  # noqa: F401  (registers the cases of notebook 14)
import claim_cases_training  # noqa: F401  (registers the cases of notebooks 17-19)
import claim_cases_wire  # noqa: F401  (registers the bytes-on-the-wire cases of 10 and 11)
import claim_cases_block  # noqa: F401  (registers the cases of notebook 20)
import claim_cases_context  # noqa: F401  (registers the cases of notebook 21)
import claim_cases_experts  # noqa: F401  (registers the cases of notebook 22)
import claim_cases_accumulation  # noqa: F401  (registers the cases of notebook 23)
import claim_cases_schedules  # noqa: F401  (registers the cases of notebook 24)
import claim_cases_algorithms  # noqa: F401  (registers the cases of notebook 25)
import claim_cases_checkpoints  # noqa: F401  (registers the cases of notebook 26)
import claim_cases_planner  # noqa: F401  (registers the cases of notebook 27)
import claim_cases_debugging  # noqa: F401  (registers the cases of notebook 28)
from helpers.runtime.disposable import (DisposableRun, RankOutcome, case_source,
                                        run_disposable, start_disposable)
from tools.nccl_claims import CHECKLIST

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"


@dataclass(frozen=True)
class Claim:
    key: str        # names the claim in test ids
    notebook: str   # notebook stem
    cell: str       # cell id
    quote: str      # a piece of the sentence, as it stands in the cell
    kind: str       # "gloo", "test", "gpu-check" or "source"
    evidence: str   # gloo: the case's key; test: path::name; gpu-check: item key; source


NB28 = "tests/notebooks/test_28_flight_recorder.py::test_flight_recorder_notebook"


def seen28(key: str, cell: str, quote: str) -> Claim:
    """A sentence of notebook 28 that its own test checks, at 2 and 4 ranks."""
    return Claim(key, "28_flight_recorder", cell, quote, "test", NB28)


def gloo(key: str, nb: str, cell: str, quote: str, case: str | None = None) -> Claim:
    return Claim(key, nb, cell, quote, "gloo", case or key)


CLAIMS: tuple[Claim, ...] = (
    # 00 ranks and the world
    gloo("00-timeout-raises", "00_ranks_and_world", "c05",
         "The timeout makes a collective that not every rank calls raise an error",
         "only-some-ranks-call"),
    gloo("00-some-ranks-cannot-complete", "00_ranks_and_world", "c11",
         "a collective that only some ranks call cannot complete", "only-some-ranks-call"),
    Claim("00-px-waits-for-every-engine", "00_ranks_and_world", "c06",
          "sends the cell to every engine and waits until all of them have finished",
          "test", "tests/notebooks/test_00_ranks_and_world.py::test_notebook00_default_reports_each_of_4_ranks_once"),
    Claim("00-nccl-one-gpu-per-rank", "00_ranks_and_world", "c01",
          "**NCCL** between GPUs (one GPU per rank)", "gpu-check", "one-rank-group"),
    Claim("00-who-ls-lists-the-engine-names", "00_ranks_and_world", "c05",
          "IPython's `%who_ls` lists the names of an engine's namespace (without IPython's own)",
          "test", "tests/notebooks/test_00_ranks_and_world.py::test_notebook00_default_reports_each_of_4_ranks_once"),
    Claim("00-torchrun-starts-the-ranks", "00_ranks_and_world", "torchrun-note",
          "`torchrun`, which starts one process per rank itself and gives each its `RANK`, "
          "`WORLD_SIZE`, `LOCAL_RANK` and the rendezvous address",
          "test", "tests/notebooks/test_00_ranks_and_world.py::test_the_barrier_cell_runs_as_a_torchrun_script"),
    # 01 scatter
    gloo("01-scatter-list-off-src-refused", "01_scatter", "c12",
         "torch checks this on the rank itself, before any data moves"),
    gloo("01-scatter-wrong-length-refused-on-src", "01_scatter", "c14",
         "A list of the wrong length is refused on `src`"),
    # 02 gather
    gloo("02-gather-list-off-dst-refused", "02_gather", "c12",
         "mistake fails at once instead of hanging"),
    gloo("02-gather-wrong-list-refused-on-dst", "02_gather", "c14",
         "is refused\non `dst` before anything is received"),
    gloo("02-aliased-list-not-caught", "02_gather", "c16", "torch does not catch this"),
    # 03 broadcast
    gloo("03-python-number-refused", "03_broadcast", "c14",
         "A Python number cannot be broadcast: torch refuses it on every rank"),
    Claim("03-nccl-refuses-cpu-tensor", "03_broadcast", "c14",
          "fine with gloo, refused by NCCL", "gpu-check", "cpu-tensor-refused"),
    gloo("03-broadcast-longer-kills-receiver", "03_broadcast", "c16",
         "gloo **kills the receiving process**", "broadcast-longer"),
    gloo("03-broadcast-shorter-accepted", "03_broadcast", "c16",
         "accepted silently; the end\nof the buffer keeps what it held"),
    # 04 reduce
    gloo("04-reduce-non-dst-depends-on-size", "04_reduce", "c12",
         "which elements, depends on the size and the\nworld size"),
    Claim("04-nccl-reduce-reads-non-root", "04_reduce", "c12",
          "NCCL only reads them", "gpu-check", "reduce-non-dst-untouched"),
    gloo("04-dst-out-of-range-refused", "04_reduce", "c14",
         "A rank that does not exist is refused\non the spot, on every rank"),
    gloo("04-bitwise-on-bool", "04_reduce", "c16",
         "the bitwise ops need integers or `bool`", "bitwise-int-and-bool-only"),
    # 05 all_reduce
    gloo("05-gloo-refuses-avg-int-and-bitwise-float", "05_all_reduce", "c12",
         "gloo refuses `AVG` on integers and the bitwise ops on floats",
         "bitwise-int-and-bool-only"),
    gloo("05-refusals-on-every-rank", "05_all_reduce", "c12",
         "Every rank refuses the same pairs, so the probe cannot hang",
         "bitwise-int-and-bool-only"),
    gloo("05-bitwise-float-refused-before-data-moves", "05_all_reduce", "c12",
         "Most\nrefusals come before any data moves (a bitwise op on floats)",
         "bitwise-int-and-bool-only"),
    Claim("05-nccl-no-bitwise", "05_all_reduce", "c12", "NCCL has\nno bitwise ops at all",
          "gpu-check", "bitwise-refused"),
    Claim("05-premul-sum-nccl-only", "05_all_reduce", "c12", "is\nNCCL-only",
          "gpu-check", "premul-sum-accepted"),
    gloo("05-avg-int-leaves-the-sum", "05_all_reduce", "c16",
         "the buffer is left holding the **sum**", "avg-int-leaves-the-sum"),
    gloo("05-bitwise-on-bool", "05_all_reduce", "c16", "the bitwise ops work on\n`bool` too",
         "bitwise-int-and-bool-only"),
    gloo("05-shape-mismatch-kills-at-2", "05_all_reduce", "c16b",
         "at 2 ranks, gloo **kills\none process**", "all-reduce-shape-mismatch"),
    gloo("05-shape-mismatch-peer-fails", "05_all_reduce", "c16b",
         "its peer\nfails on the closed connection, at once in most runs and only at the timeout "
         "in some", "all-reduce-shape-mismatch"),
    gloo("05-shape-mismatch-wrong-sums-at-3", "05_all_reduce", "c16b",
         "at 3 ranks, some ranks **return wrong sums**", "all-reduce-shape-mismatch"),
    # 06 all_gather
    gloo("06-all-gather-wrong-length-refused", "06_all_gather", "c21",
         "gloo refuses a list of the wrong length on every rank"),
    Claim("06-nccl-no-length-check", "06_all_gather", "c21",
          "NCCL (torch 2.13) does not check the length", "source",
          "torch ProcessGroupNCCL.cpp allgather: output list length not checked (2+ GPUs)"),
    Claim("06-nccl-ring", "06_all_gather", "c14",
          "(NCCL, for instance,\npasses the pieces around a ring of ranks)", "source",
          "NCCL docs, Collective Operations (AllGather) and NCCL_ALGO=Ring"),
    Claim("06-nccl-list-form-copies", "06_all_gather", "c15",
          "the list form makes torch allocate one internally and then copy each piece out",
          "source", "torch ProcessGroupNCCL.cpp allgather: flattened output, then copies"),
    gloo("06-all-gather-into-tensor-deprecated", "06_all_gather", "c15",
         "`all_gather_into_tensor` still\nworks but is deprecated"),
    gloo("06-output-same-size-refused", "06_all_gather", "c23",
         "is refused on every rank, by gloo and\nNCCL alike"),
    gloo("06-gloo-flat-output-only", "06_all_gather", "c25",
         "gloo in torch 2.13 accepts only the flat concatenation"),
    Claim("06-nccl-2d-output", "06_all_gather", "c25",
          "NCCL also accepts an `output_tensor` of shape `(world_size, 2)`", "source",
          "torch ProcessGroupNCCL.cpp _allgather_base: checks numel only (2+ GPUs)"),
    # 07 reduce_scatter
    gloo("07-reduce-scatter-tensor-deprecated", "07_reduce_scatter", "c12",
         "`reduce_scatter_tensor` still works but is deprecated"),
    gloo("07-wrong-length-refused", "07_reduce_scatter", "c20",
         "A list of the wrong length is refused on every rank"),
    # 08 all_to_all
    gloo("08-wrong-length-refused", "08_all_to_all", "c26",
         "gloo checks the length on every rank"),
    gloo("08-gloo-list-uneven-refused", "08_all_to_all", "c28",
         "requires every piece to have the\nsame size and refuses the call on every rank"),
    Claim("08-nccl-list-uneven-accepted", "08_all_to_all", "c28",
          "NCCL sends each piece with its\nown size", "gpu-check", "uneven-all-to-all-list"),
    gloo("08-splits-more-kills-receiver", "08_all_to_all", "c30",
         "rank 1's process is **killed**", "splits-more"),
    gloo("08-splits-more-sender-race", "08_all_to_all", "c30",
         "rank 0 either returns or fails at once on the closed\nconnection", "splits-more"),
    gloo("08-splits-fewer-accepted", "08_all_to_all", "c30",
         "rank 1\naccepts them silently"),
    # 09 send/recv
    Claim("09-nccl-wait-stream", "09_send_recv", "c12",
          "`wait()` makes\nthe current CUDA stream wait", "source",
          "torch docs, torch.distributed Work.wait and TORCH_NCCL_BLOCKING_WAIT"),
    Claim("09-nccl-batch-is-one-group", "09_send_recv", "c15",
          "With NCCL, the list becomes one NCCL group", "source",
          "torch distributed_c10d.batch_isend_irecv (_coalescing_manager: ncclGroupStart/End)"),
    Claim("09-nccl-timeout-aborts-process", "09_send_recv", "c20",
          "a NCCL communicator that times out is aborted and by default takes its process down",
          "source", "torch docs, TORCH_NCCL_ASYNC_ERROR_HANDLING (default 3: tear down)"),
    Claim("09-nccl-unbatched-one-stream", "09_send_recv", "c31",
          "PyTorch queues an\nunbatched `isend` and `irecv` with the same peer on one CUDA stream",
          "source", "torch ProcessGroupNCCL.cpp pointToPoint: one stream per peer pair key"),
    gloo("09-gloo-send-waits-any-size", "09_send_recv", "c20",
         "gloo always waits, whatever\nthe size", "both-send-first"),
    Claim("09-nccl-send-blocks-large", "09_send_recv", "c20",
          "NCCL waits too for tensors larger than its internal buffers", "gpu-check",
          "send-blocks-large"),
    gloo("09-both-fail-after-timeout", "09_send_recv", "c22",
         "Both sends fail after the timeout, neither before", "both-send-first"),
    gloo("09-timed-out-group-broken", "09_send_recv", "c22",
         "every later call on it fails at\nonce", "both-send-first"),
    gloo("09-isend-progresses-on-gloo", "09_send_recv", "c31",
         "On gloo each operation progresses on its own"),
    gloo("09-send-to-self-refused", "09_send_recv", "c37",
         "**`send` to itself is refused at once.**"),
    gloo("09-isend-to-self-gloo-raises", "09_send_recv", "c38a",
         "gloo has no connection from a rank to itself and raises at once"),
    Claim("09-nccl-isend-to-self", "09_send_recv", "c38a",
          "NCCL accepts a send to self batched with its receive", "gpu-check",
          "isend-to-self"),
    gloo("09-detail-p2p-advances-sequence", "09_send_recv", "c38c",
         "the next collective on the default group is refused"),
    gloo("09-dtype-not-checked", "09_send_recv", "c39", "**Nothing checks the dtype.**"),
    gloo("09-larger-message-kills-receiver", "09_send_recv", "c41",
         "gloo *kills the receiving process*", "send-longer"),
    gloo("09-smaller-message-accepted", "09_send_recv", "c41",
         "A smaller message is accepted silently"),
    Claim("09-nccl-tests-sendrecv-factor", "09_send_recv", "c45",
          "nccl-tests counts a send/recv's bus bandwidth as its algorithm bandwidth",
          "source", "nccl-tests src/sendrecv.cu SendRecvGetBw: factor 1"),
    # 10 ring
    Claim("10-nccl-prefers-trees-small", "10_ring_all_reduce", "c33",
          "for small messages NCCL prefers other algorithms", "source",
          "NCCL docs, NCCL_ALGO (Ring, Tree, ...) and its tuning model"),
    Claim("10-ring-batched-no-deadlock", "10_ring_all_reduce", "c08",
          "nobody waits for anybody: no deadlock", "test",
          "tests/notebooks/test_10_ring_all_reduce.py::test_ring_all_reduce_notebook"),
    Claim("10-ring-measured-as-the-model", "10_ring_all_reduce", "c32a",
          "On gloo both should\nwrite 2(*n* − 1)/*n* · S plus gloo's headers", "test",
          "tests/notebooks/test_10_ring_all_reduce.py::test_ring_all_reduce_notebook"),
    Claim("10-nccl-bytes-no-socket", "10_ring_all_reduce", "c32a",
          "on NCCL\nthe bytes pass through no socket", "gpu-check", "nccl-bytes-not-on-sockets"),
    gloo("10-gloo-all-reduce-to-the-left", "10_ring_all_reduce", "c32d",
         "gloo's `all_reduce` to rank\n*r* − 1", "11-all-reduce-ring-at-every-size"),
    Claim("10-gloo-headers-per-transfer", "10_ring_all_reduce", "c32d",
          "every gloo message has a 48-byte header, and a transfer costs its\nsender two and "
          "its receiver one", "test",
          "tests/helpers/test_wire.py::test_a_send_reads_its_bytes_plus_gloo_headers"),
    # 10: make bench's row (bench-speed)
    Claim("10-bench-gloo-segments-1mib", "10_ring_all_reduce", "bench-speed",
          "cuts the chunks into segments of at most 1 MiB", "source",
          "pytorch/gloo (HEAD 70dc360) gloo/allreduce.h AllreduceOptionsImpl: 'static constexpr "
          "size_t kMaxSegmentSize = 1024 * 1024', 'the maximum size of each I/O operation "
          "(send/recv) of which two are in flight at all times'; gloo/allreduce.cc ring(): "
          "numSegments = roundUp(max(ceil(totalBytes / maxSegmentBytes), 2 * size), size), "
          "numSegmentsPerRank = numSegments / size, segmentBytes <= maxSegmentBytes. The "
          "libtorch_cpu.so of torch 2.13.0+cpu holds gloo::(anonymous namespace)::ring and no "
          "SHM allreduce (gloo's SHM path, 5994546, was reverted in 9322e67)"),
    Claim("10-bench-gloo-two-in-flight", "10_ring_all_reduce", "bench-speed",
          "keeps two in flight, so that adding one overlaps receiving the next", "source",
          "pytorch/gloo (HEAD 70dc360) gloo/allreduce.cc ring(): 'we split up a chunk into "
          "multiple segments (>= 2), and ensure we have one segment in flight while computing a "
          "reduction on the other'; each iteration i issues tmp->recv/out[0]->send and waits "
          "(waitRecv, then opts.reduce) for those of iteration i - 2"),
    Claim("10-bench-gloo-scratch-two-segments", "10_ring_all_reduce", "bench-speed",
          "gloo into one scratch buffer of two segments\nand, in the all-gather phase, straight "
          "into the output", "source",
          "pytorch/gloo (HEAD 70dc360) gloo/allreduce.cc ring(): tmpAllocation(new "
          "uint8_t[segmentBytes * 2]) once per call, reduce/scatter receives with "
          "tmp->recv(recvRank, slot, segmentOffset[i & 0x1], ...); allgather receives with "
          "out[0]->recv(recvRank, slot, cur.recvOffset, ...), into the output itself"),
    Claim("10-bench-cpu-allocator-no-cache", "10_ring_all_reduce", "bench-speed",
          "torch's CPU\nallocator keeps no freed block for reuse", "source",
          "pytorch/pytorch c10/core/impl/alloc_cpu.cpp: alloc_cpu is posix_memalign(&data, "
          "c10_compute_alignment(nbytes), nbytes) on Linux (mimalloc only with USE_MIMALLOC), "
          "free_cpu is free(data), no free list of its own; the installed libc10.so (torch "
          "2.13.0+cpu) imports posix_memalign@GLIBC_2.2.5 and free@GLIBC_2.2.5 and no mi_malloc"),
    Claim("10-bench-malloc-mmap-threshold", "10_ring_all_reduce", "bench-speed",
          "the C library may serve a\nblock this large as fresh pages that the kernel maps at "
          "their first write", "source",
          "man 3 mallopt, M_MMAP_THRESHOLD: 'For allocations greater than or equal to the limit "
          "... that can't be satisfied from the free list, the memory-allocation functions "
          "employ mmap(2)', 'the kernel must perform the expensive task of zeroing out memory "
          "allocated via mmap(2)'; the dynamic threshold starts at 128*1024 and rises, as such "
          "blocks are freed, up to DEFAULT_MMAP_THRESHOLD_MAX (4*1024*1024*sizeof(long) = "
          "32 MiB on 64-bit): a 16 MiB chunk of the 64 MiB buffer may go either way"),
    # 11 bandwidth
    Claim("11-nccl-tests-w1-default", "11_bandwidth", "c01",
          "nccl-tests' own default is `-w 1`", "source",
          "nccl-tests src/common.cu: warmup_iters = 1 (option -w)"),
    Claim("11-nccl-tests-time-averaged", "11_bandwidth", "c06",
          "its `-a 1` default: time averaged over the ranks", "source",
          "nccl-tests src/common.cu: average = 1 (option -a)"),
    Claim("11-busbw-factors", "11_bandwidth", "c04", "| all_reduce | 2(*n* − 1)/*n* |", "test",
          "tests/helpers/test_bench.py::test_bus_factor_matches_nccl_tests"),
    Claim("11-every-size-runs", "11_bandwidth", "c08",
          "Every size is a point, as in nccl-tests", "test",
          "tests/helpers/test_bench.py::test_cli_json_covers_every_collective_and_size"),
    Claim("11-trim-16-bytes", "11_bandwidth", "c08",
          "trimmed down to a multiple of\n16 bytes (nccl-tests 2.13.12 and later)", "test",
          "tests/helpers/test_bench.py::test_plan_split_collectives_trim_pieces_to_16_bytes"),
    Claim("11-blocking-wait-polls", "11_bandwidth", "c06",
          "with it that wait polls the host until the\ncall is done", "source",
          "torch ProcessGroupNCCL WorkNCCL::synchronize (blocking wait loop); "
          "make gpu-check prints both timings"),
    # 11 bandwidth: bytes on the wire
    Claim("11-quiet-rank-reads-zero", "11_bandwidth", "w00",
          "A rank that only waits (and prints) must read 0 B", "test",
          "tests/helpers/test_wire.py::test_a_quiet_rank_writes_nothing"),
    Claim("11-gloo-send-headers", "11_bandwidth", "w03",
          "So the sender writes S + 96 B and the receiver 48 B, whatever S is", "test",
          "tests/helpers/test_wire.py::test_a_send_reads_its_bytes_plus_gloo_headers"),
    Claim("11-nccl-bytes-pass-no-socket", "11_bandwidth", "w00",
          "With NCCL the bytes\ntravel over NVLink or PCIe without passing through a socket",
          "gpu-check", "nccl-bytes-not-on-sockets"),
    Claim("11-nccl-ring-one-of-algorithms", "11_bandwidth", "w00",
          "for\nall_reduce, all_gather and reduce_scatter a ring is one of the algorithms its "
          "tuner chooses\nfrom", "source",
          "NVIDIA/nccl src/graph/tuning.cc (v2.30.7-1, commit 5067397c), ncclTopoTuneModel "
          "lines 294-298: Broadcast and Reduce keep only NCCL_ALGO_RING; ReduceScatter and "
          "AllGather keep PAT, RING, NVLS, COLLNET_DIRECT; AllReduce every algorithm but PAT "
          "(TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE)"),
    gloo("11-all-reduce-one-neighbour", "11_bandwidth", "w06",
         "all of it to one neighbour, rank\n  *r* − 1: a ring", "11-all-reduce-ring-at-every-size"),
    gloo("11-all-reduce-ring-every-size", "11_bandwidth", "w06",
         "so it is the\n  ring at every size", "11-all-reduce-ring-at-every-size"),
    gloo("11-ring-and-direct-as-the-model", "11_bandwidth", "w06",
         "all as\n  the model says, plus headers", "11-ring-and-direct-collectives-agree"),
    gloo("11-reduce-scatter-is-an-all-reduce", "11_bandwidth", "w06",
         "**reduce_scatter writes what an all_reduce writes**",
         "11-reduce-scatter-writes-an-all-reduce"),
    Claim("11-nccl-ring-reduce-scatter", "11_bandwidth", "w06",
          "NCCL's ring reduce-scatter sends\n  (*n* − 1)/*n* · S per rank", "source",
          "NVIDIA/nccl src/device/reduce_scatter.h runRing (n-1 sends of one chunk per rank); "
          "nccl-tests doc/PERFORMANCE.md, ReduceScatter: (n-1)/n"),
    Claim("11-nccl-reduce-scatter-algorithms", "11_bandwidth", "w06",
          "for a\n  reduce_scatter its tuner chooses among Ring, PAT (by default only with one "
          "GPU per node)\n  and, on suitable hardware, NVLS and CollNet Direct", "source",
          "NVIDIA/nccl src/graph/tuning.cc (v2.30.7-1, commit 5067397c), ncclTopoTuneModel "
          "lines 295-297: for ncclFuncReduceScatter every algorithm but PAT, RING, NVLS and "
          "COLLNET_DIRECT is skipped; ncclPatEnable lines 216-223: PAT off by default unless "
          "nNodes == nRanks ('PAT only supports 1 GPU per node'); line 309: NVLS skipped with "
          "fewer than 2 NVLS channels; lines 503-510: CollNet Direct off without collnet "
          "support or NVSwitches (as in claim 20-nccl-reduce-scatter-algorithms)"),
    gloo("11-broadcast-binomial-tree", "11_bandwidth", "w06", "**broadcast is a tree**"),
    Claim("11-nccl-ring-broadcast", "11_bandwidth", "w06",
          "NCCL's ring broadcast has every rank but the last forward S", "source",
          "NVIDIA/nccl src/device/broadcast.h runRing: root send, nextRank == root recv only, "
          "the others recvCopySend"),
    gloo("11-reduce-root-writes", "11_bandwidth", "w06",
         "the root writes too, where the model's root writes nothing", "11-reduce-root-writes-too"),
    gloo("11-small-messages-mostly-headers", "11_bandwidth", "w06",
         "all_reduce of 256 B writes several times 256 B", "11-small-all-reduce-mostly-headers"),
    gloo("11-what-gloo-runs", "11_bandwidth", "ab00",
         "all_reduce and all_gather are rings, reduce_scatter is an all_reduce underneath",
         "11-reduce-scatter-writes-an-all-reduce"),
    gloo("11-no-shared-memory-path", "11_bandwidth", "ab00",
         "the measurement shows that torch 2.13 does not take it here",
         "11-all-reduce-ring-at-every-size"),
    gloo("11-remember-reduce-scatter-twice", "11_bandwidth", "c24",
         "reduce_scatter sends twice as much (an all_reduce underneath)",
         "11-reduce-scatter-writes-an-all-reduce"),
    # 12 backend support
    gloo("12-refusals-on-every-rank", "12_backend_support", "c06",
         "every rank raises the same error and none is left waiting",
         "bitwise-int-and-bool-only"),
    gloo("12-avg-int-leaves-the-sum", "12_backend_support", "c12",
         "`tensor` is left holding the sum", "avg-int-leaves-the-sum"),
    Claim("12-premul-sum-nccl-only", "12_backend_support", "c18", "It exists for NCCL only",
          "gpu-check", "premul-sum-accepted"),
    Claim("12-scheme-documented-table", "12_backend_support", "scheme-text",
          "which says which functions each backend makes available for CPU and for GPU "
          "tensors", "source",
          "torch's documentation, torch.distributed, section Backends "
          "(https://docs.pytorch.org/docs/stable/distributed.html#backends; pytorch/pytorch "
          "docs/source/distributed.md at 0015d6b, the table the figure's "
          "helpers/collectives/backend_table.py DOCUMENTED copies, xccl columns left out); "
          "tests/helpers/test_backend_table.py spot-checks its cells and test_12's "
          "check_scheme holds its gloo CPU column to this run's survey"),
    # 13 debugging
    # 13's scheme: each row held to this run's own verdicts by the notebook's test
    Claim("13-scheme-refused-at-once", "13_debugging", "scheme-text",
          "Shapes or dtypes that differ (sections 1 and 2) and a `src` that is not a rank\n(3) "
          "are refused on every rank at once", "test",
          "tests/notebooks/test_13_debugging.py::test_the_scheme_under_the_title_is_what_this_run_shows"),
    Claim("13-scheme-scatter-list-short", "13_debugging", "scheme-text",
          "A `scatter_list` one tensor\nshort (4) is refused at once by the source only; the "
          "other ranks time out waiting for their\npiece.", "test",
          "tests/notebooks/test_13_debugging.py::test_the_scheme_under_the_title_is_what_this_run_shows"),
    Claim("13-scheme-only-rank-0-calls", "13_debugging", "scheme-text",
          "A collective that only rank 0 calls (5) times out on rank 0", "test",
          "tests/notebooks/test_13_debugging.py::test_the_scheme_under_the_title_is_what_this_run_shows"),
    Claim("13-scheme-dead-rank", "13_debugging", "scheme-text",
          "A rank that dies (6) leaves the others a closed connection or a timeout.", "test",
          "tests/notebooks/test_13_debugging.py::test_the_scheme_under_the_title_is_what_this_run_shows"),
    gloo("13-detail-names-mismatch", "13_debugging", "c06",
         "That is the DETAIL check: before the real all_reduce"),
    gloo("13-no-checks-shape-kills-at-2", "13_debugging", "c08",
         "at 2 ranks gloo **kills one process**", "all-reduce-shape-mismatch"),
    gloo("13-no-checks-peer-fails", "13_debugging", "c08",
         "its peer fails on the closed connection, at once in most\nruns and only at the timeout "
         "in some", "all-reduce-shape-mismatch"),
    gloo("13-no-checks-shape-wrong-sums-at-3-4", "13_debugging", "c08",
         "at 3 or 4 ranks, some ranks **return wrong sums** without any error while the others\n"
         "wait until the timeout", "all-reduce-shape-mismatch"),
    gloo("13-no-checks-dtype-kills", "13_debugging", "c08",
         "float32 against float64 (below, section 2) killed a process at\n2, 3 and 4 ranks",
         "all-reduce-dtype-mismatch"),
    gloo("13-detail-cost", "13_debugging", "c08b",
         "runs a monitored barrier and two all_gathers of the\nfingerprint"),
    gloo("13-detail-src-refused", "13_debugging", "c12",
         "A `src` of `world_size` is refused on every\nrank before anything moves"),
    gloo("13-short-scatter-list", "13_debugging", "c15",
         "The source refuses at\nonce; the other ranks are already waiting"),
    Claim("13-after-timeout-out-of-step", "13_debugging", "c17",
          "After a timeout the ranks no longer agree on how many collectives they have run",
          "test", "tests/notebooks/test_13_debugging.py::"
          "test_short_scatter_list_errors_within_the_timeout_then_a_restart_works"),
    gloo("13-detail-names-absent-ranks", "13_debugging", "c20",
         "tells rank 0 *who* did not arrive"),
    Claim("13-ipyparallel-drops-dead-engine", "13_debugging", "c26",
          "ipyparallel has dropped the dead engine", "test",
          "tests/notebooks/test_13_debugging.py::"
          "test_a_rank_killed_mid_collective_is_named_and_the_start_cell_recovers"),
    Claim("13-dead-ranks-peers-closed-or-timeout", "13_debugging", "c26",
          "the others report a closed connection or\na timeout", "test",
          "tests/notebooks/test_13_debugging.py::"
          "test_the_ranks_that_outlive_a_dead_one_report_a_closed_connection_or_a_timeout"),
    Claim("13-nccl-debug-at-init", "13_debugging", "c28",
          "NCCL reads it when a communicator is created", "source",
          "NCCL docs, Environment Variables: NCCL_DEBUG"),
    Claim("13-start-cell-refuses-more-ranks-than-gpus", "13_debugging", "c33",
          "The start cell checks what it is asked for before it starts any process",
          "gpu-check", "more-ranks-than-gpus"),
    Claim("13-at-scale-nccl-default-timeout", "13_debugging", "at-scale",
          "the others wait for it, with\ntorch's defaults at least the NCCL timeout", "source",
          "torch 2.13: torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp:157 'constexpr auto "
          "kProcessGroupNCCLDefaultTimeout = std::chrono::milliseconds(10 * 60 * 1000);' "
          "(installed header); torch/distributed/distributed_c10d.py:836-849 "
          "_get_default_timeout returns default_pg_nccl_timeout for Backend.NCCL "
          "(default_pg_timeout, 30 min, for the others); the box's 10 min is that constant"),
    # 14 groups and meshes
    gloo("14-new-group-every-rank", "14_groups_and_meshes", "c06",
         "By default `new_group` is called by **every** rank, in the same order: ranks "
         "outside the group get a placeholder back, and `dist.get_rank(group)` answers −1 "
         "on them"),
    gloo("14-group-rank-renumbered", "14_groups_and_meshes", "c06",
         "Inside the group, ranks are numbered again from 0: the **group rank**",
         "14-new-group-every-rank"),
    gloo("14-local-synchronization-skip", "14_groups_and_meshes", "c06",
         "use_local_synchronization=True)` only the members wait for each other: a "
         "non-member may skip the call, and one that makes it gets `None` back at once",
         "14-new-group-local-synchronization"),
    gloo("14-local-synchronization-names", "14_groups_and_meshes", "c06",
         "a later such group, of ranks that did and did not join an earlier one, gets a "
         "different name on each side and cannot form", "14-new-group-local-synchronization"),
    gloo("14-local-synchronization-remember", "14_groups_and_meshes", "c33",
         "`new_group(ranks, use_local_synchronization=True)` waits only for the members: "
         "non-members may skip that call", "14-new-group-local-synchronization"),
    gloo("14-new-group-waits-only-for-members", "14_groups_and_meshes", "c25",
         "on gloo, creating a group waits only for\nits members"),
    Claim("14-skipper-out-of-step-times-out", "14_groups_and_meshes", "c27",
          "The ranks that made the call fail after the 1-second timeout", "test",
          "tests/notebooks/test_14_groups_and_meshes.py::test_groups_and_meshes_notebook"),
    gloo("14-skipper-gloo-connect-timeout", "14_groups_and_meshes", "c27",
         "its `all_reduce` may time out after 1 s, or its connection set-up may fail with "
         "gloo's `Connect timeout`, which is not the group's timeout but 5 times it"),
    Claim("14-missed-call-recovers", "14_groups_and_meshes", "c27",
          "Outside that group it returns at once, the counts agree again, and a new group works",
          "test", "tests/notebooks/test_14_groups_and_meshes.py::test_groups_and_meshes_notebook"),
    Claim("14-nccl-timeout-aborts-process", "14_groups_and_meshes", "c25",
          "a NCCL communicator that times out may take its process down", "source",
          "torch docs, TORCH_NCCL_ASYNC_ERROR_HANDLING (default 3: tear down)"),
    gloo("14-new-subgroups-consecutive", "14_groups_and_meshes", "c09",
         "cuts the world into consecutive groups of `cols`\nranks"),
    gloo("14-get-global-rank", "14_groups_and_meshes", "c09",
         "`dist.get_global_rank(group, i)` maps a group rank back to a global rank",
         "14-new-subgroups-consecutive"),
    gloo("14-device-mesh-row-major", "14_groups_and_meshes", "c04",
         "`init_device_mesh` lays the ranks out **row-major**"),
    gloo("14-mesh-groups-rows-columns", "14_groups_and_meshes", "c12",
         "`mesh[\"tp\"]` is this rank's row, `mesh[\"dp\"]` its column",
         "14-device-mesh-row-major"),
    Claim("14-hierarchical-more-than-flat", "14_groups_and_meshes", "c24b",
          "**On gloo the hierarchical all_reduce writes more than the flat one**", "test",
          "tests/notebooks/test_14_groups_and_meshes.py::test_groups_and_meshes_notebook"),
    gloo("14-reduce-scatter-costs-all-reduce", "14_groups_and_meshes", "c24b",
         "gloo's `reduce_scatter` all-reduces the whole input in the row and keeps this "
         "rank's chunk, so it writes what an all_reduce of the row's S writes",
         "11-reduce-scatter-writes-an-all-reduce"),
    gloo("14-phases-agree-with-the-model", "14_groups_and_meshes", "c24b",
         "Phases 2 and 3 and the flat all_reduce agree with the model, plus gloo's 48-byte "
         "message headers", "11-ring-and-direct-collectives-agree"),
    Claim("14-nccl-ring-reduce-scatter", "14_groups_and_meshes", "c24b",
          "runs its reduce_scatter as a ring, (c−1)/c·S per rank", "source",
          "NVIDIA/nccl src/device/reduce_scatter.h runRing (n-1 sends of one chunk per rank); "
          "nccl-tests doc/PERFORMANCE.md, ReduceScatter: (n-1)/n"),
    Claim("14-nccl-reduce-scatter-algorithms", "14_groups_and_meshes", "c24b",
          "its tuner may also pick PAT (by default only with one GPU per node) or, on suitable\n"
          "hardware, NVLS or CollNet Direct", "source",
          "NVIDIA/nccl src/graph/tuning.cc (v2.30.7-1, commit 5067397c), ncclTopoTuneModel "
          "lines 295-297 (ReduceScatter: PAT, RING, NVLS, COLLNET_DIRECT), ncclPatEnable "
          "lines 216-223, line 309 (NVLS), lines 503-510 (CollNet); as in claim "
          "20-nccl-reduce-scatter-algorithms"),
    Claim("14-nccl-ring-model-when-ring", "14_groups_and_meshes", "c23",
          "what each call sends when NCCL\nruns it as a ring, one of the algorithms its tuner "
          "picks from", "source",
          "NVIDIA/nccl src/device/all_reduce.h, reduce_scatter.h, all_gather.h runRing; "
          "src/graph/tuning.cc ncclTopoTuneModel lines 294-298 (RING one candidate among "
          "several per collective); as in claim 17-nccl-tuner-algorithms"),
    Claim("14-only-phase-2-crosses-rows", "14_groups_and_meshes", "c33",
          "of which only phase 2's 2(r−1)/r·S/c cross between rows", "test",
          "tests/notebooks/test_14_groups_and_meshes.py::test_groups_and_meshes_notebook"),
    Claim("14-gloo-sends-more-remember", "14_groups_and_meshes", "c33",
          "measured on gloo, whose reduce_scatter costs an all_reduce, it sends more than the "
          "flat all_reduce", "test",
          "tests/notebooks/test_14_groups_and_meshes.py::test_groups_and_meshes_notebook"),
    # 15 data parallel
    gloo("15-ddp-buckets-default", "15_data_parallel", "c26",
         "buckets of 25 MiB by default,\nthe first of 1 MiB. In the first step every gradient "
         "goes into one bucket"),
    gloo("15-ddp-buckets-ready-order", "15_data_parallel", "c26",
         "from then on the buckets follow the order in which the gradients became ready",
         "15-ddp-buckets-default"),
    gloo("15-ddp-rebuild-agreement", "15_data_parallel", "c26",
         "at the second step's forward the ranks agree on the rebuilt buckets",
         "15-ddp-buckets-default"),
    Claim("15-ddp-bytes-measured-not-counted", "15_data_parallel", "c26",
          "DDP calls gloo from C++, so `count_collectives` counts none of its calls, but its "
          "bytes pass through the same sockets", "test",
          "tests/notebooks/test_15_data_parallel.py::test_data_parallel_notebook"),
    Claim("15-nccl-ring-one-of-algorithms", "15_data_parallel", "c13",
          "each call as NCCL runs it when its\ntuner picks a ring, one of several algorithms "
          "it chooses from", "source",
          "NVIDIA/nccl src/device/all_reduce.h runRing (2(n-1) steps of a chunk per rank); "
          "src/graph/tuning.cc (v2.30.7-1, commit 5067397c) ncclTopoTuneModel line 298: for "
          "AllReduce every algorithm but PAT stays a candidate (TREE, RING, COLLNET_DIRECT, "
          "COLLNET_CHAIN, NVLS, NVLS_TREE)"),
    gloo("15-all-reduce-headers-per-call", "15_data_parallel", "c13",
         "an `all_reduce` call of 64 bytes up to 2n MiB writes\n12(n−1) of them per rank"),
    Claim("15-toy-headers-large-share", "15_data_parallel", "c13",
          "This model's gradients are tiny, so the headers are a large share of what travels",
          "test", "tests/notebooks/test_15_data_parallel.py::test_data_parallel_notebook"),
    gloo("15-fewer-calls-fewer-bytes", "15_data_parallel", "c20",
         "every call writes its own headers, so fewer, larger calls write fewer bytes",
         "15-all-reduce-headers-per-call"),
    Claim("15-ddp-one-call-fewer-headers", "15_data_parallel", "c28a",
          "one `all_reduce` per step instead of four, so on gloo fewer headers", "test",
          "tests/notebooks/test_15_data_parallel.py::test_data_parallel_notebook"),
    Claim("15-ddp-second-step-more", "15_data_parallel", "c28a",
          "Its second step writes a little more than the others", "test",
          "tests/notebooks/test_15_data_parallel.py::test_data_parallel_notebook"),
    gloo("15-async-returns-at-once", "15_data_parallel", "c25",
         "so the call\nreturns at once"),
    gloo("15-completes-when-every-rank-joined", "15_data_parallel", "c25",
         "a\ncollective completes only when **every** rank has joined it",
         "15-async-returns-at-once"),
    Claim("15-hooks-launch-during-backward", "15_data_parallel", "c21",
          "can launch the bucket's `all_reduce` at once, with\n`async_op=True`", "test",
          "tests/notebooks/test_15_data_parallel.py::test_data_parallel_notebook"),
    Claim("15-paced-overlap-hides-the-all-reduces", "15_data_parallel", "paced-overlap-read",
          "most of the `all_reduce` time lies inside backward, and the wait\nafter backward is "
          "a small part of what it is", "test",
          "tests/notebooks/test_15_data_parallel.py::test_data_parallel_notebook"),
    Claim("15-remember-paced-overlap", "15_data_parallel", "c37",
          "with layers that leave the cores free (as a GPU\n  per rank does), most of the "
          "`all_reduce` time", "test",
          "tests/notebooks/test_15_data_parallel.py::test_data_parallel_notebook"),
    Claim("15-ddp-same-parameters", "15_data_parallel", "c37",
          "`DistributedDataParallel` does the same and ends with the same parameters", "test",
          "tests/notebooks/test_15_data_parallel.py::test_data_parallel_notebook"),
    Claim("15-nccl-separate-stream", "15_data_parallel", "c25",
          "With NCCL on GPUs the collectives run as kernels on a\nseparate CUDA stream",
          "gpu-check", "collective-own-stream"),
    Claim("15-li-ddp-all-reduce-before-backward-ends", "15_data_parallel", "c25",
          "on how DDP starts each\nbucket's `all_reduce` before the local backward pass "
          "finishes", "source",
          "Li et al. 2020, PyTorch Distributed: Experiences on Accelerating Data Parallel "
          "Training, VLDB 13(12), arXiv 2006.15704, section 3.2.3 'Overlap Computation with "
          "Communication': 'The AllReduce operation on gradients can start before the local "
          "backward pass finishes. With bucketing, DDP only needs to wait for all contents in "
          "the same bucket before launching communications.'; 'If hooks of all gradients in "
          "the same buckets have fired, the last hook will trigger an asynchronous AllReduce "
          "on that bucket'. No full copy of the paper's text was found in the stored corpus: "
          "these sentences are as quoted verbatim by stored reading notes of the paper "
          "(several independent copies); the section number as one of them gives it "
          "('Li et al. 2020 §3.2.3')"),
    # 15: make bench's row (bench-speed)
    Claim("15-bench-ddp-first-bucket-cap", "15_data_parallel", "bench-speed",
          "which makes its\nfirst bucket 4 MiB too", "source",
          "torch/nn/parallel/distributed.py (torch 2.13), _BucketCapacityConfig.create: "
          "first_bucket_bytes_cap = dist._DEFAULT_FIRST_BUCKET_BYTES (1048576) if bucket_cap_mb "
          "is None else bucket_bytes_cap; DistributedDataParallel passes it to the Reducer, which "
          "rebuilds the buckets after the first step (checked on 2 gloo ranks, width 1024, "
          "bucket_cap_mb=4: rebuilt_bucket_sizes 4214800, 4198400, 4198400, 4198400, 36864)"),
    Claim("15-bench-ddp-launch-from-hook", "15_data_parallel", "bench-speed",
          "launch a bucket's `all_reduce`\nfrom a hook once its last gradient is ready", "source",
          "torch/csrc/distributed/c10d/reducer.cpp: Reducer::autograd_hook -> "
          "mark_variable_ready: 'if (--bucket.pending == 0) mark_bucket_ready(...)'; "
          "Reducer::mark_bucket_ready calls all_reduce_bucket for each ready bucket, 'Buckets "
          "are reduced in sequence'"),
    Claim("15-bench-ddp-divides-while-copying", "15_data_parallel", "bench-speed",
          "DDP copies each gradient into a bucket it keeps\nfrom step to step and divides as it "
          "copies", "source",
          "torch/csrc/distributed/c10d/reducer.cpp, Reducer::mark_variable_ready_dense: with "
          "no comm hook, 'Divides while copying into the bucket view to save one scan over all "
          "the input parameters', at::mul_out(bucket_view, grad, wrapped), wrapped = 1 / "
          "div_factor_ (gradient_as_bucket_view=False: grad is not an alias of the bucket); "
          "the bucket tensors are made in Reducer::initialize_buckets, not per step"),
    Claim("15-bench-reducer-hook-in-cpp", "15_data_parallel", "bench-speed",
          "run by a hook\nthat the `Reducer` registers in C++ on each gradient accumulator",
          "source",
          "torch/csrc/distributed/c10d/reducer.cpp, Reducer::Reducer: for each variable, "
          "grad_accumulator->add_post_hook(LambdaPostHook(... this->autograd_hook("
          "variable_index) ...)), 'Hook to execute after the gradient accumulator has executed'"),
    # 16 ZeRO and FSDP
    gloo("16-fsdp2-dim0-chunk", "16_zero_fsdp", "c04",
         "Each tensor is split by **rows** (dim 0) like FSDP2 does (`torch.chunk`)",
         "16-fsdp2-chunk-rows"),
    gloo("16-fsdp2-dtensor-pieces", "16_zero_fsdp", "c24",
         "Its parameters become DTensors; `p.to_local()` is this rank's piece",
         "16-fsdp2-chunk-rows"),
    gloo("16-fsdp2-unpadded-piece", "16_zero_fsdp", "c33",
         "FSDP2 does the same, and its `to_local()` shows the unpadded piece",
         "16-fsdp2-chunk-rows"),
    gloo("16-ddp-reducer-copy", "16_zero_fsdp", "c08",
         "flat buffers as large as the gradients, a second copy beside the `.grad` tensors "
         "unless `gradient_as_bucket_view=True` makes each `.grad` a view into them"),
    gloo("16-reducer-buffers-unseen", "16_zero_fsdp", "c08",
         "No parameter, gradient or optimizer state leads to those buffers",
         "16-ddp-reducer-copy"),
    gloo("16-adam-step-counter", "16_zero_fsdp", "c18",
         "a 4-byte `step` counter per tensor that torch's Adam keeps"),
    gloo("16-adam-step-counter-no-rows", "16_zero_fsdp", "c36",
         "even for a tensor of which a rank has no rows", "16-adam-step-counter"),
    gloo("16-larger-message-aborts", "16_zero_fsdp", "c33",
         "in an `all_gather` whose pieces differ from rank to rank, a rank that receives a "
         "piece larger than it expects is aborted", "16-uneven-all-gather-aborts"),
    gloo("16-larger-message-aborts-receiver", "16_zero_fsdp", "c33",
         "a message larger than the receive buffer aborts the receiving process",
         "send-longer"),
    gloo("16-skipped-collective-waits", "16_zero_fsdp", "c28",
         "The other ranks wait in that `reduce_scatter` for rank 1"),
    gloo("16-reduce-scatter-costs-all-reduce", "16_zero_fsdp", "c12",
         "gloo's sends as many as an all_reduce", "11-reduce-scatter-writes-an-all-reduce"),
    gloo("16-gloo-reduce-scatter-all-reduce-bytes", "16_zero_fsdp", "c21",
         "gloo's `reduce_scatter` all-reduces the whole input and keeps this rank's rows, so "
         "it writes what an all_reduce of the same input writes",
         "11-reduce-scatter-writes-an-all-reduce"),
    Claim("16-gloo-stages-send-more", "16_zero_fsdp", "c21",
          "stages 2 and 3 send more than the model says", "test",
          "tests/notebooks/test_16_zero_fsdp.py::test_zero_fsdp_notebook"),
    Claim("16-headers-outweigh-data", "16_zero_fsdp", "c21",
          "which for this toy model's small tensors weigh more than the data", "test",
          "tests/notebooks/test_16_zero_fsdp.py::test_zero_fsdp_notebook"),
    Claim("16-nccl-ring-reduce-scatter", "16_zero_fsdp", "c21",
          "Where NCCL runs the calls as rings, the\nmodel's ratios hold on GPUs", "source",
          "NVIDIA/nccl src/device/reduce_scatter.h, all_gather.h, all_reduce.h runRing ((n-1) "
          "sends of one chunk per rank, 2(n-1) for all_reduce); nccl-tests "
          "doc/PERFORMANCE.md, ReduceScatter and AllGather: (n-1)/n, AllReduce: 2(n-1)/n"),
    Claim("16-nccl-ring-model-as-built", "16_zero_fsdp", "c21",
          "each call as NCCL runs it when its tuner picks a ring", "source",
          "NVIDIA/nccl src/graph/tuning.cc (v2.30.7-1, commit 5067397c), ncclTopoTuneModel "
          "lines 294-298: RING is a candidate for every collective, one among several for "
          "AllReduce, AllGather and ReduceScatter"),
    Claim("16-nccl-reduce-scatter-algorithms", "16_zero_fsdp", "c21",
          "for a `reduce_scatter` its tuner may also pick PAT (by\ndefault only with one GPU "
          "per node) or, on suitable hardware, NVLS or CollNet Direct", "source",
          "NVIDIA/nccl src/graph/tuning.cc (v2.30.7-1, commit 5067397c), ncclTopoTuneModel "
          "lines 295-297 (ReduceScatter: PAT, RING, NVLS, COLLNET_DIRECT), ncclPatEnable "
          "lines 216-223, line 309 (NVLS), lines 503-510 (CollNet); as in claim "
          "20-nccl-reduce-scatter-algorithms"),
    Claim("16-remember-ring-model-when-rings", "16_zero_fsdp", "c39",
          "the ring model (what NCCL sends when it runs the calls as rings)", "source",
          "NVIDIA/nccl src/device/reduce_scatter.h, all_gather.h, all_reduce.h runRing; "
          "src/graph/tuning.cc ncclTopoTuneModel lines 294-298 (RING one candidate among "
          "several)"),
    Claim("16-gloo-both-send-more-remember", "16_zero_fsdp", "c39",
          "Measured on gloo, whose reduce_scatter costs an all_reduce, both send more", "test",
          "tests/notebooks/test_16_zero_fsdp.py::test_zero_fsdp_notebook"),
    Claim("16-fsdp2-same-parameters", "16_zero_fsdp", "c39",
          "Each stage computes exactly DP's step (here to ~1e-16 in float64, and FSDP2 too)",
          "test", "tests/notebooks/test_16_zero_fsdp.py::test_zero_fsdp_notebook"),
    # 16: make bench's row (c27a)
    Claim("16-bench-fsdp2-reduce-scatter-single", "16_zero_fsdp", "c27a",
          "reduce_scattered with the same `dist.reduce_scatter_single`", "source",
          "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (torch 2.13), "
          "DefaultReduceScatter.__call__: return dist.reduce_scatter_single(output=..., "
          "input=..., group=group, op=op, async_op=async_op); _fsdp_param_group.py "
          "FSDPParamGroup.__init__: self._reduce_scatter_comm = DefaultReduceScatter()"),
    Claim("16-bench-fsdp2-flat-copies", "16_zero_fsdp", "c27a",
          "FSDP2 makes one call per layer where ours makes two (weight and bias\napart), and "
          "pays for it in copies", "source",
          "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py (torch 2.13): "
          "foreach_all_gather copies every parameter's shard into one flat all_gather_input "
          "(torch.ops.fsdp.all_gather_copy_in: torch._foreach_copy_), then one all_gather_comm "
          "call per parameter group; foreach_all_gather_copy_out splits the flat output into "
          "the parameters (split_with_sizes_copy); foreach_reduce fills one reduce_scatter_input "
          "(foreach_reduce_scatter_copy_in), then one reduce_scatter_comm call"),
    Claim("16-bench-fsdp2-hooks-and-dtensors", "16_zero_fsdp", "c27a",
          "it also runs its hooks around every\nlayer and keeps its parameters as DTensors",
          "source",
          "torch/distributed/fsdp/_fully_shard/_fsdp_state.py (torch 2.13), FSDPState: "
          "register_forward_pre_hook and register_forward_hook on each fully_shard'ed module; "
          "_fsdp_param.py, FSDPParam: self.sharded_param = nn.Parameter("
          "self.to_sharded_dtensor(sharded_param))"),
    Claim("16-bench-dtensor-dispatch", "16_zero_fsdp", "c27a",
          "goes\nthrough DTensor's dispatch, its sharding rules looked up for each operator",
          "source",
          "torch/distributed/tensor/_dispatch.py (torch 2.13), note in OpDispatcher: 'The "
          "entrypoint has been moved to C++, and it handles common cases and then calls back "
          "into OpDispatcher python to handle corner cases' (dispatchDTensorOp); "
          "_propagate_op_sharding_dispatch_slow_path on a C++ cache miss: "
          "sharding_propagator.propagate_op_sharding(op_info.schema)"),
    Claim("16-bench-fsdp2-gpu-streams", "16_zero_fsdp", "c27a",
          "separate streams for implicit prefetching", "source",
          "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py (torch 2.13), "
          "FSDPCommContext.get_all_gather_streams: for async_op=False in FORWARD or "
          "PRE_BACKWARD, '# Use separate streams for implicit prefetching', returns "
          "all_gather_copy_in_stream, all_gather_stream"),
    Claim("16-bench-cpu-stream-no-op", "16_zero_fsdp", "c27a",
          "its `wait_stream` does nothing", "source",
          "torch/cpu/__init__.py (torch 2.13), class Stream: 'N.B. This class only exists to "
          "facilitate device-agnostic code'; def wait_stream(self, stream) -> None: pass"),
    Claim("16-bench-fsdp2-sync-gather", "16_zero_fsdp", "c27a",
          "FSDP2 gathers with `async_op=False`", "source",
          "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py (torch 2.13), "
          "FSDPParamGroup.__init__: self.unshard_async_op: bool = False; pre_forward and "
          "pre_backward call self.unshard(self.unshard_async_op) -> foreach_all_gather(async_op) "
          "-> DefaultAllGather: dist.all_gather_single(..., async_op=async_op), which waits"),
    Claim("16-bench-needs-input-grad", "16_zero_fsdp", "c27a",
          "`ctx.needs_input_grad[0]` would say so", "source",
          "torch/autograd/function.py (torch 2.13), _SingleLevelFunction.backward's docstring: "
          "'It also has an attribute ctx.needs_input_grad as a tuple of booleans representing "
          "whether each input needs gradient'; the first layer's input, the batch, does not"),
    # 17 tensor parallel
    gloo("17-parallelize-module-dtensor", "17_tensor_parallel", "cell-27",
         "The parameters become `DTensor`s; `to_local()` is this\nrank's shard",
         "17-parallelize-module-functional"),
    gloo("17-functional-collectives-not-counted", "17_tensor_parallel", "cell-29",
         "the output is an `AsyncCollectiveTensor` of torch's functional\ncollectives",
         "17-parallelize-module-functional"),
    Claim("17-parallelize-module-same-output", "17_tensor_parallel", "in-detail",
          "torch's own `parallelize_module` gives the same output", "test",
          "tests/notebooks/test_17_tensor_parallel.py::test_tensor_parallel_notebook"),
    gloo("17-f-backward-needs-input-grad", "17_tensor_parallel", "cell-19",
         "without it autograd never calls *f*'s backward", "17-function-backward-needs-grad"),
    Claim("17-measured-is-model-plus-headers", "17_tensor_parallel", "cell-26",
          "Measured and model differ by gloo's headers", "test",
          "tests/notebooks/test_17_tensor_parallel.py::test_tensor_parallel_notebook"),
    Claim("17-gloo-header-per-message", "17_tensor_parallel", "cell-26",
          "every message gloo sends starts with a\n48-byte header", "test",
          "tests/helpers/test_wire.py::test_a_send_reads_its_bytes_plus_gloo_headers"),
    Claim("17-no-collective-no-bytes", "17_tensor_parallel", "cell-26",
          "A layer that\ncalls no collective writes nothing at all", "test",
          "tests/notebooks/test_17_tensor_parallel.py::test_tensor_parallel_notebook"),
    Claim("17-functional-bytes-measured", "17_tensor_parallel", "cell-29",
          "Their bytes are measured all the same", "test",
          "tests/notebooks/test_17_tensor_parallel.py::test_tensor_parallel_notebook"),
    Claim("17-torch-writes-the-same-bytes", "17_tensor_parallel", "torch-bytes-note",
          "torch's layers write what the hand-built model says, up to gloo's\nheaders", "test",
          "tests/notebooks/test_17_tensor_parallel.py::test_tensor_parallel_notebook"),
    Claim("17-remember-same-bytes", "17_tensor_parallel", "cell-41",
          "DTensor parameters and functional collectives, and writes the same bytes", "test",
          "tests/notebooks/test_17_tensor_parallel.py::test_tensor_parallel_notebook"),
    Claim("17-remember-header-per-message", "17_tensor_parallel", "cell-41",
          "gloo writes that plus a 48-byte header per\n  message", "test",
          "tests/notebooks/test_17_tensor_parallel.py::test_tensor_parallel_notebook"),
    Claim("17-nccl-ring-model-when-ring", "17_tensor_parallel", "cell-23",
          "what this rank sends when NCCL runs the call as a ring:\n  2(*n* − 1)/*n* × *S* "
          "for `all_reduce` (notebook 10), (*n* − 1)/*n* × *S* for `all_gather`", "source",
          "NVIDIA/nccl src/device/all_reduce.h runRing (2(n-1) steps of one chunk per rank), "
          "src/device/all_gather.h runRing (n-1 steps); nccl-tests doc/PERFORMANCE.md, "
          "AllReduce: 2(n-1)/n, AllGather: (n-1)/n"),
    Claim("17-nccl-tuner-algorithms", "17_tensor_parallel", "cell-23",
          "for an `all_reduce` also Tree\n  and, on suitable hardware, NVLS, NVLS Tree (across "
          "nodes), CollNet Direct and CollNet\n  Chain; for an `all_gather` also PAT (by default "
          "only with one GPU per node) and, on\n  suitable hardware, NVLS and CollNet Direct",
          "source",
          "NVIDIA/nccl src/graph/tuning.cc (v2.30.7-1, commit 5067397c), ncclTopoTuneModel "
          "line 298: AllReduce keeps every algorithm but PAT; lines 295-297: AllGather only "
          "PAT, RING, NVLS, COLLNET_DIRECT; ncclPatEnable lines 216-223 (PAT off by default "
          "unless nNodes == nRanks); line 309: NVLS and NVLS_TREE skipped with fewer than 2 "
          "NVLS channels; line 502: NVLS_TREE disabled when nNodes == 1; lines 503-510: "
          "CollNet Direct/Chain off without collnet support, Direct also without NVSwitches"),
    Claim("17-remember-ring-model-when-rings", "17_tensor_parallel", "cell-41",
          "the ring model is what NCCL sends when it runs the calls as rings, one of the\n  "
          "algorithms its tuner chooses from", "source",
          "NVIDIA/nccl src/device/all_reduce.h, all_gather.h runRing; src/graph/tuning.cc "
          "(commit 5067397c) ncclTopoTuneModel lines 294-298 (RING one candidate among "
          "several for AllReduce and AllGather)"),
    # 17: make bench's row (bench-speed)
    Claim("17-bench-one-collective-a-step", "17_tensor_parallel", "bench-speed",
          "each step calls one collective on both sides", "source",
          "torch/distributed/tensor/parallel/style.py (torch 2.13): RowwiseParallel's output "
          "Partial -> Replicate is g's all_reduce; ColwiseParallel's Replicate input would "
          "all_reduce its gradient only for an input that requires grad (hand side: case "
          "17-function-backward-needs-grad). Checked with CommDebugMode on 2 gloo ranks, "
          "Linear-Tanh-Linear under this plan, forward and backward: get_total_counts() == 1, "
          "one c10d_functional.all_reduce"),
    Claim("17-bench-dtensor-dispatch", "17_tensor_parallel", "bench-speed",
          "picks the output's\nplacement (cached), runs the operation on the local shard and "
          "wraps the result in a new\n`DTensor`", "source",
          "torch/distributed/tensor/_dispatch.py (torch 2.13): the note above "
          "_propagate_op_sharding_dispatch_slow_path, 'The entrypoint has been moved to C++, "
          "and it handles common cases and then calls back into OpDispatcher python to handle "
          "corner cases'; on a miss of the C++ cache, propagate_op_sharding (lru_cache in "
          "_sharding_prop.py); _dispatch_get_local_results_slow_path runs the op on the local "
          "tensors; the result is wrapped as DTensor"),
    Claim("17-bench-from-to-local", "17_tensor_parallel", "bench-speed",
          "input and output cross the autograd Functions `_FromTorchTensor` and "
          "`_ToTorchTensor`", "source",
          "torch/distributed/tensor/parallel/style.py (torch 2.13): ColwiseParallel and "
          "RowwiseParallel _prepare_input_fn call DTensor.from_local on a plain-tensor input, "
          "_prepare_output_fn returns outputs.to_local() (use_local_output=True by default); "
          "torch/distributed/tensor/_api.py: from_local returns _FromTorchTensor.apply(...), "
          "to_local _ToTorchTensor.apply(...). Counted on 2 gloo ranks for {'0': Colwise, "
          "'2': Rowwise}: 2 from_local and 2 to_local in the forward"),
    Claim("17-korthikanti-f-fbar-and-sp-g", "17_tensor_parallel", "cell-15",
          "call the same pair *f* and *f̄*, and give *g* to an operator of sequence "
          "parallelism (an\n`all_gather` forward, a `reduce_scatter` backward; notebook 20)",
          "source",
          "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer "
          "Models, arXiv 2205.05198, read in a stored copy of the paper's text: section "
          "4.2.1, Figure 4 caption 'Transformer layer with tensor parallelism. f and f̄ are "
          "conjugate. f is no operation in the forward pass and all-reduce in the backward "
          "pass. f̄ is all-reduce in the forward pass and no operation in the backward pass.'; "
          "section 4.2.2, Figure 5 caption 'Transformer layer with tensor and sequence "
          "parallelism. g and ḡ are conjugate. g is all-gather in the forward pass and "
          "reduce-scatter in the backward pass. ḡ is reduce-scatter in forward pass and "
          "all-gather in backward pass.'"),
    # 18 pipeline parallel
    Claim("18-gpipe-figure-2c", "18_pipeline_parallel", "cell-06",
          "In GPipe (Huang et al. 2019, <https://arxiv.org/abs/1811.06965>,\nFigure 2c)",
          "source",
          "Huang et al. 2019, GPipe: Efficient Training of Giant Neural Networks using "
          "Pipeline Parallelism, arXiv 1811.06965, read in a stored copy of the paper's text: "
          "Figure 2 caption '(c) Pipeline parallelism divides the input mini-batch into "
          "smaller micro-batches, enabling different accelerators to work on different "
          "micro-batches simultaneously. Gradients are applied synchronously at the end.'; "
          "section 2.3: 'Figure 2(c) assumes partitions are evenly balanced.'"),
    Claim("18-gpipe-bubble-section-2-3", "18_pipeline_parallel", "cell-06",
          "(the paper's section 2.3\ngives it as O((*K* − 1)/(*M* + *K* − 1)), with *K* "
          "partitions and *M* micro-batches)", "source",
          "Huang et al. 2019, GPipe, arXiv 1811.06965, read in a stored copy of the paper's "
          "text: section 2.3 'Performance Optimization': 'As illustrated in Figure 2(c), "
          "partitioning introduces some idle time per accelerator, which we refer to as the "
          "bubble overhead. This bubble time is O((K-1)/(M+K-1)) amortized over the number of "
          "micro-steps M.'; section 2.2: 'GPipe partitions the network into K cells', 'divides "
          "every mini-batch of size N into M equal micro-batches'"),
    Claim("18-pipedream-flush-in-flight", "18_pipeline_parallel", "cell-11",
          "micro-batches are in flight on stage *s*, instead of *m*: that is what 1F1B saves\n"
          "(Narayanan et al. 2021, <https://arxiv.org/abs/2104.04473>, section 2.2.1)",
          "source",
          "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU "
          "Clusters Using Megatron-LM, arXiv 2104.04473, read in a stored copy of the paper's "
          "text: section 2.2.1 'Default Schedule': 'Instead, we use the PipeDream-Flush "
          "schedule [30]. In this schedule, we first enter a warm-up phase where workers "
          "perform differing numbers of forward passes as shown in Figure 4 (top). This "
          "schedule limits the number of in-flight microbatches (the number of microbatches "
          "for which the backward pass is outstanding and activations need to be maintained) "
          "to the depth of the pipeline, instead of the number of microbatches in a batch.'; "
          "'this schedule requires activations to be stashed for p or fewer microbatches "
          "(compared to m microbatches for the GPipe schedule)'. The per-stage count p − s is "
          "the notebook's (its warm-up of p − 1 − s forwards), not a sentence of the paper"),
    gloo("18-gloo-send-waits-for-recv", "18_pipeline_parallel", "cell-28",
         "on gloo a\n`send` waits for the matching `recv` (notebook 09): neither returns",
         "both-send-first"),
    gloo("18-blocking-send-includes-wait", "18_pipeline_parallel", "cell-15",
         "on gloo it returns once the receiver has taken the data", "both-send-first"),
    Claim("18-gpipe-blocking-safe", "18_pipeline_parallel", "cell-09",
          "Blocking `send` and `recv` are safe here", "test",
          "tests/notebooks/test_18_pipeline_parallel.py::test_pipeline_parallel_notebook"),
    gloo("18-two-blocking-sends-deadlock", "18_pipeline_parallel", "cell-11",
         "written with two blocking calls this deadlocks", "both-send-first"),
    Claim("18-batched-pair-no-deadlock", "18_pipeline_parallel", "cell-30",
          "The schedule above does not deadlock because each such pair of transfers is one\n"
          "`batch_isend_irecv`", "test",
          "tests/notebooks/test_18_pipeline_parallel.py::test_pipeline_parallel_notebook"),
    gloo("18-gpipe-scale-grads", "18_pipeline_parallel", "cell-25",
         "By default (`scale_grads=True`) it divides the gradients\nby *m*"),
    gloo("18-torch-runs-same-schedules", "18_pipeline_parallel", "cell-33",
         "which computes in the same order as our 1F1B (at most *p* − *s* in flight on "
         "stage *s*)",
         "18-torch-schedule-order"),
    gloo("18-torch-1f1b-warmup-then-1b1f", "18_pipeline_parallel", "torch-1f1b-note",
         "stage *s* first runs min(*m*, *p* − *s*) forwards\n(its warm-up), then repeats *one "
         "backward, then one forward*", "18-torch-schedule-order"),
    gloo("18-torch-1f1b-refuses-m-below-p", "18_pipeline_parallel", "torch-1f1b-refuses",
         "torch's refuses it\nwhen the schedule is built, on every rank, before anything is sent",
         "18-torch-schedule-order"),
    Claim("18-torch-1f1b-same-order-as-ours", "18_pipeline_parallel", "torch-1f1b-read",
          "So the two compute in the same order on every stage", "test",
          "tests/notebooks/test_18_pipeline_parallel.py::test_pipeline_parallel_notebook"),
    Claim("18-paced-bubble-falls-with-m", "18_pipeline_parallel", "paced-read",
          "With stages that leave the cores free, the measured bubble falls as *m* grows, as "
          "the\nformula says", "test",
          "tests/notebooks/test_18_pipeline_parallel.py::test_pipeline_parallel_notebook"),
    Claim("18-send-writes-s-plus-96", "18_pipeline_parallel", "bytes-read",
          "a `send` of *S* bytes\nwrites *S* + 96 bytes on the sender and 48 on the receiver",
          "test", "tests/helpers/test_wire.py::test_a_send_reads_its_bytes_plus_gloo_headers"),
    Claim("18-batched-same-headers", "18_pipeline_parallel", "bytes-read",
          "blocking or batched in `batch_isend_irecv` alike", "test",
          "tests/notebooks/test_18_pipeline_parallel.py::test_pipeline_parallel_notebook"),
    Claim("18-schedules-send-the-same-bytes", "18_pipeline_parallel", "bytes-read",
          "The two schedules send\nthe same bytes", "test",
          "tests/notebooks/test_18_pipeline_parallel.py::test_pipeline_parallel_notebook"),
    Claim("18-remember-more-microbatches-more-headers", "18_pipeline_parallel", "cell-33",
          "gloo adds a 48-byte header\n  per message, so more micro-batches write a little more",
          "test", "tests/notebooks/test_18_pipeline_parallel.py::test_pipeline_parallel_notebook"),
    gloo("18-remember-torch-refuses-m-below-p", "18_pipeline_parallel", "cell-33",
         "then \"1B1F\" steps, and refuses\n  *m* < *p*", "18-torch-schedule-order"),
    Claim("18-torch-gpipe-same-loss", "18_pipeline_parallel", "in-detail",
          "`torch.distributed.pipelining.ScheduleGPipe` on the same stages gives the same loss",
          "test", "tests/notebooks/test_18_pipeline_parallel.py::test_pipeline_parallel_notebook"),
    Claim("18-cuda-async", "18_pipeline_parallel", "cell-07",
          "CUDA work is launched asynchronously", "source",
          "torch docs, CUDA semantics: Asynchronous execution (notes/cuda.html)"),
    # 18: make bench's row (bench-vs-torch-md)
    Claim("18-bench-gpipe-waits-sends-late", "18_pipeline_parallel", "bench-vs-torch-md",
          "`ScheduleGPipe` sends each forward's output with\n`isend` and waits for those sends "
          "only before its first backward", "source",
          "torch/distributed/pipelining/schedules.py (torch 2.13), ScheduleGPipe."
          "_step_microbatches: fwd_sends_to_wait.extend(...) after each forward, then '# Wait "
          "for all forward sends to finish' before the backward loop; _batch_p2p calls p.op "
          "(dist.isend) directly for an all-send batch"),
    gloo("18-bench-blocking-send-waits", "18_pipeline_parallel", "bench-vs-torch-md",
         "our blocking\n`send` waits for the next stage to take the data", "both-send-first"),
    Claim("18-bench-1f1b-batches", "18_pipeline_parallel", "bench-vs-torch-md",
          "`Schedule1F1B` pairs its sends and\nreceives in batches", "source",
          "torch/distributed/pipelining/schedules.py (torch 2.13), Schedule1F1B."
          "_step_microbatches: _batch_p2p(fwd_sends + bwd_recvs, desc='fwd_send_bwd_recv') and "
          "_batch_p2p(bwd_sends + fwd_recvs, desc='bwd_send_fwd_recv'): "
          "dist.batch_isend_irecv for a mixed batch"),
    Claim("18-bench-p2pop-lists", "18_pipeline_parallel", "bench-vs-torch-md",
          "a list of `P2POp`s built for each transfer", "source",
          "torch/distributed/pipelining/stage.py (torch 2.13): get_fwd_recv_ops, "
          "get_fwd_send_ops, get_bwd_recv_ops, get_bwd_send_ops return list[dist.P2POp], "
          "called per micro-batch by the schedules' _step_microbatches"),
    Claim("18-bench-last-stage-outputs-kept", "18_pipeline_parallel", "bench-vs-torch-md",
          "the last stage's outputs kept", "source",
          "torch/distributed/pipelining/stage.py (torch 2.13), forward_one_chunk: 'if "
          "self.is_last and save_forward_output: self.output_chunks.append(output)'; "
          "schedules.py step(..., return_outputs=True)"),
    Claim("18-bench-scale-grads", "18_pipeline_parallel", "bench-vs-torch-md",
          "every gradient\ndivided by *m* after the backwards", "source",
          "torch/distributed/pipelining/schedules.py (torch 2.13): _step_microbatches ends "
          "with self._stage.perform_reduce_grad(self._n_microbatches if self.scale_grads else "
          "1), scale_grads=True by default; stage.py scale_grads: p.grad.div_(grad_scale_factor) "
          "for every parameter"),
    # 19 2-D parallel
    gloo("19-mesh-row-by-row", "19_two_d_parallel", "cell-04",
         "lays the ranks\nout row by row", "14-device-mesh-row-major"),
    gloo("19-f-only-when-input-needs-grad", "19_two_d_parallel", "cell-11",
         "*f*'s `all_reduce` only runs when the\nlayer's input needs a gradient",
         "17-function-backward-needs-grad"),
    Claim("19-plan-matches-record", "19_two_d_parallel", "cell-11",
          "Backward, nothing", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    Claim("19-wrong-group-silent", "19_two_d_parallel", "cell-20",
          "the shapes match (every\nrank's `W1` shard has the same shape), so nothing fails",
          "test", "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    Claim("19-nccl-ring-model-when-ring", "19_two_d_parallel", "step-bytes-note",
          "what NCCL\nsends when it runs the call as a ring (one of the algorithms its tuner "
          "chooses from", "source",
          "NVIDIA/nccl src/device/all_reduce.h runRing (2(n-1) steps of one chunk per rank); "
          "src/graph/tuning.cc (commit 5067397c) ncclTopoTuneModel line 298 (AllReduce: every "
          "algorithm but PAT a candidate)"),
    Claim("19-one-rank-group-sends-nothing", "19_two_d_parallel", "step-bytes-read",
          "A data-parallel group of one rank (the\n1 × *n* meshes) sends nothing at all", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    Claim("19-headers-outweigh-small-shards", "19_two_d_parallel", "step-bytes-read",
          "gloo's 48-byte headers, which the model leaves out, weigh as much as the data\nor more",
          "test", "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    gloo("19-remember-fewer-larger-calls", "19_two_d_parallel", "cell-26",
         "Such small calls pay\n  gloo's headers more than their data: fewer, larger calls send "
         "fewer bytes", "19-fewer-calls-fewer-bytes"),
    gloo("19-one-flat-call-fewer-headers", "19_two_d_parallel", "step-bytes-read",
         "the same all-reduced bytes in one flat tensor would pay for one call's\nheaders "
         "instead of four", "19-fewer-calls-fewer-bytes"),
    gloo("19-ddp-broadcasts-when-built", "19_two_d_parallel", "cell-25",
         "`DistributedDataParallel` broadcasts rank 0's parameters when it is built"),
    gloo("19-ddp-gathers-shapes-when-built", "19_two_d_parallel", "cell-25",
         "gathers every rank's parameter shapes to check they agree", "19-map-torch-apis"),
    gloo("19-parallelize-module-scatters", "19_two_d_parallel", "cell-25",
         "`parallelize_module` scatters each sharded weight from rank 0", "19-map-torch-apis"),
    gloo("19-parallelize-module-broadcasts", "19_two_d_parallel", "cell-25",
         "`parallelize_module` broadcasts the replicated parameter", "19-map-torch-apis"),
    gloo("19-fsdp2-reduce-scatter-as-all-reduce", "19_two_d_parallel", "cell-25",
         "FSDP2's reduce_scatter, which gloo runs as an all_reduce", "19-map-torch-apis"),
    Claim("19-map-rows-true", "19_two_d_parallel", "cell-25",
          "| gather (02) | — | not used in 14–19 |", "test",
          "tests/claims/test_map_of_the_series.py::test_the_map_of_19_is_true_for_14_to_19"),
    # 19 extended: torch's own 2-D composition
    gloo("19-fsdp2-cuts-tp-piece-by-rows", "19_two_d_parallel", "torch-2d",
         "cuts each rank's tensor-parallel piece again, by rows, over the column",
         "19-torch-2d-composition"),
    gloo("19-counter-sees-fsdp2-calls", "19_two_d_parallel", "torch-2d",
         "`count_collectives`, which\nsees FSDP2's own `dist.*` calls", "19-torch-2d-composition"),
    gloo("19-fsdp2-warns-output-view", "19_two_d_parallel", "torch-2d-train",
         "FSDP2 warns that the model's output is a view: an in-place op on it would skip its "
         "hook", "19-torch-2d-composition"),
    gloo("19-w1-placements", "19_two_d_parallel", "torch-2d-pieces",
         "`Shard(dim=0)` on \"tp\" is\n`ColwiseParallel`'s rows; on \"dp\" FSDP2's rows of those "
         "rows, which DTensor writes\n`_StridedShard`", "19-torch-2d-composition"),
    gloo("19-w1-one-over-world-size", "19_two_d_parallel", "torch-2d-pieces",
         "Each rank keeps `1 / world_size` of `W1`'s rows", "19-torch-2d-composition"),
    gloo("19-adamw-also-equal", "19_two_d_parallel", "torch-2d-pieces",
         "With AdamW in\nplace of SGD the composition also equals one process, at 1 × 2, 2 × 1, "
         "1 × 4 and 2 × 2\nafter 3 steps", "19-torch-2d-composition"),
    gloo("19-fsdp2-one-flat-all-gather", "19_two_d_parallel", "torch-2d-calls-note",
         "FSDP2 all-gathers the four\npieces over the **column** in one flat "
         "`all_gather_single`", "19-torch-2d-composition"),
    gloo("19-fsdp2-one-flat-reduce-scatter", "19_two_d_parallel", "torch-2d-calls-note",
         "in the backward FSDP2\nreduce-scatters the four gradients over the column in one flat "
         "`reduce_scatter_single`", "19-torch-2d-composition"),
    Claim("19-torch-step-as-expected", "19_two_d_parallel", "torch-2d-calls-note",
          "and the optimizer step calls nothing", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    gloo("19-fsdp2-silent-on-one-rank", "19_two_d_parallel", "torch-2d-dp1",
         "FSDP2 then calls no collective at all", "19-torch-2d-composition"),
    Claim("19-fsdp2-why-silent-on-one-rank", "19_two_d_parallel", "torch-2d-dp1",
          "its `unshard` skips the all_gather on a group of\none rank, and `foreach_reduce` "
          "copies the gradients instead of reduce-scattering them", "source",
          "torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, "
          "FSDPParamGroup.unshard: `if world_size == 1:` sets the result and returns before "
          "foreach_all_gather; _fsdp_collectives.py, foreach_reduce: `if world_size > 1:` "
          "reduce_scatter_comm(...), else `reduce_output.copy_(...)`"),
    Claim("19-hand-built-calls-on-one-rank", "19_two_d_parallel", "torch-2d-dp1",
          "where the hand-built step still calls four `all_reduce`s that send 0 B", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    Claim("19-functional-call-no-own-bytes", "19_two_d_parallel", "torch-2d-bytes-note",
          "FSDP2's calls have bytes of their own, read around each call as for the hand-built\n"
          "step; DTensor's functional `all_reduce` has none", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    Claim("19-row-same-bytes", "19_two_d_parallel", "torch-2d-bytes-read",
          "On the row, the same call, by hand and in DTensor: one `all_reduce`\nof the output "
          "(*g*), the same bytes", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    gloo("19-gloo-reduce-scatter-writes-all-reduce", "19_two_d_parallel", "torch-2d-bytes-read",
         "gloo's reduce_scatter writes what an all_reduce writes",
         "11-reduce-scatter-writes-an-all-reduce"),
    Claim("19-four-calls-headers-vs-two", "19_two_d_parallel", "torch-2d-bytes-read",
          "the hand-built step pays the headers of four calls, torch's of two", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    Claim("19-nothing-to-other-ranks", "19_two_d_parallel", "torch-2d-bytes-read",
          "Nothing goes to any other rank.", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    Claim("19-map-src-data-rank-per-mesh-dim", "19_two_d_parallel", "cell-25",
          "group rank 0 on each mesh dimension; in 19 each row's first rank", "source",
          "torch 2.13 torch/distributed/tensor/_api.py, distribute_tensor's docstring: "
          "src_data_rank \"By default, we use ``group_rank=0`` on each DeviceMesh dimension as "
          "the source data\"; 19's rows are mesh[\"tp\"], laid out row by row "
          "(19-mesh-row-by-row)"),
    gloo("19-map-fully-shard-gathers", "19_two_d_parallel", "cell-25",
         "19: `fully_shard` gathers each rank's tensor-parallel pieces over the column before "
         "the forward", "19-torch-2d-composition"),
    gloo("19-map-fully-shard-reduce-scatters", "19_two_d_parallel", "cell-25",
         "19: `fully_shard` reduce-scatters the gradients over the column",
         "19-torch-2d-composition"),
    Claim("19-torch-same-parameters", "19_two_d_parallel", "cell-26",
          "and ends with the same parameters", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    gloo("19-remember-fsdp2-calls", "19_two_d_parallel", "cell-26",
         "On a column of 2+ ranks FSDP2 calls\n  one `all_gather` before the forward and one "
         "`reduce_scatter` in the backward", "19-torch-2d-composition"),
    Claim("19-remember-fewer-bytes-at-2x2", "19_two_d_parallel", "cell-26",
          "it still wrote fewer bytes than the hand-built step at\n  2 × 2", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    gloo("19-remember-one-rank-column-silent", "19_two_d_parallel", "cell-26",
         "On a column of one rank it calls\n  nothing", "19-torch-2d-composition"),
    Claim("19-remember-fsdp2-keeps-one-dp-part", "19_two_d_parallel", "cell-26",
          "Each rank keeps only its 1/dp part of its shard between steps", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    Claim("19-holds-fsdp2-part-of-rows", "19_two_d_parallel", "torch-2d-holds-note",
          "with FSDP2 on top, a part of those rows only, the rest gathered from the column "
          "when the forward needs them", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    Claim("19-learn-torch-same-parameters", "19_two_d_parallel", "in-detail",
          "the same parameters after the same steps", "test",
          "tests/notebooks/test_19_two_d_parallel.py::test_two_d_notebook"),
    # 20 tensor and sequence parallelism on the block
    Claim("20-korthikanti-figures-4-5", "20_tensor_sequence_parallel", "c06",
          "Figures 4 and 5 of Korthikanti et al., *Reducing Activation Recomputation in Large\n"
          "Transformer Models*", "source",
          "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer "
          "Models, arXiv 2205.05198, read in a stored copy of the paper's text: 'Figure 4: "
          "Transformer layer with tensor parallelism.' (section 4.2.1); 'Figure 5: "
          "Transformer layer with tensor and sequence parallelism.' (section 4.2.2), which "
          "says 'in the non-tensor parallel regions of a transformer layer, the operations "
          "are independent along the sequence dimension. This characteristic allows us to "
          "partition these regions along the sequence dimension s'"),
    Claim("20-korthikanti-f-fbar", "20_tensor_sequence_parallel", "c06",
          "Korthikanti et al. call this pair *f*\n  and *f̄*.", "source",
          "Korthikanti et al. 2022, arXiv 2205.05198, section 4.2.1 'Tensor Parallelism': "
          "'We use tensor parallelism developed by Shoeybi, et.al.[19] and parallelize the "
          "attention as well as MLP blocks as shown in Figure 4. This form of parallelism "
          "introduces two additional communication operations f and f̄.'; Figure 4 caption "
          "'f and f̄ are conjugate. f is no operation in the forward pass and all-reduce in "
          "the backward pass. f̄ is all-reduce in the forward pass and no operation in the "
          "backward pass.'"),
    Claim("20-korthikanti-g-gbar", "20_tensor_sequence_parallel", "c06",
          "*g*, before a tensor-parallel region, an `all_gather` along the sequence forward\n"
          "  and a `reduce_scatter` backward; *ḡ*, after it, a `reduce_scatter` forward and "
          "an\n  `all_gather` backward", "source",
          "Korthikanti et al. 2022, arXiv 2205.05198, section 4.2.2 'Sequence Parallelism': "
          "'we combine these operations with the f and f̄ operators and introduce new "
          "operations g and ḡ as shown in Figure 5. As it can be seen, g and ḡ are the "
          "converters between sequence and tensor parallel regions.'; 'This implies that g "
          "is an all-gather operation along the sequence dimension in the forward pass'; 'g "
          "and ḡ are conjugate of each other. g is an all-gather in the forward pass and a "
          "reduce-scatter in the backward pass, and ḡ is a reduce-scatter in the forward "
          "pass and an all-gather in the backward pass.'"),
    gloo("20-single-collectives-cut-dim-0", "20_tensor_sequence_parallel", "c19",
         "`dist.all_gather_single` and `dist.reduce_scatter_single` (notebooks 06, 07) join "
         "and cut\nalong dim 0"),
    gloo("20-tensor-forms-deprecated", "20_tensor_sequence_parallel", "c20a",
         "still\nrun on gloo in this torch, with a warning that they are deprecated in favour "
         "of these two"),
    gloo("20-gloo-reduce-scatter-as-all-reduce", "20_tensor_sequence_parallel", "c36",
         "`reduce_scatter_single` writes exactly what an `all_reduce` of the same input writes",
         "20-gloo-reduce-scatter-writes-all-reduce-bytes"),
    Claim("20-sp-sends-more-on-gloo", "20_tensor_sequence_parallel", "c36",
          "sequence parallelism sends about\n1.5× what tensor parallelism sends", "test",
          "tests/notebooks/test_20_tensor_sequence_parallel.py::test_tensor_sequence_parallel_notebook"),
    Claim("20-nccl-ring-model-where-ring", "20_tensor_sequence_parallel", "c36",
          "On NCCL the ring model is the figure where NCCL runs the calls as rings", "source",
          "NVIDIA/nccl src/device/reduce_scatter.h runRing (n-1 sends of one chunk per rank); "
          "nccl-tests doc/PERFORMANCE.md, ReduceScatter: (n-1)/n"),
    Claim("20-nccl-reduce-scatter-algorithms", "20_tensor_sequence_parallel", "c36",
          "a ring is not its only choice: for a `reduce_scatter` its tuning model chooses "
          "among Ring, PAT (since NCCL 2.23; by default only with one GPU per node) and, on "
          "suitable hardware, NVLS and CollNet Direct", "source",
          "NVIDIA/nccl src/graph/tuning.cc (v2.30.7-1, commit 5067397c), ncclTopoTuneModel "
          "lines 295-297: for ncclFuncReduceScatter (and AllGather) every algorithm but "
          "NCCL_ALGO_PAT, RING, NVLS and COLLNET_DIRECT is skipped; ncclPatEnable lines "
          "216-223: with NCCL_PAT_ENABLE at its default (2) PAT is off unless nNodes == "
          "nRanks ('PAT only supports 1 GPU per node'); line 309: NVLS skipped with fewer "
          "than 2 NVLS channels (src/transport/nvls.cc: nvlsSupport from "
          "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED); lines 503-510: CollNet Direct off "
          "without collnet support or NVSwitches. PAT first in v2.23.4-1 (v2.22.3-1 "
          "tuning.cc line 166: Ring, NVLS, CollNet Direct only)"),
    gloo("20-dtensor-shape-is-the-whole", "20_tensor_sequence_parallel", "c37",
         "a `DTensor`'s shape is the *whole* tensor's", "20-dtensor-shape-is-global"),
    Claim("20-torchtitan-heads-minus-one", "20_tensor_sequence_parallel", "c37",
          "torchtitan's attention\ninstead reshapes `q` with `-1` heads and a fixed head size",
          "source", "pytorch/torchtitan torchtitan/models/llama3/model/model.py, "
          "Attention.forward: xq.view(bs, seqlen, -1, self.head_dim), 'Use -1 instead of "
          "n_heads ... to infer the actual local heads ... as TP may have sharded them'"),
    Claim("20-torchtitan-prepare-module-input", "20_tensor_sequence_parallel", "c37",
          "as\ntorchtitan's plan for Llama does", "source",
          "pytorch/torchtitan torchtitan/models/llama3/infra/parallelize.py, apply_tp: "
          "\"attention\": prepare_module_input(input_layouts=(Shard(1), None), "
          "desired_input_layouts=(Replicate(), None)), then colwise wq/wk/wv, rowwise wo "
          "with output_layouts=Shard(1)"),
    Claim("20-prepare-module-input-gathers-once", "20_tensor_sequence_parallel", "c37",
          "`PrepareModuleInput` gathers the attention's input once for `q`, `k` and `v`",
          "test",
          "tests/notebooks/test_20_tensor_sequence_parallel.py::test_tensor_sequence_parallel_notebook"),
    gloo("20-torch-layernorm-grads-partial", "20_tensor_sequence_parallel", "c40",
         "torch's LayerNorm gradients come back as `Partial(sum)` `DTensor`s",
         "20-sequence-parallel-layernorm-grad-partial"),
    gloo("20-full-tensor-sums-partial", "20_tensor_sequence_parallel", "c40",
         "`full_tensor()` sums them", "20-sequence-parallel-layernorm-grad-partial"),
    Claim("20-torch-biases-replicate-whole", "20_tensor_sequence_parallel", "c40",
          "the biases of `o` and `fc2` come back `Replicate()`, whole", "test",
          "tests/notebooks/test_20_tensor_sequence_parallel.py::test_tensor_sequence_parallel_notebook"),
    Claim("20-counter-sees-no-torch-call", "20_tensor_sequence_parallel", "c44",
          "The counter sees none of torch's calls", "test",
          "tests/notebooks/test_20_tensor_sequence_parallel.py::test_tensor_sequence_parallel_notebook"),
    Claim("20-torch-writes-the-hand-built-bytes", "20_tensor_sequence_parallel", "c44",
          "phase by phase, what the\nhand-built sequence-parallel block's calls write on gloo",
          "test",
          "tests/notebooks/test_20_tensor_sequence_parallel.py::test_tensor_sequence_parallel_notebook"),
    Claim("20-torch-same-outputs-gradients-bytes", "20_tensor_sequence_parallel", "in-detail",
          "the same outputs, gradients and bytes", "test",
          "tests/notebooks/test_20_tensor_sequence_parallel.py::test_tensor_sequence_parallel_notebook"),
    gloo("20-dtensor-heads-counted-whole", "20_tensor_sequence_parallel", "c45",
         "Under `parallelize_module` the weights are `DTensor`s, whose shape is the\nwhole "
         "weight's, so it counts 12 heads", "20-global-shape-heads-wrong"),
    gloo("20-heads-wrong-at-2-and-4-fail-at-3", "20_tensor_sequence_parallel", "c47",
         "At 2 and 4 ranks this runs and is wrong", "20-global-shape-heads-wrong"),
    Claim("20-megatron-all-reduces-sp-grads", "20_tensor_sequence_parallel", "c25",
          "Megatron-LM does the same for the parameters it marks\n`sequence_parallel`", "source",
          "NVIDIA/Megatron-LM megatron/core/distributed/finalize_model_grads.py, "
          "_allreduce_layernorm_grads: with config.sequence_parallel, all-reduces over the "
          "tensor-parallel group the grads of parameters whose `sequence_parallel` is set"),
    Claim("20-megatron-gathers-again-in-backward", "20_tensor_sequence_parallel", "c32",
          "keep only\nthe rank's shard of it and gather it again in the backward pass", "source",
          "Korthikanti et al. 2022, arXiv:2205.05198, section 4.2.2; NVIDIA/Megatron-LM "
          "megatron/core/tensor_parallel/layers.py, "
          "LinearWithGradAccumulationAndAsyncCommunication.backward: with sequence_parallel, "
          "all-gathers the saved input shard again before the weight gradient"),
    Claim("20-saved-tensors-hooks-see-every-save", "20_tensor_sequence_parallel", "c29",
          "sees every tensor saved during the forward pass", "test",
          "tests/helpers/test_sequence_parallel.py::test_the_meter_counts_what_a_layernorm_saves"),
    gloo("20-remember-gloo-reduce-scatter", "20_tensor_sequence_parallel", "c52",
         "gloo's `reduce_scatter` writes an\n  `all_reduce`'s bytes",
         "20-gloo-reduce-scatter-writes-all-reduce-bytes"),
    gloo("20-remember-torch-partial", "20_tensor_sequence_parallel", "c52",
         "torch returns the LayerNorms' gradients as\n  `Partial(sum)` `DTensor`s, to be summed",
         "20-sequence-parallel-layernorm-grad-partial"),
    Claim("20-remember-torch-biases-replicate", "20_tensor_sequence_parallel", "c52",
          "and the two biases' as `Replicate()`, whole", "test",
          "tests/notebooks/test_20_tensor_sequence_parallel.py::test_tensor_sequence_parallel_notebook"),
    # 20: make bench's rows (bench-speed)
    Claim("20-bench-dtensor-dispatch", "20_tensor_sequence_parallel", "bench-speed",
          "every operation on a `DTensor` goes through DTensor's dispatch, which picks\nthe "
          "output's placement (cached)", "source",
          "torch/distributed/tensor/_dispatch.py (torch 2.13): the note above "
          "_propagate_op_sharding_dispatch_slow_path (C++ entrypoint dispatchDTensorOp, calling "
          "back into Python on a cache miss: propagate_op_sharding); "
          "_dispatch_get_local_results_slow_path runs the op on the local tensors"),
    Claim("20-bench-sp-layernorm-dtensor", "20_tensor_sequence_parallel", "bench-speed",
          "its LayerNorms' parameters are `DTensor`s too", "source",
          "torch/distributed/tensor/parallel/style.py (torch 2.13), "
          "SequenceParallel._replicate_module_fn: each parameter replaced by "
          "nn.Parameter(DTensor.from_local(param, device_mesh, [Replicate()], run_check=False))"),
    # 21 context parallelism: ring attention
    Claim("21-online-softmax-milakov", "21_context_parallel", "cell-08",
          "is the **online softmax** of Milakov and Gimelshein\n(2018, *Online normalizer "
          "calculation for softmax*, <https://arxiv.org/abs/1805.02867>):\none pass keeps a "
          "running max and a running sum, the sum rescaled whenever the max grows", "source",
          "Milakov and Gimelshein 2018, Online normalizer calculation for softmax, arXiv "
          "1805.02867, read in a stored copy of the paper's text: section 3 'Online "
          "normalizer calculation': 'The algorithm 3 calculates both the maximum value m and "
          "the normalization term d in a single pass over input vector'; Algorithm 3 'Safe "
          "softmax with online normalizer calculation', lines 4-5: m_j ← max(m_{j-1}, x_j), "
          "d_j ← d_{j-1} × e^{m_{j-1} - m_j} + e^{x_j - m_j}; 'At each iteration it needs to "
          "adjust the normalizer d to the new maximum m_j and only then add new value to the "
          "normalizer.'; 'In the remainder of this paper we will call algorithm 3 \"Online "
          "Softmax\".'"),
    Claim("21-flashattention-reuses-online-softmax", "21_context_parallel", "cell-08",
          "reuses it to compute attention tile\nby tile", "source",
          "Dao et al. 2022, FlashAttention: Fast and Memory-Efficient Exact Attention with "
          "IO-Awareness, arXiv 2205.14135, read in a stored copy of the paper's text: section "
          "3.1 'An Efficient Attention Algorithm With Tiling and Recomputation', 'Tiling. We "
          "compute attention by blocks. Softmax couples columns of K, so we decompose the "
          "large softmax with scaling [51, 60, 66].'; 'Therefore if we keep track of some "
          "extra statistics (m(x), ℓ(x)), we can compute softmax one block at a time.'; its "
          "reference [60]: 'Maxim Milakov and Natalia Gimelshein. Online normalizer "
          "calculation for softmax. arXiv preprint arXiv:1805.02867, 2018.'"),
    gloo("21-cp-all-gathers-k-and-v", "21_context_parallel", "in-detail",
         "it all-gathers K and V instead of passing them\n  round a ring, and it refuses the "
         "causal mask", "21-context-parallel-on-gloo"),
    gloo("21-cp-shards-zigzag", "21_context_parallel", "cell-36",
         "With a sequence that splits into 2*n* chunks it first reorders it, rank *r*\nkeeping "
         "chunks *r* and 2*n* − 1 − *r*, our zig-zag", "21-context-parallel-on-gloo"),
    gloo("21-cp-shards-buffers-in-context", "21_context_parallel", "cell-36",
         "inside the context it shards the given buffers along the sequence",
         "21-context-parallel-on-gloo"),
    gloo("21-cp-causal-raises", "21_context_parallel", "cell-42",
         "`is_causal=True` the call raises with each of the two SDPA kernels the CPU has",
         "21-context-parallel-on-gloo"),
    gloo("21-cp-causal-flash-no-strategy", "21_context_parallel", "cell-42",
         "The\ndefault choice here, the CPU's flash kernel "
         "(`_scaled_dot_product_flash_attention_for_cpu`),\nraises a `NotImplementedError` "
         "(no sharding strategy for it)", "21-context-parallel-on-gloo"),
    gloo("21-cp-causal-math-runtime-error", "21_context_parallel", "cell-42",
         "the MATH kernel raises a\n`RuntimeError` (an `add` of a plain tensor to DTensors)",
         "21-context-parallel-on-gloo"),
    gloo("21-cpu-no-efficient-cudnn", "21_context_parallel", "cell-42",
         "The memory-efficient and cuDNN\nkernels, which `context_parallel` has a ring version "
         "of, do not run on the CPU at all", "21-context-parallel-on-gloo"),
    gloo("21-remember-cp-on-gloo", "21_context_parallel", "cell-54",
         "not causal with the MATH kernel it all-gathers\n  K and V", "21-context-parallel-on-gloo"),
    gloo("21-remember-cp-causal-raises", "21_context_parallel", "cell-54",
         "causal, it\n  raises, with both CPU kernels (flash: `NotImplementedError`; MATH: "
         "`RuntimeError`)", "21-context-parallel-on-gloo"),
    Claim("21-commdebugmode-lists-functional", "21_context_parallel", "cell-36",
          "DTensor's own counter, `CommDebugMode`,\nlists the collectives it runs", "test",
          "tests/notebooks/test_21_context_parallel.py::test_context_parallel_notebook"),
    Claim("21-functional-not-counted-but-measured", "21_context_parallel", "cell-36",
          "`count_collectives` measures the bytes all the same", "test",
          "tests/notebooks/test_21_context_parallel.py::test_context_parallel_notebook"),
    Claim("21-ring-equals-full-attention", "21_context_parallel", "cell-54",
          "The\n  result equals full attention, to rounding", "test",
          "tests/notebooks/test_21_context_parallel.py::test_context_parallel_notebook"),
    Claim("21-ring-gloo-exact-p2p-bytes", "21_context_parallel", "cell-39",
          "(*S* + 96 B a send, 48 B a receive)", "test",
          "tests/helpers/test_wire.py::test_a_send_reads_its_bytes_plus_gloo_headers"),
    Claim("21-ring-bytes-measured-exactly", "21_context_parallel", "cell-39",
          "The check below holds the ring to the exact count gloo writes", "test",
          "tests/notebooks/test_21_context_parallel.py::test_context_parallel_notebook"),
    Claim("21-remember-gloo-headers", "21_context_parallel", "cell-54",
          "gloo adds 96 B a send and 48 B a\n  receive", "test",
          "tests/helpers/test_wire.py::test_a_send_reads_its_bytes_plus_gloo_headers"),
    Claim("21-all-gathers-agree-with-model", "21_context_parallel", "cell-39",
          "the all_gathers to their model plus gloo's\nheaders", "test",
          "tests/notebooks/test_21_context_parallel.py::test_context_parallel_notebook"),
    Claim("21-cp-patches-sdpa", "21_context_parallel", "cell-36",
          "replaces\n`F.scaled_dot_product_attention` by a version that runs on DTensors sharded "
          "on the sequence\ndimension", "source",
          "torch 2.13 torch/distributed/tensor/experimental/_context_parallel/_attention.py: "
          "context_parallel → _enable_context_parallel_dispatcher_impl(seq_dim=2): "
          "_distribute_function monkey-patches F.scaled_dot_product_attention with "
          "_ContextParallel.sdpa_input_fn (DTensor.from_local(..., [Shard(seq_dim)])) and "
          "sdpa_output_fn (to_local)"),
    Claim("21-cp-gpu-ring-kernels", "21_context_parallel", "cell-44",
          "torch sends them to `_templated_ring_attention`", "source",
          "torch 2.13 torch/distributed/tensor/experimental/_context_parallel/_attention.py: "
          "_sdpa_handler maps _scaled_dot_product_{flash,efficient,cudnn}_attention (and "
          "their backwards) to _scaled_dot_product_ring_*, which call "
          "_templated_ring_attention (a loop over the ranks' K/V blocks, _SDPAMerger by "
          "log-sum-exp; _HeadTailLoadBalancer for causal)"),
    Claim("21-cp-gpu-rotate-methods", "21_context_parallel", "cell-44",
          "Neither uses `send`/`recv`", "source",
          "torch 2.13 torch/distributed/tensor/experimental/_context_parallel/_attention.py: "
          "_ContextParallelOptions.rotate_method defaults to _RotateMethod.ALL_GATHER "
          "(_AllGatherRotater: one ft_c.all_gather_single, then a chunk per step); "
          "set_rotate_method('alltoall') selects _AllToAllRotater (ft_c.permute_tensor, "
          "i.e. all_to_all_single, every step)"),
    Claim("21-cp-gpu-default-all-gather", "21_context_parallel", "cell-44",
          "default is `_RotateMethod.ALL_GATHER` (what `set_rotate_method(\"allgather\")` "
          "selects,\n`_AllGatherRotater`): at the first step each rank starts one all-gather of "
          "its K and V", "source",
          "torch 2.13 torch/distributed/tensor/experimental/_context_parallel/_attention.py: "
          "_ContextParallelOptions.rotate_method = _RotateMethod.ALL_GATHER; "
          "_templated_ring_attention: rotater = _create_rotater(group, 2), and at i = 0 "
          "rotater.exchange_buffers(cat(key, value)) before the step's op; "
          "_AllGatherRotater.exchange_buffers calls ft_c.all_gather_single once (only while "
          "_aggregated_buffer is None), next_buffer waits for it (_maybe_wait) and returns "
          "chunk rank − i; set_rotate_method('allgather') sets ALL_GATHER, its docstring: "
          "'If this API has not been called, the default rotate method is \"allgather\"'"),
    Claim("21-llama3-cp-all-gather", "21_context_parallel", "cell-20",
          "every rank all-gathers K and V, then computes the attention of its\nown queries",
          "source",
          "Llama Team, AI @ Meta (2024), The Llama 3 Herd of Models, arXiv 2407.21783, "
          "section 'Parallelism for Model Scaling', read in stored copies of the paper's text: "
          "'we partition the input sequence into 2 × CP chunks so each CP rank receives two "
          "chunks for better load balancing. The i-th CP rank received both the i-th and the "
          "(2 × CP − 1 − i)-th chunks'; 'Different from existing CP implementations that "
          "overlap communication and computation in a ring-like structure (Liu et al., 2023a), "
          "our CP implementation adopts an all-gather based method where we first all-gather "
          "the key (K) and value (V) tensors, and then compute attention output for the local "
          "query (Q) tensor chunk'"),
    Claim("21-cp-gathers-by-default", "21_context_parallel", "cell-20",
          "torch's `context_parallel` also gathers by default", "source",
          "torch 2.13 torch/distributed/tensor/experimental/_context_parallel/_attention.py: "
          "_ContextParallelOptions.rotate_method = _RotateMethod.ALL_GATHER → "
          "_AllGatherRotater (one ft_c.all_gather_single of every rank's K and V); on the CPU "
          "the MATH kernel's all_gathers are the gloo case 21-context-parallel-on-gloo"),
    Claim("21-remember-cp-gpu", "21_context_parallel", "cell-54",
          "On GPUs its ring kernels rotate the blocks by all-gather (default) or all-to-all",
          "source",
          "torch 2.13 torch/distributed/tensor/experimental/_context_parallel/_attention.py: "
          "_create_rotater, _AllGatherRotater, _AllToAllRotater, set_rotate_method"),
    # 22 expert parallelism: mixture of experts
    Claim("22-gshard-first-choices-first", "22_expert_parallel", "cell-07",
          "first choices are served before second choices, each in token\norder (as in "
          "GShard's top-2 gating, whose second pass also skips a second choice at random,\n"
          "with probability 1 − 2·g₂: we keep every one)", "source",
          "Lepikhin et al. 2020, GShard: Scaling Giant Models with Conditional Computation and "
          "Automatic Sharding, arXiv 2006.16668, section 2.2, Algorithm 1 'Group-level top-2 "
          "gating with auxiliary loss', read in a stored copy of the paper's text: a first loop "
          "'for s ← 1 to S' places each token's e1 while c_e1 < C, then a second loop over the "
          "same tokens: 'g2 ← g2/(g1 + g2) ▷ normalized g2', 'rnd ← uniform(0, 1) ▷ dispatch "
          "to second-best expert with probability ∝ 2·g2', 'If c < C ∧ 2·g2 > rnd': as the "
          "normalized g2 ≤ 1/2, a second choice with room is skipped with probability "
          "1 − 2·g2; section 2.2, 'Random routing': 'GATE(·) dispatches to the 2nd-best "
          "expert with the probability proportional to its weight g2'"),
    gloo("22-uneven-2d", "22_expert_parallel", "cell-11",
         "The tensors are 2-D (rows × 48 features): the split sizes count rows, the first "
         "dimension", "22-a2a-uneven"),
    gloo("22-uneven-1d", "22_expert_parallel", "cell-11", "(on a 1-D tensor, elements)",
         "22-a2a-uneven"),
    gloo("22-zero-splits", "22_expert_parallel", "cell-11",
         "A piece may be empty, a split size of 0", "22-a2a-zero-splits"),
    gloo("22-autograd-backward", "22_expert_parallel", "cell-32",
         "is the same exchange with its backward registered", "22-a2a-autograd-backward"),
    Claim("22-functional-not-counted", "22_expert_parallel", "cell-32",
          "does not go through the `dist.all_to_all_single` function the counter wraps", "test",
          "tests/notebooks/test_22_expert_parallel.py::test_expert_parallel_notebook"),
    Claim("22-backward-swapped-splits", "22_expert_parallel", "cell-26",
          "the backward of an `all_to_all_single` is an `all_to_all_single` with the **split "
          "sizes swapped**", "test",
          "tests/notebooks/test_22_expert_parallel.py::test_expert_parallel_notebook"),
    Claim("22-gradients-of-one-process", "22_expert_parallel", "in-detail",
          "both give the gradients of one process", "test",
          "tests/notebooks/test_22_expert_parallel.py::test_expert_parallel_notebook"),
    Claim("22-own-piece-not-sent", "22_expert_parallel", "cell-37",
          "(a rank's own piece stays in its memory)", "test",
          "tests/notebooks/test_22_expert_parallel.py::test_expert_parallel_notebook"),
    Claim("22-model-plus-headers", "22_expert_parallel", "cell-40",
          "the model for the splits used plus gloo's headers (48 bytes a message) is what was "
          "measured", "test",
          "tests/notebooks/test_22_expert_parallel.py::test_expert_parallel_notebook"),
    Claim("22-even-model-off", "22_expert_parallel", "cell-40", "the even model is off",
          "test", "tests/notebooks/test_22_expert_parallel.py::test_expert_parallel_notebook"),
    Claim("22-torch-same-bytes", "22_expert_parallel", "cell-40",
          "torch's `all_to_all_single_autograd` writes the same bytes as the hand-written "
          "function", "test",
          "tests/notebooks/test_22_expert_parallel.py::test_expert_parallel_notebook"),
    gloo("22-too-few-aborts", "22_expert_parallel", "cell-43",
         "gloo checks the size of what arrives and aborts the receiving process",
         "22-a2a-receive-too-few-aborts"),
    gloo("22-too-many-silent", "22_expert_parallel", "cell-45",
         "No error on any rank: rank 0's extra row is never written",
         "22-a2a-receive-too-many-silent"),
    gloo("22-remember-wrong-sizes", "22_expert_parallel", "cell-50",
         "too few rows kill the receiving process on gloo, too many leave rows that nothing "
         "wrote", "22-a2a-receive-too-few-aborts"),
    Claim("22-remember-same-bytes", "22_expert_parallel", "cell-50",
          "`all_to_all_single_autograd` does it for you, with the same bytes", "test",
          "tests/notebooks/test_22_expert_parallel.py::test_expert_parallel_notebook"),
    Claim("22-remember-headers", "22_expert_parallel", "cell-50",
          "gloo adds 48 bytes a message", "test",
          "tests/notebooks/test_22_expert_parallel.py::test_expert_parallel_notebook"),
    # 23 accumulation, recomputation and compressed gradients
    Claim("23-powersgd-skips-small-matrices", "23_accumulation_compression", "cell-33",
          "so is a matrix whose compression would gain less than\n`min_compression_rate`",
          "source", "torch 2.13 torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py, "
          "PowerSGDState's docstring (item 3) and _should_compress: a tensor is compressed "
          "only if (rows + cols) · rank · min_compression_rate < rows · cols, else allreduced"),
    Claim("23-powersgd-vanilla-before-start-iter", "23_accumulation_compression", "cell-33",
          "(`start_powerSGD_iter=2`); before, it all_reduces the whole bucket", "source",
          "torch 2.13 torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py, "
          "PowerSGDState's docstring (item 2): vanilla allreduce runs prior to step "
          "start_powerSGD_iter; powerSGD_hook returns default allreduce of the bucket until "
          "state.iter reaches it"),
    gloo("23-bf16-refused", "23_accumulation_compression", "cell-31",
         "`bf16_compress_hook` is refused at registration on a CPU-only torch build",
         "23-bf16-refused-by-name"),
    gloo("23-bf16-wrapper-runs", "23_accumulation_compression", "cell-31",
         "The same function under another name registers and runs", "23-bf16-refused-by-name"),
    Claim("23-bf16-build-not-backend", "23_accumulation_compression", "cell-31",
          "It looks at the build and at\nthe hook's name, not at the backend", "source",
          "torch/nn/parallel/distributed.py (torch 2.13.0, lines 2485-2504): "
          "DistributedDataParallel._check_comm_hook: if hook.__name__ in "
          "['bf16_compress_hook', 'bf16_compress_wrapper_hook'], raises TypeError unless "
          "((torch.version.cuda or torch.version.hip set) and dist.is_nccl_available() and "
          "torch.cuda.nccl.version() >= (2, 10)) or (dist.is_xccl_available() and "
          "torch.xpu.is_available()); the process group's backend is not read (the gloo "
          "case 23-bf16-refused-by-name checks that this condition is still in the source)"),
    Claim("23-bf16-cuda-build-gloo-accepts", "23_accumulation_compression", "cell-31",
          "on a CUDA build with NCCL 2.10 or later, DDP over gloo\naccepts it", "gpu-check",
          "bf16-hook-gloo-cuda-build"),
    gloo("23-remember-bf16-cpu-build", "23_accumulation_compression", "cell-43",
         "bf16's hook is refused by name on a CPU-only torch build, on any backend, and\n  a "
         "renamed wrapper runs it", "23-bf16-refused-by-name"),
    gloo("23-batched-powersgd", "23_accumulation_compression", "cell-38",
         "fails on torch 2.13 at its first compressed pass, inside `_orthogonalize`",
         "23-batched-powersgd-orthogonalize"),
    gloo("23-reentrant-needs-grad", "23_accumulation_compression", "cell-27",
         "the output requires no grad, and backward fails", "23-reentrant-needs-grad"),
    Claim("23-forgot-no-sync-right", "23_accumulation_compression", "cell-14",
          "The parameters are still right", "test",
          "tests/notebooks/test_23_accumulation_compression.py::"
          "test_accumulation_compression_notebook"),
    Claim("23-no-sync-equals-whole-batch", "23_accumulation_compression", "in-detail",
          "equal to one process on the\n  whole batch", "test",
          "tests/notebooks/test_23_accumulation_compression.py::"
          "test_accumulation_compression_notebook"),
    Claim("23-powersgd-same-every-rank", "23_accumulation_compression", "cell-38",
          "the same on every rank", "test",
          "tests/notebooks/test_23_accumulation_compression.py::"
          "test_accumulation_compression_notebook"),
    # 24 pipeline schedules after 1F1B
    gloo("24-torch-placements", "24_pipeline_schedules", "torch-md",
         "`ScheduleInterleaved1F1B` and `ScheduleInterleavedZeroBubble` take\nstage *s* on "
         "rank *s* mod *p*, like ours", "24-torch-multi-stage-schedules"),
    gloo("24-torch-v-placement", "24_pipeline_schedules", "torch-md",
         "`ScheduleZBVZeroBubble` and `ScheduleDualPipeV`\ntake a **V**: rank *r* holds stages "
         "*r* and 2*p* − 1 − *r*", "24-torch-multi-stage-schedules"),
    gloo("24-interleaved-1f1b-order", "24_pipeline_schedules", "orders-read",
         "`ScheduleInterleaved1F1B` runs the same order as ours on every rank: rank *r* runs\n"
         "2(*p* − *r* − 1) + *p* + 1 forwards before its first backward, then a backward and "
         "a\nforward in turn", "24-torch-multi-stage-schedules"),
    gloo("24-interleaved-zb-order", "24_pipeline_schedules", "orders-read",
         "`ScheduleInterleavedZeroBubble` places the stages as ours but runs 2*p* − *r*\n"
         "forwards before its first I, and splits every backward into an I and a W",
         "24-torch-multi-stage-schedules"),
    gloo("24-zbv-order", "24_pipeline_schedules", "orders-read",
         "`ScheduleZBVZeroBubble` runs 2*p* forwards on every rank before its first I, which "
         "is\nfor the rank's second stage (stage 2*p* − 1 − *r*)",
         "24-torch-multi-stage-schedules"),
    gloo("24-dualpipev-order", "24_pipeline_schedules", "orders-read",
         "`ScheduleDualPipeV` runs 2*p* forwards before its first backward too (2*p* + 1 on "
         "the\nlast rank); it runs more full backwards B than split ones, and after its last "
         "B only\nI's and W's", "24-torch-multi-stage-schedules"),
    gloo("24-torch-split-counts", "24_pipeline_schedules", "torch-read",
         "`ScheduleInterleaved1F1B` runs only B's; the two\nzero-bubble schedules split every "
         "backward into I and W; `ScheduleDualPipeV` splits only\nsome",
         "24-torch-multi-stage-schedules"),
    gloo("24-torch-memory", "24_pipeline_schedules", "torch-memory-read",
         "`ScheduleInterleaved1F1B` holds what our interleaved 1F1B\nholds, 2(*p* − *r* − 1) + "
         "*p* + 1 on rank *r*; the two zero-bubble schedules hold 2*p* on\nevery rank, and "
         "`ScheduleDualPipeV` 2*p* + 1", "24-torch-multi-stage-schedules"),
    gloo("24-torch-equal-gradients", "24_pipeline_schedules", "in-detail",
         "torch's own `ScheduleInterleaved1F1B`, `ScheduleInterleavedZeroBubble`,\n"
         "`ScheduleZBVZeroBubble` and `ScheduleDualPipeV` on the same stages: the gradients",
         "24-torch-multi-stage-schedules"),
    Claim("24-narayanan-interleaved-bubble", "24_pipeline_schedules", "picture-text",
          "Figure 4 and section 2.2.2) cuts each rank's\nwork into *v* chunks: the ramp up "
          "and down is made of chunks, 1/*v* of the time, so the\nbubble is (*p* − 1)/(*v*·*m*) "
          "of the compute", "source",
          "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU "
          "Clusters Using Megatron-LM, arXiv 2104.04473, read in a stored copy of the paper's "
          "text: Figure 4 caption 'Default and interleaved 1F1B pipeline schedules. The top "
          "figure shows the default non-interleaved 1F1B schedule. The bottom figure shows the "
          "interleaved 1F1B schedule, where each device is assigned multiple chunks (in this "
          "case, 2).'; section 2.2.2 'Schedule with Interleaved Stages': 'If each device has v "
          "stages (or model chunks), then the forward and backward time for a microbatch for "
          "each stage or chunk will now be t_f/v and t_b/v. The pipeline bubble time thus "
          "reduces to t_pb^int. = (p−1)·(t_f+t_b)/v, and the bubble time fraction is then: "
          "t_pb^int./t_id = 1/v · (p−1)/m.'"),
    Claim("24-zbh1-paper-figure-3-top", "24_pipeline_schedules", "picture-text",
          "ZB-H1 (Qi et al. 2024, Figure 3, top) runs\nI as soon as it can", "source",
          "Qi et al. 2024, Zero Bubble (Almost) Pipeline Parallelism, arXiv 2401.10241, read "
          "in a stored copy of the paper's text: 'Figure 3: Handcrafted pipeline schedules, "
          "top: ZB-H1; bottom: ZB-H2'; section 2.1: 'This reduction is because B is initiated "
          "earlier across all workers compared to 1F1B, and the tail-end bubbles are filled by "
          "the later-starting W passes.'"),
    Claim("24-torch-w-from-saved-intermediates", "24_pipeline_schedules", "run-md",
          "torch's stage\n  saves the intermediate nodes during I and starts W from them",
          "source", "torch/distributed/pipelining/_backward.py (torch 2.13): "
          "stage_backward_input saves param_groups' intermediates, stage_backward_weight "
          "starts from them"),
    Claim("24-zbh1-by-hand-holds-more", "24_pipeline_schedules", "memory-read",
          "*p* − *r* pairs on rank *r* under 1F1B, 2*p* − 1 − *r*\nunder ours at *m* = 2*p*",
          "test",
          "tests/notebooks/test_24_pipeline_schedules.py::test_pipeline_schedules_notebook"),
    Claim("24-zbh1-waiting-for-i-as-1f1b", "24_pipeline_schedules", "memory-read",
          "Only the pairs\nwaiting for their I are as many as 1F1B's", "test",
          "tests/notebooks/test_24_pipeline_schedules.py::test_pipeline_schedules_notebook"),
    Claim("24-retain-graph-keeps-the-graph", "24_pipeline_schedules", "memory-read",
          "which keeps the graph (torch frees it only\nwith `retain_graph=False`)", "source",
          "torch/autograd/__init__.py (torch 2.13), grad's docstring: 'retain_graph (bool, "
          "optional): If False, the graph used to compute the grad will be freed'"),
    Claim("24-zbh1-paper-peak-memory", "24_pipeline_schedules", "memory-read",
          "so ZB-H1's peak\nactivation memory is *p*·*M*(B), 1F1B's (Table 2)", "source",
          "Qi et al., Zero Bubble (Almost) Pipeline Parallelism, ICLR 2024, arXiv 2401.10241 (the "
          "paper's text, checked): section 2.1 'ZB-H1, ensures that the maximum peak memory "
          "usage over all workers doesn't exceed that of 1F1B', 'all workers maintain the "
          "same number of in-flight microbatches'; section 2.3 'After B completes, it "
          "releases some activations not used anymore but keeps some extra gradients "
          "(nabla_z L in Figure 1) for W', worker i's activations memory (p - i + 1)M_B + "
          "(i - 1)M_W; Table 1 (B: sb(34h + 5as), W: 32sbh); Table 2 (1F1B and ZB-H1: pM_B)"),
    Claim("24-zbh1-paper-same-in-flight", "24_pipeline_schedules", "memory-read",
          "where Qi et al.'s ZB-H1 keeps the same number of micro-batches in flight on every "
          "rank\n(section 2.1)", "source",
          "Qi et al. 2024, Zero Bubble (Almost) Pipeline Parallelism, ICLR 2024, arXiv "
          "2401.10241, read in a stored copy of the paper's text: section 2.1 'Memory "
          "Efficient Schedule': 'Our first handcrafted schedule, named ZB-H1, ensures that the "
          "maximum peak memory usage over all workers doesn't exceed that of 1F1B. ZB-H1 "
          "generally follows the 1F1B schedule, but it adjusts the starting points of W "
          "depending on the number of warm-up microbatches. This ensures all workers maintain "
          "the same number of in-flight microbatches.'"),
    Claim("24-zbh1-paper-memory-of-rank-r", "24_pipeline_schedules", "memory-read",
          "section 2.3 puts rank *r*'s activation memory at\n(*p* − *r*)·*M*(B) + "
          "*r*·*M*(W)", "source",
          "Qi et al. 2024, arXiv 2401.10241, read in a stored copy of the paper's text: "
          "section 2.3 'Quantitative Analyses': 'We use the notations M_B/M_W to represent the "
          "memory required to store activations for one B/W pass'; 'Notably, the activations "
          "memory of worker i is (p − i + 1)M_B + (i − 1)M_W for ZB-H1 and (2p − 2i + 1)M_B + "
          "(2i − 2)M_W for ZB-H2.' The paper's workers count from 1 (Figure 3: Device 1-4), "
          "so worker i is rank r = i − 1: (p − r)M_B + rM_W"),
    Claim("24-torch-stage-detaches-after-i", "24_pipeline_schedules", "memory-read",
          "saves the\ngradients at the intermediate nodes W starts from, then detaches the "
          "stage's outputs to\nfree the graph state it does not need", "source",
          "torch/distributed/pipelining/_backward.py (torch 2.13), stage_backward_input: "
          "prehooks on param_groups' intermediates store their grads; 'for t in "
          "stage_outputs_or_loss: t.detach_()', docstring 'Detaching the "
          "stage_outputs_or_loss at the end of this function is important as it frees up "
          "the memory that the autograd graph is anticipating to be used later (but doesn't "
          "actually need)'"),
    Claim("24-orders-disagree-raise", "24_pipeline_schedules", "pitfall-md",
          "it raises instead of hanging", "test",
          "tests/notebooks/test_24_pipeline_schedules.py::test_pipeline_schedules_notebook"),
    Claim("24-our-interleaved-same-as-torch", "24_pipeline_schedules", "remember",
          "torch's `ScheduleInterleaved1F1B`, `ScheduleInterleavedZeroBubble`,\n  "
          "`ScheduleZBVZeroBubble` and `ScheduleDualPipeV` take a list of stages per rank",
          "test",
          "tests/notebooks/test_24_pipeline_schedules.py::test_pipeline_schedules_notebook"),
    Claim("24-paced-bubbles-rank-as-formulas", "24_pipeline_schedules", "paced-read",
          "With actions of fixed length, the measured bubbles should rank the schedules as "
          "the\nformulas do, at each *m*", "test",
          "tests/notebooks/test_24_pipeline_schedules.py::test_pipeline_schedules_notebook"),
    # 24: make bench's rows (bench-vs-torch-md)
    Claim("24-bench-torch-no-batch-grad", "24_pipeline_schedules", "bench-vs-torch-md",
          "but for the gradient of the batch itself, which our first stage computes\nand never "
          "sends", "source",
          "torch/distributed/pipelining/stage.py (torch 2.13), forward_one_chunk: 'if "
          "self.is_first: composite_args = args' (the micro-batch as given, no grad), later "
          "stages' received activations requires_grad_(...); _backward.py stage_backward_input "
          "keeps only inputs with a grad_fn or grad accumulator (_get_grad_fn_or_grad_acc)"),
    Claim("24-bench-zb1p-one-stage-a-rank", "24_pipeline_schedules", "bench-vs-torch-md",
          "its docstring says it implements the same paper's\nZB1P schedule", "source",
          "torch/distributed/pipelining/schedules.py (torch 2.13), ScheduleInterleavedZeroBubble: "
          "'See https://arxiv.org/pdf/2401.10241', 'In particular this is implementing the ZB1P "
          "schedule in the paper', its actions F, I (BACKWARD_INPUT), W (BACKWARD_WEIGHT); "
          "PipelineScheduleMulti's stage mapping _utils.generate_stage_to_rank_mapping(style="
          "'loop'): stage_index % pp_size"),
    Claim("24-bench-zbv-dualpipev-two-stages", "24_pipeline_schedules", "bench-vs-torch-md",
          "`ScheduleZBVZeroBubble` and `ScheduleDualPipeV`\nneed two stages a rank in a V",
          "source",
          "torch/distributed/pipelining/schedules.py (torch 2.13): ScheduleZBVZeroBubble and "
          "ScheduleDualPipeV __init__ map stages with generate_stage_to_rank_mapping(..., "
          "style='v') and raise ValueError('ZBV requires exactly 2 stages per rank, ...') "
          "unless len(stages) == 2"),
    Claim("24-bench-add-send-recv", "24_pipeline_schedules", "bench-vs-torch-md",
          "torch's multi-stage runtime turns\nthe plan into compute actions plus a send or "
          "receive action for each transfer", "source",
          "torch/distributed/pipelining/schedules.py (torch 2.13): ScheduleInterleaved1F1B and "
          "ScheduleInterleavedZeroBubble subclass _PipelineScheduleRuntime and call "
          "_prepare_schedule_with_comms(self.pipeline_order), which calls _add_send_recv: "
          "'Transforms a compute-only schedule into a complete schedule with communication "
          "actions' (SEND_F, RECV_F, SEND_B, RECV_B)"),
    Claim("24-bench-torch-w-from-intermediates", "24_pipeline_schedules", "bench-vs-torch-md",
          "torch's I keeps the gradients at the stage's\nintermediate nodes and its W starts "
          "from them", "source",
          "torch/distributed/pipelining/_backward.py (torch 2.13), stage_backward_input: 'After "
          "computing input gradients, we save the intermediate nodes in `param_groups` for later "
          "use in stage_backward_weight', 'when we do dW calculation, we start from saved "
          "intermediates'"),
    # 25 algorithms: ring, tree, halving-doubling
    gloo("25-gloo-broadcast-binomial-tree", "25_algorithms", "c33",
         "gloo's broadcast writes what our binomial tree writes, to the same ranks",
         "11-broadcast-binomial-tree"),
    Claim("25-gloo-headers-48", "25_algorithms", "c24",
          "gloo's headers (48 B per\nmessage", "test",
          "tests/helpers/test_wire.py::test_a_send_reads_its_bytes_plus_gloo_headers"),
    Claim("25-gloo-all-reduce-in-cpp", "25_algorithms", "c41c",
          "gloo's own `all_reduce` runs its whole ring inside gloo's C++", "source",
          "pytorch/gloo (HEAD 70dc360) gloo/allreduce.cc allreduce() -> ring(): 'Ring "
          "reduce/scatter' then 'Ring allgather', in C++; torch ProcessGroupGloo "
          "AsyncAllreduceWork::allreduce calls gloo::allreduce(opts) once per call"),
    gloo("25-gloo-broadcast-2S-at-4", "25_algorithms", "c33",
         "at 4 ranks rank 0 sends 2 · S (to ranks 1 and 2), rank 1 sends S (to rank 3), ranks "
         "2 and 3 only headers", "11-broadcast-binomial-tree"),
    Claim("25-gloo-broadcast-source", "25_algorithms", "c33",
          "It is `gloo::broadcast` in `gloo/broadcast.cc` (pytorch/gloo), which torch's "
          "`ProcessGroupGloo` calls for a CPU tensor", "source",
          "torch/csrc/distributed/c10d/ProcessGroupGloo.cpp AsyncBroadcastWork::broadcast: "
          "gloo::BroadcastOptions opts(context_); opts.setRoot(rootRank) ... "
          "gloo::broadcast(opts); pytorch/gloo gloo/broadcast.cc (HEAD 70dc360): 'exponential "
          "participation starting with virtual ranks 0 and 1', peer = opposite bit i"),
    gloo("25-gloo-all-reduce-ring", "25_algorithms", "c36",
         "torch gets the ring at every size", "11-all-reduce-ring-at-every-size"),
    Claim("25-gloo-bcube-option-unset", "25_algorithms", "c36",
          "it has another algorithm (bcube) behind an option that torch's `ProcessGroupGloo` "
          "does not set", "source",
          "pytorch/gloo (HEAD 70dc360) gloo/allreduce.h AllreduceOptionsImpl::Algorithm "
          "{UNSPECIFIED, RING, BCUBE}, default UNSPECIFIED; gloo/allreduce.cc allreduce(): "
          "'case UNSPECIFIED: case RING: ring(...)', 'case BCUBE: bcube(...)'; ring() = 'Ring "
          "reduce/scatter' then 'Ring allgather'. torch 2.13 "
          "torch/include/torch/csrc/distributed/c10d/ProcessGroupGlooDetail.hpp "
          "AsyncAllreduceWork::allreduce sets reduce function, tag, timeout and outputs, never "
          "setAlgorithm"),
    gloo("25-gloo-reduce-root-writes", "25_algorithms", "c36",
         "**reduce** writes from the root too", "11-reduce-root-writes-too"),
    gloo("25-gloo-all-gather-ring", "25_algorithms", "c36",
         "**all_gather** is a ring to rank *r* + 1", "11-ring-and-direct-collectives-agree"),
    Claim("25-gloo-all-reduce-as-ring-measured", "25_algorithms", "c28",
          "gloo's own all_reduce writes what the ring writes", "test",
          "tests/notebooks/test_25_algorithms.py::test_algorithms_notebook"),
    gloo("25-root-disagreement-times-out", "25_algorithms", "c45",
         "the group's timeout (3 s here) ends it with an error instead of a hang",
         "25-ranks-disagree-on-root"),
    Claim("25-nccl-double-tree-blog", "25_algorithms", "c04",
          "source draws both trees in a comment (above `ncclGetDtree` in NVIDIA/nccl's "
          "`src/graph/trees.cc`: the mirror for an even number of ranks, a shift by one for an "
          "odd number)", "source",
          "NVIDIA/nccl src/graph/trees.cc (HEAD 5067397c): comment 'Build a double binary tree. "
          "Take the previous tree for the first tree. For the second tree, we use a mirror tree "
          "(if nranks is even) ... or shift it by one rank (if nranks is odd)', both drawn"),
    Claim("25-nccl-tree-pipelined", "25_algorithms", "c10",
          "NCCL cuts it into chunks and pipelines them through the tree", "source",
          "NVIDIA/nccl src/device/all_reduce.h (HEAD 5067397c) runTreeUpDown / runTreeSplit: "
          "'for (size_t elemOffset = 0; elemOffset < channelCount; elemOffset += chunkCount)' "
          "around each up (reduce) and down (broadcast) send/recv"),
    Claim("25-nccl-two-trees-at-once", "25_algorithms", "c10",
          "NCCL runs them at the same time", "source",
          "NVIDIA/nccl src/graph/connect.cc (HEAD 5067397c) connectTrees: ncclGetDtree's tree 0 "
          "is set on channel c, tree 1 on channel c + nChannels ('Tree %d' logged for both), "
          "and the channels run concurrently"),
    Claim("25-nccl-chain-pipelined", "25_algorithms", "c29",
          "NCCL pipelines it in chunks, so the steps overlap", "source",
          "NVIDIA/nccl src/device/broadcast.h runRing (the ring from the root, chunk by chunk)"),
    Claim("25-nccl-tuner-switches", "25_algorithms", "c42",
          "as the size grows it may switch several times", "source",
          "https://github.com/NVIDIA/nccl/issues/754, sjeaugey: 'The internal tuning model will "
          "switch from one to the other depending on the number of nodes, number of GPUs per "
          "node, and size of the operation, but also the intra-node and inter-node bandwidth "
          "... for example it could do: tree/LL -> ring/LL -> tree/LL128 -> ring/LL128 -> "
          "tree/simple -> ring/simple'"),
    Claim("25-nccl-ll", "25_algorithms", "c42",
          "**LL** (low latency) sends 8-byte stores of 4 bytes of data and a 4-byte flag",
          "source", "https://github.com/NVIDIA/nccl/issues/281, sjeaugey: 'LL relies on 8 Bytes "
          "stores being atomic (with 4B data / 4 B flag) ... Which makes LL maximum bandwidth "
          "50% of the peak'; 'the flag comes along with the data (so that we avoid expensive "
          "memory barriers and get better latency)'"),
    Claim("25-nccl-ll128", "25_algorithms", "c42",
          "**LL128** does the same with 128-byte lines of 120 bytes of data and an 8-byte flag",
          "source", "https://github.com/NVIDIA/nccl/issues/281: 'LL128 relies on 128B stores "
          "being seen in order (with 120B data / 8 B flag) ... LL128 can achieve 95% peak'; "
          "https://github.com/NVIDIA/nccl/issues/786: 'we only enable it on platforms where we "
          "have verified that all the chain was giving that guarantee'; NVIDIA/nccl "
          "src/graph/tuning.cc (HEAD 5067397c): LL128 on by default only if typeIntra <= "
          "PATH_NVB and minCompCap >= 70"),
    Claim("25-nccl-simple", "25_algorithms", "c42",
          "**Simple** writes a chunk, waits on a memory fence, then sets the flag", "source",
          "https://github.com/NVIDIA/nccl/issues/572, sjeaugey: the extra warp calls "
          "threadfence_system, 'letting the other 512 threads copy the next chunk while we wait "
          "for the fence to complete and post the flag to the next GPU'; "
          "https://github.com/NVIDIA/nccl/issues/903: 'That's indeed a correct description of "
          "how the Simple protocol works'"),
    Claim("25-nccl-tuning-table", "25_algorithms", "c42",
          "rank 0 prints, when a communicator is made, a table of the tuner's modelled latency "
          "and bandwidth per algorithm and protocol", "gpu-check", "nccl-tuning-table"),
    Claim("25-nccl-line-per-call", "25_algorithms", "c42",
          "rank 0 also logs the choice for every call under the same settings", "gpu-check",
          "nccl-tuning-per-call"),
    Claim("25-nccl-line-per-call-since-2.20", "25_algorithms", "c42",
          "Since NCCL 2.20 rank 0 also logs the choice for every call", "source",
          "NVIDIA/nccl src/enqueue.cc: v2.19.4-1 '//if (comm->rank == 0) INFO(NCCL_TUNING, "
          "\"%ld Bytes -> Algo %d proto %d time %f\"' (commented out); v2.20.3-1 the same "
          "line uncommented; HEAD 5067397c: 'if (comm->rank == 0) INFO(NCCL_TUNING, \"%s: "
          "%ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}\"'"),
    Claim("25-nccl-no-log-in-december-2022", "25_algorithms", "c42",
          "in December\n  2022 [#754](https://github.com/NVIDIA/nccl/issues/754) still said "
          "there was no such log", "source",
          "https://github.com/NVIDIA/nccl/issues/754 (opened by mozizhao 2022-12-12; "
          "sjeaugey's reply dated 2022-12-12, i.e. December 2022): 'Short answer is no, there "
          "is no such log ... we can't print a line on every call (that would have a perf "
          "impact)'"),
    Claim("25-nccl-pat", "25_algorithms", "c42", "since NCCL 2.23 also PAT", "source",
          "NVIDIA/nccl src/include/plugin/nccl_tuner.h (HEAD 5067397c): '#define "
          "NCCL_ALGO_PAT 6'; added in commit e261ecea '2.23.4-1'"),
    Claim("25-nccl-tuner-inputs", "25_algorithms", "c42",
          "Its tuning model picks a pair from the number of nodes, the GPUs per node, the "
          "size, and the intra- and inter-node bandwidths", "source",
          "https://github.com/NVIDIA/nccl/issues/754, sjeaugey: 'The internal tuning model will "
          "switch from one to the other depending on the number of nodes, number of GPUs per "
          "node, and size of the operation, but also the intra-node and inter-node bandwidth'"),
    Claim("25-nccl-ll-at-most-50", "25_algorithms", "c42",
          "at most 50 % of the link's bandwidth", "source",
          "https://github.com/NVIDIA/nccl/issues/281, sjeaugey: 'Which makes LL maximum "
          "bandwidth 50% of the peak'"),
    Claim("25-nccl-ll128-95", "25_algorithms", "c42", "(about 95 %)", "source",
          "https://github.com/NVIDIA/nccl/issues/281, sjeaugey: 'LL128 can achieve 95% peak'"),
    Claim("25-nccl-ll128-silent-corruption", "25_algorithms", "c42",
          "naming LL128 in it where NCCL did not enable it turns LL128 on, which\n  risks "
          "silent data corruption", "source",
          "https://github.com/NVIDIA/nccl/issues/786, sjeaugey: 'we only enable it on platforms "
          "where we have verified that all the chain was giving that guarantee, being "
          "conservative as we don't want our users to experience silent data corruption. If "
          "you're brave, you can enable it on non-supported platforms with "
          "NCCL_PROTO=LL,LL128,SIMPLE. No guarantees it won't hurt you one day though'; "
          "NVIDIA/nccl src/graph/tuning.cc (HEAD 5067397c) ncclTopoTuneModel: protoEnable "
          "starts at 2 for LL128 ('enabled by default only in certain cases'), parseList of "
          "NCCL_PROTO sets a listed protocol to 1, and only the value 2 goes through the "
          "platform checks"),
    Claim("25-nccl-algo-proto-restrict", "25_algorithms", "c42",
          "`NCCL_ALGO` and `NCCL_PROTO` restrict the choice", "gpu-check",
          "nccl-algo-changes-time"),
    Claim("25-nccl-algo-proto-lists", "25_algorithms", "c42",
          "each is a list of\n  the algorithms (protocols) NCCL may use, or, starting with `^`, "
          "of those it may not", "source",
          "NCCL docs, env.html / env.rst: 'The NCCL_ALGO variable defines which algorithms "
          "NCCL will use. ... Comma-separated list of algorithms ... To specify algorithms to "
          "exclude (instead of include), start the list with ^'; 'The NCCL_PROTO variable "
          "defines which protocol(s) NCCL will use'"),
    Claim("25-nccl-picks-among-what-is-left", "25_algorithms", "c42",
          "NCCL still picks\n  among what is left, per call", "source",
          "NVIDIA/nccl src/graph/tuning.cc (HEAD 5067397c) ncclTopoTuneModel: 'if "
          "(algoEnable[c * NCCL_NUM_ALGORITHMS + a] == 0) comm->bandwidths[c][a][p] = 0' "
          "(likewise pEnable == 0); ncclTopoGetAlgoTime: 'if (bw == 0) { *time = -1.0; "
          "...'; src/enqueue.cc, per call: the pair with 'table[a][p] >= 0.0 && table[a][p] "
          "< minTime', so a pair left out is never chosen"),
    Claim("25-nccl-algo-proto-restrict-remember", "25_algorithms", "c50",
          "`NCCL_ALGO` / `NCCL_PROTO` restrict the choice to the algorithms and\n  protocols "
          "they list", "source",
          "NCCL docs, env.html / env.rst: 'The NCCL_ALGO variable defines which algorithms "
          "NCCL will use'; 'The NCCL_PROTO variable defines which protocol(s) NCCL will use' "
          "(see 25-nccl-algo-proto-lists)"),
    Claim("25-nccl-proto-for-debugging", "25_algorithms", "c42",
          "The maintainers keep `NCCL_PROTO` mostly for debugging and\n  workarounds", "source",
          "https://github.com/NVIDIA/nccl/issues/281, sjeaugey: '`NCCL_PROTO` is there mostly "
          "for debugging and workarounds in the case there is a bug with a given protocol'"),
    # 26 checkpoints and failures
    gloo("26-dead-peer-closed-or-reset", "26_checkpoints_failures", "cell-12",
         '"Connection closed by peer" or "Connection reset by peer"', "26-dead-peer-fails-fast"),
    gloo("26-dead-peer-bounded", "26_checkpoints_failures", "cell-12",
         "Either way the wait is bounded by the collective timeout", "26-dead-peer-fails-fast"),
    gloo("26-dead-peer-other-ranks-error", "26_checkpoints_failures", "in-detail",
         "an error within the\n  collective timeout (seconds), not a hang",
         "26-dead-peer-fails-fast"),
    gloo("26-dcp-loads-at-another-world-size", "26_checkpoints_failures", "in-detail",
         "a checkpoint saved at one world size **loads at another**", "26-dcp-reshards"),
    gloo("26-dcp-each-rank-reads-its-rows", "26_checkpoints_failures", "cell-14",
         "each rank reads the pieces of the rows it now owns", "26-dcp-reshards"),
    gloo("26-dcp-adam-state-equal", "26_checkpoints_failures", "in-detail",
         "equal to the saved\n  state to the last bit, Adam's state included", "26-dcp-reshards"),
    gloo("26-async-save-returns-before-write", "26_checkpoints_failures", "cell-24",
         "returns a `Future` before\nthe write completes", "26-async-save-returns-early"),
    gloo("26-async-save-returns-before-write-intro", "26_checkpoints_failures", "in-detail",
         "it returns before its write is complete", "26-async-save-returns-early"),
    gloo("26-async-save-returns-before-write-remember", "26_checkpoints_failures", "cell-39",
         "`dcp.async_save` returns before its\n  write is complete",
         "26-async-save-returns-early"),
    Claim("26-async-save-copies-then-writes", "26_checkpoints_failures", "cell-24",
          "torch copies the state first, then writes in the background", "source",
          "torch/distributed/checkpoint/state_dict_saver.py (torch 2.13), async_save's "
          "docstring: it first stages the state_dict to CPU memory, then calls save in a "
          "separate thread"),
    Claim("26-dcp-files-per-rank", "26_checkpoints_failures", "cell-05",
          "each rank its own file, and one `.metadata` for all", "test",
          "tests/notebooks/test_26_checkpoints_failures.py::test_checkpoints_failures_notebook"),
    Claim("26-dcp-file-over-3x-its-tensors", "26_checkpoints_failures", "cell-07",
          "every file is more than 3 times the tensor bytes it holds (a few kB of tensors per", "test",
          "tests/notebooks/test_26_checkpoints_failures.py::test_checkpoints_failures_notebook"),
    Claim("26-optimizer-keyed-by-name", "26_checkpoints_failures", "cell-05",
          "the optimizer's keyed by parameter name, not by position", "test",
          "tests/notebooks/test_26_checkpoints_failures.py::test_checkpoints_failures_notebook"),
    Claim("26-stop-leaves-nothing", "26_checkpoints_failures", "cell-12",
          "`cluster.stop()` ends every process of the cluster; none is left behind", "test",
          "tests/notebooks/test_26_checkpoints_failures.py::test_checkpoints_failures_notebook"),
    Claim("26-torchrun-restarts-all", "26_checkpoints_failures", "cell-23a",
          "when a\nworker fails it ends the others and starts **all** of them again", "test",
          "tests/notebooks/test_26_checkpoints_failures.py::test_checkpoints_failures_notebook"),
    Claim("26-torchrun-standalone", "26_checkpoints_failures", "cell-23a",
          "`--standalone`: its own rendezvous on a free port", "source",
          "torch/distributed/run.py (torch 2.13): --standalone starts a c10d rendezvous "
          "(TCP store) on localhost:0, a free port"),
    Claim("26-torchrun-log-dir", "26_checkpoints_failures", "cell-23b",
          "else a new /tmp/torchelastic_* a run", "source",
          "torch/distributed/elastic/multiprocessing/api.py (torch 2.13), DefaultLogsSpecs: "
          "'if not log_dir: log_dir = tempfile.mkdtemp(prefix=\"torchelastic_\")'; run.py's "
          "--log-dir defaults to None. with the flag, "
          "tests/notebooks/test_26_checkpoints_failures.py finds no new torchelastic_* folder"),
    Claim("26-checkpoint-exception-base", "26_checkpoints_failures", "cell-29",
          "It derives from `BaseException`, not `Exception`", "test",
          "tests/notebooks/test_26_checkpoints_failures.py::test_checkpoints_failures_notebook"),
    Claim("26-shape-mismatch-names-tensor", "26_checkpoints_failures", "cell-29",
          "each rank's error naming the tensor and both\nshapes", "test",
          "tests/notebooks/test_26_checkpoints_failures.py::test_checkpoints_failures_notebook"),
    Claim("26-no-optimizer-state-diverges", "26_checkpoints_failures", "cell-31",
          "Nothing fails, and the loss curve leaves the reference", "test",
          "tests/notebooks/test_26_checkpoints_failures.py::test_checkpoints_failures_notebook"),
    # 27 planning a run
    Claim("27-zero-k12", "27_planning", "p27-gpu", "the ZeRO paper's K = 12", "source",
          "arXiv 1910.02054 (Rajbhandari et al., ZeRO), section 3.1 'Model States: Optimizer "
          "States, Gradients and Parameters': mixed-precision Adam keeps an fp32 copy of the "
          "parameters, momentum and variance, 'the memory multiplier of the optimizer states "
          "... K ... is 12'"),
    Claim("27-llama3-table-3", "27_planning", "p27-shapes", "the Llama 3 shapes are the paper's",
          "source", "Llama Team, AI @ Meta (2024), The Llama 3 Herd of Models, arXiv "
          "2407.21783, table 3 'Overview of the key "
          "hyperparameters of Llama 3': 8B 32 layers, model dimension 4,096, FFN 14,336, 32 "
          "heads, 8 key/value heads; 70B 80, 8,192, 28,672, 64, 8; 405B 126, 16,384, 53,248, "
          "128, 8; vocabulary 128,000"),
    gloo("27-sp-plan-counts", "27_planning", "p27-plan",
         "attention and MLP an `all_gather` of the input and a `reduce_scatter` of the output",
         "27-sp-plan-counts"),
    gloo("27-fsdp2-gathers-per-block", "27_planning", "p27-plan",
         "an `all_gather` of each block's parameters forward and again backward and",
         "27-fsdp2-gathers-twice-per-unit"),
    gloo("27-parallelize-module-all-reduces", "27_planning", "p27-plan",
         "`all_reduce` after each row-parallel layer forward and one per column-parallel layer",
         "27-parallelize-module-all-reduces"),
    gloo("27-gloo-reduce-scatter-is-all-reduce", "27_planning", "p27-fit",
         "On gloo a `reduce_scatter`", "11-reduce-scatter-writes-an-all-reduce"),
    Claim("27-fake-pg-any-world-size", "27_planning", "p27-fake",
          "`all_reduce` leaves its tensor as it was", "test",
          "tests/helpers/test_planner.py::test_fake_process_group_counts"),
    Claim("27-nvlink4-900", "27_planning", "p27-gpu", "H100 900 GB/s in total, 450 GB/s each way",
          "source", "https://www.nvidia.com/en-sg/technologies/hopper-architecture/ (NVIDIA "
          "Hopper architecture page): 'The fourth generation NVLink ... at 900 gigabytes/second "
          "(GB/s) bi-directional per GPU'; 450 GB/s each way is that figure halved. The NVLink "
          "page (/data-center/nvlink/) now gives NVLink 5's 1.8TB/s, not H100's figure"),
    Claim("27-infiniband-ndr-400", "27_planning", "p27-gpu", "an InfiniBand NDR port 400 Gb/s",
          "source", "https://docs.nvidia.com/networking/display/QM97X0PUB/Interfaces (QM97XX "
          "1U NDR 400Gbps InfiniBand Switch Systems User Manual): 'Each OSFP port consists of 2 "
          "logical InfiniBand ports ... for 40/56/100/200/400 Gb/s', 'NDR ... 1 port is active "
          "in 400 Gb/s'; docs.nvidia.com/networking/display/800GMMA4Z00NS/Overview: 'The line "
          "rate is 400Gb/s for both 400GbE Ethernet and NDR InfiniBand'"),
    Claim("27-llama3-table-4", "27_planning", "p27-published",
          "8,192 GPUs with TP 8,\nCP 1, PP 16, DP 64", "source",
          "Llama Team, AI @ Meta (2024), The Llama 3 Herd of Models, arXiv 2407.21783, table 4 "
          "'Scaling configurations and MFU for each stage of Llama 3 405B pre-training': rows "
          "8,192|8|1|16|64|8,192|32|16M|430, 16,384|8|1|16|128|8,192|16|16M|400, "
          "16,384|8|16|16|8|131,072|16|16M|380 (v3 text; some copies of the table print DP 4 "
          "in the last row, which does not multiply out to 16,384 = 8 · 16 · 16 · 8); "
          "section 3.3.2 'Parallelism for Model Scaling': 'we reduce one Transformer layer "
          "each from the first and the last stages'"),
    Claim("27-llama3-mfu-cites-palm", "27_planning", "p27-published",
          "the paper's MFU cites Chowdhery et al. (*PaLM*, arXiv 2204.02311)", "source",
          "arXiv 2407.21783 section 3.3.2, 'GPU utilization': 'we achieve an overall BF16 Model "
          "FLOPs Utilization (MFU; Chowdhery et al. (2023)) of 38-43% for the configurations "
          "shown in Table 4'; neither that section nor table 4 gives the FLOP count behind its "
          "TFLOPs/GPU"),
    Claim("27-palm-mfu-counts-attention", "27_planning", "p27-published",
          "whose count per token is 6N + 12 · L · H · Q · T", "source",
          "Chowdhery et al. 2022, PaLM: Scaling Language Modeling with Pathways, arXiv "
          "2204.02311, read in a stored copy of the paper's text (ar5iv), Appendix B 'Compute "
          "Usage and Environmental Impact': 'Excluding self-attention, an N-parameter "
          "decoder-only model requires 6N matmul FLOPs per token seen (2N for forward and 4N "
          "for backward)'; 'The matmuls in dense self-attention add 6LH(2QT) FLOPs per token "
          "(a much smaller value for large models, but included here for completeness) where "
          "L, H, Q, and T are the number of layers, the number of heads, the head dimension, "
          "and the sequence length respectively.'; 'the theoretical peak throughput R = "
          "P/(6N + 12LHQT)'. Also "
          "karpathy/nanoGPT model.py GPT.estimate_mfu: '# see PaLM paper Appendix B as ref: "
          "https://arxiv.org/abs/2204.02311', 'L, H, Q, T = cfg.n_layer, cfg.n_head, "
          "cfg.n_embd//cfg.n_head, cfg.block_size', 'flops_per_token = 6*N + 12*L*H*Q*T' "
          "(every key counted, no causal halving); tests/helpers/test_planner.py::"
          "test_flops_per_token_count_attention checks the planner's count is that one"),
    Claim("27-kaplan-6n", "27_planning", "p27-published",
          "the approximation C ≈ 6N of Kaplan et\nal. 2020", "source",
          "Kaplan et al. 2020, Scaling Laws for Neural Language Models, arXiv 2001.08361: "
          "'Accounting for the backwards pass (approximately twice the compute as the forwards "
          "pass), we then define the estimated non-embedding compute as C ≈ 6N floating point "
          "operators per training token'; 'we do not include context-dependent terms in our "
          "training compute estimate' (its forward count C_forward ≈ 2N + 2 n_layer n_ctx "
          "d_attn keeps them)"),
    Claim("27-playbook-16-bytes", "27_planning", "p27-published",
          "gradients, 4 of fp32 master weights and 4 + 4 of Adam's two moments", "source",
          "https://huggingface.co/spaces/nanotron/ultrascale-playbook (Tazi et al., Feb 19 "
          "2025), section 'Memory usage in transformers': m_params = 2N, m_grad = 2N, "
          "m_params_fp32 = 4N, m_opt = (4+4)N; m_act = L·seq·bs·h·(34 + 5·n_heads·seq/h) "
          "(source mirrored in vinjn/nanotron-ultrascale-playbook index.html)"),
    Claim("27-local-tensor-mode-all-reduce", "27_planning", "p27-local",
          "a collective combines them as the ranks would", "test",
          "tests/helpers/test_planner.py::test_local_tensor_mode_all_reduce"),
    Claim("27-comm-debug-mode-counts-1024", "27_planning", "p27-fake",
          "counts the collectives a block of code issues", "test",
          "tests/helpers/test_planner.py::test_fake_process_group_counts"),
    # 28 the Flight Recorder
    gloo("28-dump-while-blocked", "28_flight_recorder", "c00",
         "dump it, even while another of its threads waits in a collective"),
    Claim("28-no-public-dump", "28_flight_recorder", "c04",
          "torch 2.13 gives neither a public name yet", "source",
          "torch 2.13: no function of torch/distributed/*.py dumps the Flight Recorder (a "
          "search for fr_trace, dump_fr, flight_recorder finds the analyzer and torchcomms "
          "only); torch._C._distributed_c10d has _dump_fr_trace(includeCollectives=True, "
          "includeStackTraces=True, onlyActive=False) -> bytes (a pickle) and "
          "_dump_fr_trace_json"),
    gloo("28-buffer-size-read-at-init", "28_flight_recorder", "c04",
         "before\n`init_process_group`, which is when torch reads it"),
    Claim("28-default-2000", "28_flight_recorder", "in-detail",
          "the start cell sets 2,000, torch's default", "source",
          "torch 2.13, torch/include/torch/csrc/distributed/c10d/FlightRecorder.hpp: "
          "max_entries_ = getCvarInt({\"TORCH_FR_BUFFER_SIZE\", "
          "\"TORCH_NCCL_TRACE_BUFFER_SIZE\"}, 2000); enabled_ = max_entries_ > 0"),
    Claim("28-analyzer-finds", "28_flight_recorder", "in-detail",
          "names what does not match: a missing rank, a different collective,\n  different "
          "sizes", "source",
          "torch 2.13, torch/distributed/flight_recorder/components/utils.py: match_one_event "
          "returns MatchState.COLLECTIVE_TYPE_MISMATCH, SIZE_OR_SYNTAX_MISMATCH, "
          "COLLECTIVE_STATE_MISMATCH, COLLECTIVE_DTYPE_MISMATCH; builder.py reports 'Not all "
          "ranks joining collective' with the missing ranks; the missing rank and the type "
          "mismatch are also run by the notebook's test"),
    Claim("28-analyzer-aligns-by-record-id", "28_flight_recorder", "c19",
          "the analyzer lines the ranks up by that number (`record_id`)", "source",
          "torch 2.13, torch/distributed/flight_recorder/components/utils.py, "
          "align_trace_from_beginning: 'finds the largest starting point across all ranks by "
          "taking the maximum `record_id` value of the first entry in each rank' and drops "
          "every entry below it (builder.py calls it before matching)"),
    seen28("28-start-cell-sets-size", "c04",
           "The start cell set `TORCH_FR_BUFFER_SIZE` on every rank"),
    seen28("28-warm-buffer-holds-earlier", "c06",
           "An engine that ran earlier cells or notebooks (a warm start) holds their collectives "
           "too"),
    seen28("28-entry-fields", "in-detail",
           "each with its sequence number,\n  the collective, the tensor sizes and the Python "
           "stack that called it"),
    seen28("28-gloo-dump-unreadable", "c11",
           "gloo leaves the names in the dump's group table (`pg_config`) empty"),
    seen28("28-fixed-dump-clean", "c11", "the analyzer reads them and\nfinds nothing wrong"),
    seen28("28-others-time-out", "c13", "The others wait the 3 s timeout, then raise"),
    seen28("28-missing-rank-named", "c19", "which\nrank is missing from collective #4"),
    seen28("28-buffer-outlives-group", "c19", "keep the old group's entries\nin their buffer"),
    seen28("28-type-mismatch-reported", "c26",
           "the analyzer reports the mismatch of collective types"),
    seen28("28-dead-rank-refused", "c34",
           "The analyzer will not judge without every rank's dump"),
    seen28("28-incomplete-cannot-decide", "c34", "it says it cannot decide"),
    seen28("28-detail-mismatch-not-recorded", "c40", "so it never reached the buffer"),
    seen28("28-detail-all-gathers", "c40",
           "the check's own `all_gather`s of every rank's fingerprint"),
    seen28("28-detail-analyzer-silent", "c40", "the analyzer finds nothing"),
    Claim('28-nccl-fr-default-2000', "28_flight_recorder", "c47",
          '2,000 entries unless\n`TORCH_FR_BUFFER_SIZE` (or its older name, `TORCH_NCCL_TRACE_BUFFER_SIZE`) says otherwise', 'source',
          'torch 2.13 (installed, git cf30153c), torch/include/torch/csrc/distributed/c10d/FlightRecorder.hpp:110-111 \'max_entries_ = getCvarInt({"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}, 2000);\' :114 \'enabled_ = max_entries_ > 0;\' (one template for both buffers); ProcessGroupNCCL.hpp:113-116 TORCH_NCCL_TRACE_BUFFER_SIZE; pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, stored version read with find_string/read_file id 23264163 (not pinned to cf30153c; its HeartbeatMonitor with dumpOnTimeoutOrEx_ matches the installed ProcessGroupNCCL.hpp:596-672): \'traceBufferSize_ = getCvarInt(TORCH_NCCL_TRACE_BUFFER_SIZE, 2000);\''),
    Claim('28-nccl-fr-records', "28_flight_recorder", "c47",
          'On NCCL every process group records into a Flight Recorder too', 'gpu-check',
          'fr-nccl-records-all-reduce'),
    Claim('28-nccl-fr-entry-name', "28_flight_recorder", "c47",
          'Its entries are named `nccl:all_reduce`', 'gpu-check',
          'fr-nccl-records-all-reduce'),
    Claim('28-nccl-dump-name', "28_flight_recorder", "c47",
          'A CUDA build dumps them with\n`_dump_nccl_trace()`; `_dump_fr_trace()` reads the other buffer, the one gloo fills', 'gpu-check',
          'fr-nccl-records-all-reduce'),
    Claim('28-nccl-dump-on-timeout', "28_flight_recorder", "c47",
          "With `TORCH_NCCL_DUMP_ON_TIMEOUT=1`, when a collective times out, torch writes every\nrank's buffer to a file on its own", 'source',
          'pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, stored version read with find_string/read_file id 23264163 (not pinned to cf30153c; its HeartbeatMonitor with dumpOnTimeoutOrEx_ matches the installed ProcessGroupNCCL.hpp:596-672): HeartbeatMonitor::HeartbeatMonitor \'dumpOnTimeoutOrEx_ = getCvarBool(TORCH_NCCL_DUMP_ON_TIMEOUT, true);\'; runLoop: \'bool checkDumpSignal = (dumpOnTimeoutOrEx_ && pg_->getUid() == 0)\', comment \'1. The current rank is the first to observe a timeout in watchdog ... 2. Other ranks detected the timeout and signal the current rank to dump\' (globalStore()->check({kStoreDumpKey})), then pg_->dumpDebuggingInfo(...), which writes when traceBufferSize_ > 0; installed ProcessGroupNCCL.hpp:71-75 TORCH_NCCL_DUMP_ON_TIMEOUT, :151 kStoreDumpKey = "exception_dump"; checklist item fr-nccl-dump-on-timeout-file (2 GPUs)'),
    Claim('28-nccl-dump-file-name', "28_flight_recorder", "c47",
          'Each rank writes one file, named after its\nglobal rank', 'source',
          'pytorch/pytorch torch/csrc/distributed/c10d/FlightRecorder.cpp, stored version read with read_file id 105864116 (its strings match the installed libtorch_cpu.so: \'TORCH_FR_DUMP_TEMP_FILE\', \'XDG_CACHE_HOME\', \'/.cache\', \'/torch\', \'comm_lib_trace_r...\', \'TORCH_NCCL_DEBUG_INFO_TEMP_FILE\', \'TORCH_FR_DUMP_DYNAMIC_FILE_NAME\'): getWriter: \'std::getenv("XDG_CACHE_HOME")\' else \'getCvarString({"HOME"}, "/tmp") + "/.cache"\', \'cacheRoot + "/torch"\', \'defaultLocation = cacheDirPath / "comm_lib_trace_rank_"\', \'getCvarString({"TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"}, ...)\'; installed FlightRecorder.hpp:80-84 \'filename_ = c10::str(namePrefix, rank);\'; pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, stored version read with find_string/read_file id 23264163 (not pinned to cf30153c; its HeartbeatMonitor with dumpOnTimeoutOrEx_ matches the installed ProcessGroupNCCL.hpp:596-672): dumpDebuggingInfo \'DebugInfoWriter::getWriter(globalRank())\''),
    Claim('28-nccl-analyzer-reads-prefix', "28_flight_recorder", "c47",
          "torch's analyzer reads that folder as it read ours", 'source',
          "run: /tmp/s60/nccl/fr_prefix_run.py (gloo, 2, 3, 4 ranks; dumps fixed with fr.for_analyzer, written as comm_lib_trace_rank_<rank>): analyzer exit 0 with and without '-p comm_lib_trace_rank_', '-j' prints the entries (fr_prefix_run.out); torch 2.13 (installed, git cf30153c) torch/distributed/flight_recorder/components/loader.py:28-31 read_dump 'rank = int(basename[len(prefix) :])', :50-67 _determine_prefix"),
    Claim('28-nccl-coll-per-call', "28_flight_recorder", "c47",
          '`NCCL_DEBUG=INFO` with `NCCL_DEBUG_SUBSYS=COLL` prints a line for\nevery collective call: its count, data type, buffers and stream', 'gpu-check',
          'nccl-coll-line-per-call'),
    Claim('28-nccl-tuning-per-call', "28_flight_recorder", "c47",
          'rank 0 prints the algorithm and protocol NCCL chose for each\ncall (NCCL 2.20 and later; by name since 2.24)', 'gpu-check',
          'nccl-tuning-per-call'),
    Claim('28-nccl-algo-proto', "28_flight_recorder", "c47",
          '`NCCL_ALGO` (`Ring`, `Tree`, ...) and\n`NCCL_PROTO` (`LL`, `LL128`, `Simple`) restrict that choice to the ones listed; a leading\n`^` excludes them instead', 'source',
          "NCCL docs, Environment Variables (NVIDIA/nccl docs/userguide/source/env.rst at v2.30.7-1): NCCL_ALGO 'defines which algorithms NCCL will use', 'Comma-separated list of algorithms (not case sensitive) among: Ring, Tree, ...', 'To specify algorithms to exclude (instead of include), start the list with ^'; NCCL_PROTO 'defines which protocol(s) NCCL will be allowed to use', 'LL, LL128, and Simple. To specify protocols to exclude (instead of to include), start the list with ^'"),
    seen28("28-py-spy-reads-stacks", "s00",
           "reads a running process's Python stack from\noutside"),
    Claim("28-py-spy-pauses-while-reading", "28_flight_recorder", "s00",
          "pausing it only while it reads", "source",
          "py-spy README (benfred/py-spy, 'How can I avoid pausing the Python program?'): "
          "'By setting the --nonblocking option, py-spy won't pause the target python you are "
          "profiling from' (helpers/debugging/stacks.py runs `py-spy dump` without it)"),
    Claim("28-py-spy-normal-user", "28_flight_recorder", "s06",
          "a normal user's py-spy reads that user's own processes, engines\nincluded, and is "
          "refused another user's", "test",
          "tests/helpers/test_py_spy_permissions.py::"
          "test_a_normal_users_py_spy_reads_its_own_processes_and_not_another_users"),
    Claim("28-px-sends-sigint", "28_flight_recorder", "i00",
          "ipyparallel's `%%px` answers ■ by sending\nSIGINT to every engine", "source",
          "ipyparallel 9.2 (installed) ipyparallel/client/magics.py:233 "
          "'signal_on_interrupt = \"SIGINT\"'; parallel_execute, :413-421 'except "
          "KeyboardInterrupt: if signal_on_interrupt is not None: ... "
          "self.view.client.send_signal(signal_on_interrupt, targets=targets, block=True)'; "
          "engine/nanny.py:182-190 signal_request 'self.parent_process.send_signal(sig)'"),
    Claim("28-stop-is-sigint", "28_flight_recorder", "i00",
          "`KernelManager.interrupt_kernel` signals the kernel when its spec's `interrupt_mode` is\n"
          "`\"signal\"`, the default, and its `LocalProvisioner.send_signal` uses `os.killpg`",
          "source",
          "jupyter_client (installed) kernelspec.py:36 'interrupt_mode = CaselessStrEnum"
          "([\"message\", \"signal\"], default_value=\"signal\")'; manager.py:752-755 "
          "'if interrupt_mode == \"signal\": ... self._async_signal_kernel(signal.SIGINT)'; "
          "provisioning/local_provisioner.py:88-92 'if self.pgid and hasattr(os, \"killpg\"): "
          "os.killpg(self.pgid, signum)'"),
    seen28("28-interrupt-python-stops", "i04",
           "Python code stops at once: each rank raised `KeyboardInterrupt` where it was"),
    seen28("28-interrupt-group-still-works", "i04", "so the process group still works"),
    seen28("28-interrupt-cell-returns", "i09",
           "The cell returned about a second after ■, with a line per rank: the last one "
           "finished,\nthe others are blocked in `all_reduce`"),
    gloo("28-sigint-waits-for-gloo", "28_flight_recorder", "i09",
         "a rank inside a gloo collective\nacts on SIGINT only when the collective returns, "
         "at the timeout, and then raises\n`KeyboardInterrupt`"),
    seen28("28-interrupt-next-cell-dropped", "i09",
           "a new `%%px` cell waits behind them, and then the engines\nthat were blocked "
           "drop it"),
    seen28("28-interrupt-group-broken", "i11b", "the process group is broken"),
    seen28("28-interrupt-start-cell-recovers", "i13",
           "The way on without restarting the kernel is the start cell"),
    seen28("28-straggler-stacks", "s06",
           "Every rank but the last waits in `all_reduce`, called from `step`; the last is "
           "still in\n`load_batch`"),
    Claim("28-py-spy-needs-root-for-non-children", "28_flight_recorder", "s06",
          "on\nLinux the default configuration requires root to attach to a process that is "
          "not a child", "source",
          "py-spy README (benfred/py-spy, 'When do you need to run as sudo?'): 'On Linux the "
          "default configuration is to require root permissions when attaching to a process "
          "that isn't a child' ... 'You can remove this restriction on Linux by setting the "
          "ptrace_scope sysctl variable'; the engines are children of the forkserver "
          "(helpers/runtime/forked_engines.py) or of ipyparallel's launcher, never of py-spy, "
          "which helpers/debugging/stacks.py starts as the kernel's child"),
    Claim("28-py-spy-docker-kubernetes", "28_flight_recorder", "s06",
          "in\nDocker, `--cap-add SYS_PTRACE`; in Kubernetes, the `SYS_PTRACE` capability",
          "source",
          "py-spy README (benfred/py-spy, 'How do I run py-spy in Docker?': 'This can be "
          "overridden by setting --cap-add SYS_PTRACE'; 'How do I run py-spy in Kubernetes?': "
          "'py-spy needs SYS_PTRACE to be able to read process memory. Kubernetes drops that "
          "capability by default')"),
)

# ---------------------------------------------------------------- running them

def _batch(rank, world_size, sources):
    """Run several cases one after the other in this disposable rank (see _batch_results)."""
    seen = {}
    for name, source in sources.items():
        namespace = dict(globals())
        exec(source, namespace)
        try:
            seen[name] = {"result": namespace[name](rank, world_size)}
        except Exception as err:
            seen[name] = {"error": f"{type(err).__name__}: {err}"}
    return seen


def _batched_keys(n: int, detail: bool) -> list[str]:
    return sorted({key for key, entry in CASES.items() if entry and not entry.alone
                   and entry.detail == detail and n in entry.sizes})


@lru_cache(maxsize=None)
def _batch_results(n: int, detail: bool) -> dict[str, list[RankOutcome]]:
    keys = _batched_keys(n, detail)
    sources = {CASES[key].case.__name__: case_source(CASES[key].case) for key in keys}
    outcomes = run_disposable(_batch, world_size=n, args={"sources": sources},
                              timeout_s=10.0, limit_s=120.0, detail=detail)
    assert all(o.returncode == 0 and o.error is None for o in outcomes), \
        [o.summary() for o in outcomes]
    per_key = {}
    for key in keys:
        name = CASES[key].case.__name__
        per_key[key] = [RankOutcome(o.rank, 0, o.result[name].get("result"),
                                    o.result[name].get("error"), o.seconds)
                        for o in outcomes]
    return per_key


# The cases that run alone mostly wait (for a timeout, a dead peer): run one after the
# other they kept the worker idle for 107 of the file's 123 s (tests/claims, -n 0). The
# runs the next tests need are started ahead, AHEAD in flight at once, so their waits
# overlap; each test still reads and judges its own run.
AHEAD = 4
_ahead: dict[tuple[str, int], DisposableRun] = {}      # started, not yet collected
_collected: set[tuple[str, int]] = set()


def _start_alone(key: str, n: int) -> DisposableRun:
    """Case `key` started on n ranks. Its limit (run_disposable's 60 s, or twice a longer
    timeout) counts from now; a test that comes later finds the ranks that reported
    waiting for it. A rank still working at the limit is killed: in one CI run under load,
    22-a2a-receive-too-few-aborts at 4 ranks had one still working at a 120 s limit."""
    entry = CASES[key]
    return start_disposable(entry.case, world_size=n, timeout_s=entry.timeout_s,
                            limit_s=max(60.0, 2 * entry.timeout_s), detail=entry.detail)


def _start_ahead(order: list[tuple[str, int]], key: str, n: int) -> None:
    """Start (key, n)'s run if it is not yet, then the next alone runs in `order` (the
    tests' order) until AHEAD are in flight; a test drops its run from `_ahead` as it
    collects it, and no run starts twice."""
    if (key, n) not in _ahead:
        _ahead[(key, n)] = _start_alone(key, n)
    later = order[order.index((key, n)) + 1:] if (key, n) in order else []
    for pair in later:
        if len(_ahead) >= AHEAD:
            return
        if pair not in _ahead and pair not in _collected:
            _ahead[pair] = _start_alone(*pair)


@lru_cache(maxsize=None)
def _outcomes(key: str, n: int,
              order: tuple[tuple[str, int], ...] = ()) -> list[RankOutcome]:
    """Every rank's outcome of case `key` at world size n (each case runs once per size);
    `order`: the alone runs the session's tests ask for, in their order."""
    entry = CASES[key]
    if entry.alone:
        _start_ahead(list(order), key, n)
        run = _ahead.pop((key, n))
        _collected.add((key, n))
        return run.outcomes()
    return _batch_results(n, entry.detail)[key]


GLOO_RUNS = [(c.key, c.evidence, n) for c in CLAIMS if c.kind == "gloo"
             and c.evidence != "13-detail-cost" for n in CASES[c.evidence].sizes]


@lru_cache(maxsize=1)
def _alone_order(session: pytest.Session) -> tuple[tuple[str, int], ...]:
    """The alone runs the selected test_gloo_claim tests need, in the order they run
    (read once per session: every alone test asks)."""
    order: list[tuple[str, int]] = []
    for item in session.items:
        spec = getattr(item, "callspec", None)
        if item.originalname == "test_gloo_claim" and spec is not None:
            pair = (spec.params["case_key"], spec.params["n"])
            if CASES[pair[0]].alone and pair not in order:
                order.append(pair)
    return tuple(order)


@pytest.mark.parametrize("claim_key, case_key, n", GLOO_RUNS,
                         ids=[f"{claim}-n{n}" for claim, _, n in GLOO_RUNS])
def test_gloo_claim(claim_key, case_key, n, request):
    """The behaviour the claim `claim_key` describes, run on `n` disposable gloo ranks."""
    order = _alone_order(request.session) if CASES[case_key].alone else ()
    CASES[case_key].expect(_outcomes(case_key, n, order), n)


def test_alone_runs_start_ahead_in_the_tests_order_each_once(monkeypatch):
    """At most AHEAD alone runs in flight, started in the tests' order, none twice, and
    each test gets its own run's outcomes."""
    here = sys.modules[__name__]

    class FakeRun:
        def __init__(self, key, n):
            self.pair = (key, n)

        def outcomes(self):
            return [RankOutcome(0, 0, self.pair)]

    started = []
    monkeypatch.setattr(here, "_ahead", {})
    monkeypatch.setattr(here, "_collected", set())
    monkeypatch.setattr(here, "_start_alone",
                        lambda key, n: started.append((key, n)) or FakeRun(key, n))
    alone = sorted(key for key, entry in CASES.items() if entry.alone)[:3]
    order = tuple((key, n) for key in alone for n in (2, 3))
    for pair in order:
        assert len(here._ahead) <= here.AHEAD
        assert here._outcomes.__wrapped__(*pair, order)[0].result == pair
    assert started == list(order) and not here._ahead


@pytest.mark.timing
@pytest.mark.parametrize("n", [2, 3])
def test_detail_checks_cost_time(n):
    """13-detail-cost: a 1-element all_reduce is slower with the DETAIL checks than without."""
    entry = CASES["13-detail-cost"]
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(3):   # alternated, the fastest of each: the suite runs other work beside
        for detail in (False, True):
            times[detail].append(max(_returned(o) for o in run_disposable(
                entry.case, world_size=n, detail=detail)))
    off, on = min(times[False]), min(times[True])
    assert on > 1.5 * off, times


# ---------------------------------------------------------------- the ledger itself

def _cell_text(stem: str, cell_id: str) -> str:
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.get("id") == cell_id:
            return cell.source
    raise AssertionError(f"{stem} has no cell {cell_id}")


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.docs
@pytest.mark.parametrize("claim", CLAIMS, ids=[c.key for c in CLAIMS])
def test_the_quote_is_still_in_its_cell(claim):
    assert _flat(claim.quote) in _flat(_cell_text(claim.notebook, claim.cell)), \
        f"{claim.notebook} cell {claim.cell} no longer says: {claim.quote!r}"


def test_keys_are_unique_and_every_claim_has_evidence():
    keys = [c.key for c in CLAIMS]
    assert len(keys) == len(set(keys))
    checklist = {item.key for item in CHECKLIST}
    for c in CLAIMS:
        assert c.kind in ("gloo", "test", "gpu-check", "source"), c
        if c.kind == "gloo":
            assert CASES.get(c.evidence) is not None, f"{c.key}: no case {c.evidence!r}"
        elif c.kind == "gpu-check":
            assert c.evidence in checklist, f"{c.key}: no gpu-check item {c.evidence!r}"
        elif c.kind == "test":
            path, name = c.evidence.split("::")
            assert f"def {name}(" in (REPO / path).read_text(), c.evidence
        else:
            assert len(c.evidence) > 20, c   # names the document or source file


def test_every_case_backs_a_claim():
    used = {c.evidence for c in CLAIMS if c.kind == "gloo"}
    assert set(CASES) <= used, set(CASES) - used


@pytest.mark.docs
def test_ledger_covers_every_notebook_and_docs_claims_md_states_its_size():
    from tools import series

    assert {c.notebook[:2] for c in CLAIMS} == {e.number for e in series.load().values()}
    page = (REPO / "docs" / "claims.md").read_text()
    gloo_tested = sum(c.kind in ("gloo", "test") for c in CLAIMS)
    nccl = sum(c.kind in ("gpu-check", "source") for c in CLAIMS)
    assert f"{len(CLAIMS)} claims" in page, "docs/claims.md: the ledger's size is out of date"
    assert f"{gloo_tested} run on gloo" in page and f"{nccl} NCCL or nccl-tests" in page


# ---------------------------------------------------------------- gpu-check's checklist

def test_gpu_checklist_marks_what_needs_more_gpus():
    keys = [item.key for item in CHECKLIST]
    assert len(keys) == len(set(keys))
    by_key = {item.key: item for item in CHECKLIST}
    for key in ("one-rank-group", "cpu-tensor-refused", "bitwise-refused",
                "premul-sum-accepted", "isend-to-self", "nccl-bytes-not-on-sockets"):
        assert by_key[key].min_gpus == 1 and by_key[key].check is not None
    assert by_key["more-ranks-than-gpus"].min_gpus == 0
    assert by_key["reduce-non-dst-untouched"].min_gpus == 2
    assert all(item.source and item.claim for item in CHECKLIST)


def test_gpu_check_without_a_gpu_lists_the_checklist_and_exits_2():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TUTORIAL_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "tools.gpu_check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no GPU visible" in done.stderr
    for item in CHECKLIST:
        assert item.claim in done.stdout
    assert done.stdout.count("2+ GPUs") >= 2 and "1+ GPUs" in done.stdout
    # the one item a machine without GPUs can check: the refusal names the problem
    assert "✓  [README] NCCL with more ranks than GPUs is refused" in done.stdout
    assert "✗" not in done.stdout
