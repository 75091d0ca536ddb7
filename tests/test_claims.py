"""The ledger: what notebooks 00-13 say about torch, gloo, NCCL, nccl-tests and ipyparallel.

CLAIMS lists every such sentence: its notebook and cell, a quote that must still be in
that cell (so ledger and notebooks cannot drift apart), and its evidence:

- ``gloo``: a case below, run for real on disposable gloo processes (helpers.disposable)
  at the world sizes given, with an expectation that fails when the behaviour changes;
  the test id names the claim (``test_gloo_claim[05-avg-int-leaves-the-sum-n2]``);
- ``test``: an existing test that runs the notebook's own cells on gloo;
- ``gpu-check``: an NCCL-only claim, with its source, checked by ``make gpu-check``
  (helpers/nccl_claims.py; some items need 2+ GPUs and say so);
- ``source``: a behaviour of NCCL or nccl-tests that only its documentation or source
  shows here (named in the entry).
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import nbformat
import pytest

from helpers.disposable import RankOutcome, case_source, run_disposable
from helpers.nccl_claims import CHECKLIST

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"


@dataclass(frozen=True)
class Claim:
    key: str        # names the claim in test ids
    notebook: str   # notebook stem
    cell: str       # cell id
    quote: str      # a piece of the sentence, as it stands in the cell
    kind: str       # "gloo", "test", "gpu-check" or "source"
    evidence: str   # gloo: the case's key; test: path::name; gpu-check: item key; source


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
          "test", "tests/test_notebook00.py::test_notebook00_default_reports_each_of_4_ranks_once"),
    Claim("00-nccl-one-gpu-per-rank", "00_ranks_and_world", "c01",
          "**NCCL** between GPUs (one GPU per rank)", "gpu-check", "one-rank-group"),
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
          "tests/test_notebooks_p2p_ring.py::test_ring_all_reduce_notebook"),
    # 11 bandwidth
    Claim("11-nccl-tests-w1-default", "11_bandwidth", "c01",
          "nccl-tests' own default is `-w 1`", "source",
          "nccl-tests src/common.cu: warmup_iters = 1 (option -w)"),
    Claim("11-nccl-tests-time-averaged", "11_bandwidth", "c06",
          "its `-a 1` default: time averaged over the ranks", "source",
          "nccl-tests src/common.cu: average = 1 (option -a)"),
    Claim("11-busbw-factors", "11_bandwidth", "c04", "| all_reduce | 2(*n* − 1)/*n* |", "test",
          "tests/test_bench.py::test_bus_factor_matches_nccl_tests"),
    Claim("11-every-size-runs", "11_bandwidth", "c08",
          "Every size is a point, as in nccl-tests", "test",
          "tests/test_bench.py::test_cli_json_covers_every_collective_and_size"),
    Claim("11-trim-16-bytes", "11_bandwidth", "c08",
          "trimmed down to a multiple of\n16 bytes (nccl-tests 2.13.12 and later)", "test",
          "tests/test_bench.py::test_plan_split_collectives_trim_pieces_to_16_bytes"),
    Claim("11-blocking-wait-polls", "11_bandwidth", "c06",
          "with it that wait polls the host until the\ncall is done", "source",
          "torch ProcessGroupNCCL WorkNCCL::synchronize (blocking wait loop); "
          "make gpu-check prints both timings"),
    # 12 backend support
    gloo("12-refusals-on-every-rank", "12_backend_support", "c06",
         "every rank raises the same error and none is left waiting",
         "bitwise-int-and-bool-only"),
    gloo("12-avg-int-leaves-the-sum", "12_backend_support", "c12",
         "`tensor` is left holding the sum", "avg-int-leaves-the-sum"),
    Claim("12-premul-sum-nccl-only", "12_backend_support", "c18", "It exists for NCCL only",
          "gpu-check", "premul-sum-accepted"),
    # 13 debugging
    gloo("13-detail-names-mismatch", "13_debugging", "c06",
         "That is the DETAIL check: before the real all_reduce"),
    gloo("13-no-checks-shape-kills-at-2", "13_debugging", "c08",
         "at 2 ranks gloo **kills one process**", "all-reduce-shape-mismatch"),
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
          "test", "tests/test_notebook_debugging.py::"
          "test_short_scatter_list_errors_within_the_timeout_then_a_restart_works"),
    gloo("13-detail-names-absent-ranks", "13_debugging", "c20",
         "tells rank 0 *who* did not arrive"),
    Claim("13-ipyparallel-drops-dead-engine", "13_debugging", "c26",
          "ipyparallel has dropped the dead engine", "test",
          "tests/test_notebook_debugging.py::"
          "test_a_rank_killed_mid_collective_is_named_and_the_start_cell_recovers"),
    Claim("13-nccl-debug-at-init", "13_debugging", "c28",
          "NCCL reads it when a communicator is created", "source",
          "NCCL docs, Environment Variables: NCCL_DEBUG"),
    Claim("13-start-cell-refuses-more-ranks-than-gpus", "13_debugging", "c33",
          "The start cell checks what it is asked for before it starts any process",
          "gpu-check", "more-ranks-than-gpus"),
)

# ---------------------------------------------------------------- the gloo cases
# Each case runs on every disposable rank as case(rank, world_size) and returns what it
# saw; its expectation gets every rank's outcome and the world size. A case that may kill
# a process or wait for a timeout runs alone; the others run one after another in one
# disposable group per world size.


@dataclass(frozen=True)
class GlooCase:
    case: Callable[..., Any]
    expect: Callable[[list[RankOutcome], int], None]
    sizes: tuple[int, ...] = (2, 3)
    alone: bool = False
    detail: bool = False
    timeout_s: float = 5.0


CASES: dict[str, GlooCase] = {}


def case(key: str, sizes: tuple[int, ...] = (2, 3), alone: bool = False,
         detail: bool = False, timeout_s: float = 5.0):
    """Register `key`'s case; the function defined right after it is its expectation."""
    def register(function):
        CASES[key] = GlooCase(function, lambda outcomes, n: None, sizes, alone, detail,
                              timeout_s)
        return function
    return register


def expect(key: str):
    def register(function):
        CASES[key] = GlooCase(CASES[key].case, function, *_rest(CASES[key]))
        return function
    return register


def _rest(entry: GlooCase) -> tuple:
    return entry.sizes, entry.alone, entry.detail, entry.timeout_s


def _error(outcome: RankOutcome) -> str:
    assert outcome.error is not None, f"rank {outcome.rank} did not raise: {outcome.summary()}"
    return outcome.error


def _returned(outcome: RankOutcome) -> Any:
    assert outcome.returncode == 0 and outcome.error is None, outcome.summary()
    return outcome.result


@case("only-some-ranks-call", alone=True, timeout_s=2.0)
def only_some_ranks_call(rank, world_size):
    if rank == 0:
        dist.all_reduce(torch.ones(1))   # nobody else calls it
    return "not called"


@expect("only-some-ranks-call")
def _(outcomes, n):
    assert "timed out" in _error(outcomes[0]).lower() or "timeout" in outcomes[0].error.lower()
    assert 1.5 <= outcomes[0].seconds < 30
    assert all(_returned(o) == "not called" for o in outcomes[1:])


@case("01-scatter-list-off-src-refused")
def scatter_list_off_src(rank, world_size):
    if rank == 0:
        return "src: not called"
    try:
        dist.scatter(torch.zeros(2), [torch.zeros(2)] * world_size, src=0)
    except ValueError as err:
        return f"ValueError: {err}"
    return "accepted"


@expect("01-scatter-list-off-src-refused")
def _(outcomes, n):
    assert all(_returned(o).startswith("ValueError") for o in outcomes[1:])


@case("01-scatter-wrong-length-refused-on-src")
def scatter_wrong_length(rank, world_size):
    if rank != 0:
        return "not called"
    try:
        dist.scatter(torch.zeros(2), [torch.zeros(2)] * (world_size + 1), src=0)
    except (ValueError, RuntimeError) as err:
        return f"{type(err).__name__}: {err}"
    return "accepted"


@expect("01-scatter-wrong-length-refused-on-src")
def _(outcomes, n):
    assert _returned(outcomes[0]).startswith(("ValueError", "RuntimeError"))


@case("02-gather-list-off-dst-refused")
def gather_list_off_dst(rank, world_size):
    if rank == 0:
        return "dst: not called"
    try:
        dist.gather(torch.zeros(2), [torch.zeros(2) for _ in range(world_size)], dst=0)
    except (ValueError, RuntimeError) as err:
        return f"{type(err).__name__}: {err}"
    return "accepted"


@expect("02-gather-list-off-dst-refused")
def _(outcomes, n):
    assert all(_returned(o).startswith(("ValueError", "RuntimeError")) for o in outcomes[1:])


@case("02-gather-wrong-list-refused-on-dst")
def gather_wrong_list(rank, world_size):
    if rank != 0:
        return []
    seen = []
    for wrong in (None, [torch.zeros(2) for _ in range(world_size + 1)]):
        try:
            dist.gather(torch.zeros(2), wrong, dst=0)
            seen.append("accepted")
        except (ValueError, RuntimeError) as err:
            seen.append(type(err).__name__)
    return seen


@expect("02-gather-wrong-list-refused-on-dst")
def _(outcomes, n):
    assert _returned(outcomes[0]) and "accepted" not in outcomes[0].result


@case("02-aliased-list-not-caught")
def aliased_gather(rank, world_size):
    slots = [torch.zeros(2)] * world_size if rank == 0 else None
    dist.gather(torch.full((2,), float(rank + 1)), slots, dst=0)
    return slots


@expect("02-aliased-list-not-caught")
def _(outcomes, n):
    slots = _returned(outcomes[0])
    assert len(slots) == n and all(s == slots[0] for s in slots)   # one tensor, n names


@case("03-python-number-refused")
def broadcast_python_number(rank, world_size):
    try:
        dist.broadcast(10 * rank + 1, src=0)
    except (TypeError, ValueError, RuntimeError, AttributeError) as err:
        return type(err).__name__
    return "accepted"


@expect("03-python-number-refused")
def _(outcomes, n):
    assert all(_returned(o) != "accepted" for o in outcomes)


@case("broadcast-longer", alone=True)
def broadcast_longer(rank, world_size):
    tensor = torch.full((3,), 7.0) if rank == 0 else torch.zeros(2)
    dist.broadcast(tensor, src=0)
    return tensor


def _killed_by_gloo(outcome: RankOutcome) -> None:
    assert outcome.signal == "SIGABRT" and outcome.returncode == -6, outcome.summary()
    assert "Received data size doesn't match expected size" in (outcome.gloo_message or ""), \
        outcome.stderr[-500:]


@expect("broadcast-longer")
def _(outcomes, n):
    assert _returned(outcomes[0]) == [7.0, 7.0, 7.0]
    assert any(o.killed for o in outcomes[1:])
    for o in outcomes[1:]:
        if o.killed:
            _killed_by_gloo(o)


@case("03-broadcast-shorter-accepted")
def broadcast_shorter(rank, world_size):
    tensor = torch.full((2,), 7.0) if rank == 0 else torch.zeros(3)
    dist.broadcast(tensor, src=0)
    return tensor


@expect("03-broadcast-shorter-accepted")
def _(outcomes, n):
    assert all(_returned(o) == [7.0, 7.0, 0.0] for o in outcomes[1:])


@case("04-reduce-non-dst-depends-on-size", sizes=(2, 3, 4))
def reduce_two_sizes(rank, world_size):
    seen = {}
    for numel in (1, 8):
        tensor = torch.arange(1.0, numel + 1) + 10 * rank
        dist.reduce(tensor, dst=0)
        seen[str(numel)] = tensor
    return seen


@expect("04-reduce-non-dst-depends-on-size")
def _(outcomes, n):
    held = [_returned(o) for o in outcomes]
    inputs = {numel: [[10.0 * r + i for i in range(1, numel + 1)] for r in range(n)]
              for numel in (1, 8)}
    for numel in (1, 8):
        assert held[0][str(numel)] == [sum(col) for col in zip(*inputs[numel])]
    changed_8 = [held[r]["8"] != inputs[8][r] for r in range(1, n)]
    assert any(changed_8), "8 elements: gloo left every non-dst rank as it was"
    if n == 2:   # the issue's measurement: 1 element untouched, 8: rank 1's half reduced
        assert held[1]["1"] == inputs[1][1]
        assert held[1]["8"][:4] == inputs[8][1][:4]
        assert held[1]["8"][4:] == held[0]["8"][4:]


@case("04-dst-out-of-range-refused")
def reduce_dst_out_of_range(rank, world_size):
    try:
        dist.reduce(torch.zeros(2), dst=world_size)
    except (ValueError, RuntimeError) as err:
        return type(err).__name__
    return "accepted"


@expect("04-dst-out-of-range-refused")
def _(outcomes, n):
    assert all(_returned(o) != "accepted" for o in outcomes)


@case("bitwise-int-and-bool-only")
def ops_by_dtype(rank, world_size):
    seen = {}
    for dtype in ("float32", "int64", "bool"):
        for op in ("AVG", "BAND", "BOR", "BXOR"):
            if dtype == "bool" and op == "AVG":
                continue
            tensor = torch.tensor([1, rank % 2], dtype=getattr(torch, dtype))
            try:
                dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op))
                seen[f"{op}/{dtype}"] = "accepted"
            except (RuntimeError, ValueError, TypeError) as err:
                seen[f"{op}/{dtype}"] = str(err).splitlines()[0]
                seen[f"{op}/{dtype} buffer"] = tensor
    seen["rank"] = rank
    return seen


@expect("bitwise-int-and-bool-only")
def _(outcomes, n):
    seen = [_returned(o) for o in outcomes]
    refused = [{k: v for k, v in s.items() if "buffer" not in k and k != "rank"} for s in seen]
    assert all(r == refused[0] for r in refused), "the ranks disagree on what is refused"
    first = seen[0]
    for s in seen:   # refused before any data moved: every rank's float buffer is its own
        for op in ("BAND", "BOR", "BXOR"):
            assert s[f"{op}/float32 buffer"] == [1.0, float(s["rank"] % 2)]
    for op in ("BAND", "BOR", "BXOR"):
        assert first[f"{op}/int64"] == "accepted" and first[f"{op}/bool"] == "accepted"
        assert "non-integral dtype" in first[f"{op}/float32"], first[f"{op}/float32"]
    assert first["AVG/float32"] == "accepted"
    assert "can't be cast to the desired output type Long" in first["AVG/int64"]


@case("avg-int-leaves-the-sum")
def avg_on_ints(rank, world_size):
    seen = {}
    for collective in ("all_reduce", "reduce"):
        tensor = torch.tensor([rank + 1, 2 * rank + 3])
        try:
            if collective == "all_reduce":
                dist.all_reduce(tensor, op=dist.ReduceOp.AVG)
            else:
                dist.reduce(tensor, dst=0, op=dist.ReduceOp.AVG)
            seen[collective] = {"buffer": tensor, "error": None}
        except RuntimeError as err:
            seen[collective] = {"buffer": tensor, "error": str(err).splitlines()[0]}
    return seen


@expect("avg-int-leaves-the-sum")
def _(outcomes, n):
    total = [sum(r + 1 for r in range(n)), sum(2 * r + 3 for r in range(n))]
    for o in outcomes:
        seen = _returned(o)
        assert "can't be cast" in seen["all_reduce"]["error"]
        assert seen["all_reduce"]["buffer"] == total
    assert "can't be cast" in outcomes[0].result["reduce"]["error"]
    assert outcomes[0].result["reduce"]["buffer"] == total



@case("all-reduce-shape-mismatch", sizes=(2, 3, 4), alone=True, timeout_s=3.0)
def all_reduce_shapes_differ(rank, world_size):
    tensor = torch.ones(5 if rank == 1 else 4)
    dist.all_reduce(tensor)
    return tensor


def _one_killed_others_fail_fast(outcomes: list[RankOutcome]) -> None:
    killed = [o for o in outcomes if o.killed]
    assert killed, [o.summary() for o in outcomes]
    for o in killed:
        _killed_by_gloo(o)
    for o in outcomes:
        if not o.killed and o.error is not None:   # no timeout: they fail at once
            assert o.seconds < 3, o.summary()
        assert o.error is None or "Timed out" not in o.error, o.summary()


@expect("all-reduce-shape-mismatch")
def _(outcomes, n):
    if n == 2:   # one rank killed, its peer fails at once: no wrong sum
        _one_killed_others_fail_fast(outcomes)
        assert not any(o.returncode == 0 and o.error is None for o in outcomes)
        return
    # 3+ ranks: nobody killed; some return a wrong sum, silently; the others time out
    assert not any(o.killed for o in outcomes), [o.summary() for o in outcomes]
    returned = [o.result for o in outcomes if o.returncode == 0 and o.error is None]
    assert returned and all(r != [float(n)] * 4 for r in returned), returned
    assert any(o.error and "Timed out" in o.error for o in outcomes)


@case("all-reduce-dtype-mismatch", sizes=(2, 3, 4), alone=True, timeout_s=3.0)
def all_reduce_dtypes_differ(rank, world_size):
    tensor = torch.ones(4, dtype=torch.float64 if rank == 1 else torch.float32)
    dist.all_reduce(tensor)
    return tensor


@expect("all-reduce-dtype-mismatch")
def _(outcomes, n):
    killed = [o for o in outcomes if o.killed]
    assert killed, [o.summary() for o in outcomes]
    for o in killed:
        _killed_by_gloo(o)
    assert not any(o.returncode == 0 and o.error is None for o in outcomes), "a wrong sum"


@case("06-all-gather-wrong-length-refused")
def all_gather_too_long(rank, world_size):
    try:
        dist.all_gather([torch.zeros(2) for _ in range(world_size + 1)], torch.ones(2))
    except (ValueError, RuntimeError) as err:
        return type(err).__name__
    return "accepted"


@expect("06-all-gather-wrong-length-refused")
def _(outcomes, n):
    assert all(_returned(o) != "accepted" for o in outcomes)


@case("06-all-gather-into-tensor-deprecated")
def old_all_gather_name(rank, world_size):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.zeros(2 * world_size)
        dist.all_gather_into_tensor(out, torch.full((2,), float(rank)))
    return {"out": out, "warnings": [str(w.message) for w in caught]}


@expect("06-all-gather-into-tensor-deprecated")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen["out"] == [float(r) for r in range(n) for _ in range(2)]   # still works
        assert any("all_gather_single" in w for w in seen["warnings"]), seen["warnings"]


@case("06-output-same-size-refused")
def all_gather_single_too_small(rank, world_size):
    try:
        dist.all_gather_single(torch.zeros(2), torch.ones(2))
    except (ValueError, RuntimeError) as err:
        return type(err).__name__
    return "accepted"


@expect("06-output-same-size-refused")
def _(outcomes, n):
    assert all(_returned(o) != "accepted" for o in outcomes)


@case("06-gloo-flat-output-only")
def all_gather_single_rows(rank, world_size):
    try:
        dist.all_gather_single(torch.zeros(world_size, 2), torch.ones(2))
    except (ValueError, RuntimeError) as err:
        return type(err).__name__
    return "accepted"


@expect("06-gloo-flat-output-only")
def _(outcomes, n):
    assert all(_returned(o) != "accepted" for o in outcomes)


@case("07-reduce-scatter-tensor-deprecated")
def old_reduce_scatter_name(rank, world_size):
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.zeros(2)
        dist.reduce_scatter_tensor(out, torch.ones(2 * world_size))
    return {"out": out, "warnings": [str(w.message) for w in caught]}


@expect("07-reduce-scatter-tensor-deprecated")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen["out"] == [float(n)] * 2
        assert any("reduce_scatter_single" in w for w in seen["warnings"]), seen["warnings"]


@case("07-wrong-length-refused")
def reduce_scatter_too_long(rank, world_size):
    try:
        dist.reduce_scatter(torch.zeros(2), [torch.ones(2) for _ in range(world_size + 1)])
    except (ValueError, RuntimeError) as err:
        return type(err).__name__
    return "accepted"


@expect("07-wrong-length-refused")
def _(outcomes, n):
    assert all(_returned(o) != "accepted" for o in outcomes)


@case("08-wrong-length-refused")
def all_to_all_too_long(rank, world_size):
    try:
        dist.all_to_all([torch.zeros(2) for _ in range(world_size + 1)],
                        [torch.ones(2) for _ in range(world_size + 1)])
    except (ValueError, RuntimeError) as err:
        return type(err).__name__
    return "accepted"


@expect("08-wrong-length-refused")
def _(outcomes, n):
    assert all(_returned(o) != "accepted" for o in outcomes)


@case("08-gloo-list-uneven-refused")
def all_to_all_uneven_list(rank, world_size):
    ins = [torch.full((j + 1,), 10.0 * rank + j + 1) for j in range(world_size)]
    outs = [torch.zeros(rank + 1) for _ in range(world_size)]
    try:
        dist.all_to_all(outs, ins)
    except (ValueError, RuntimeError) as err:
        return type(err).__name__
    return "accepted"


@expect("08-gloo-list-uneven-refused")
def _(outcomes, n):
    assert all(_returned(o) != "accepted" for o in outcomes)


@case("splits-more", sizes=(2,), alone=True)
def splits_more(rank, world_size):
    input_split_sizes = [1, 3] if rank == 0 else [1, 1]
    output_split_sizes = [2, 1] if rank == 1 else [1, 1]
    output = torch.zeros(sum(output_split_sizes))
    dist.all_to_all_single(output, torch.ones(sum(input_split_sizes)), output_split_sizes,
                           input_split_sizes)
    return output


@expect("splits-more")
def _(outcomes, n):
    _returned(outcomes[0])            # the sender returns normally
    _killed_by_gloo(outcomes[1])      # the receiver is killed


@case("08-splits-fewer-accepted", sizes=(2,))
def splits_fewer(rank, world_size):
    output_split_sizes = [2, 1] if rank == 1 else [1, 1]
    output = torch.zeros(sum(output_split_sizes))
    dist.all_to_all_single(output, torch.full((2,), 10.0 * rank + 1), output_split_sizes,
                           [1, 1])
    return output


@expect("08-splits-fewer-accepted")
def _(outcomes, n):
    assert _returned(outcomes[1]) == [1.0, 0.0, 11.0]


@case("both-send-first", alone=True, timeout_s=10.0)
def both_send_first(rank, world_size):
    import time
    from datetime import timedelta
    pair = dist.new_group([0, 1], timeout=timedelta(seconds=2), backend="gloo")
    seen = {}
    if rank in (0, 1):
        start = time.monotonic()
        try:
            dist.send(torch.ones(1), dst=1 - rank, group=pair)   # 1 element: still waits
            dist.recv(torch.zeros(1), src=1 - rank, group=pair)
            seen["both sent"] = "went through"
        except RuntimeError as err:
            seen["both sent"] = str(err).splitlines()[0]
        seen["seconds"] = time.monotonic() - start
        start = time.monotonic()
        try:
            dist.send(torch.zeros(1), dst=1 - rank, group=pair)
            seen["later"] = "went through"
        except RuntimeError as err:
            seen["later"] = str(err).splitlines()[0]
        seen["later seconds"] = time.monotonic() - start
        dist.destroy_process_group(pair)
    ones = torch.ones(1)
    dist.all_reduce(ones)
    seen["default group"] = ones.item()
    return seen


@expect("both-send-first")
def _(outcomes, n):
    for o in outcomes[:2]:
        seen = _returned(o)
        assert seen["both sent"] != "went through" and 1.5 <= seen["seconds"] < 10, seen
        assert seen["later"] != "went through" and seen["later seconds"] < 1, seen
    assert all(o.result["default group"] == n for o in outcomes)


@case("09-isend-progresses-on-gloo")
def nonblocking_swap(rank, world_size):
    if rank > 1:
        return "not in the pair"
    outbox, inbox = torch.full((1 << 20,), float(rank + 1)), torch.zeros(1 << 20)
    requests = [dist.isend(outbox, dst=1 - rank), dist.irecv(inbox, src=1 - rank)]
    for request in requests:
        request.wait()
    return bool(torch.all(inbox == float(2 - rank)))


@expect("09-isend-progresses-on-gloo")
def _(outcomes, n):
    assert _returned(outcomes[0]) is True and _returned(outcomes[1]) is True


@case("09-send-to-self-refused")
def send_to_self(rank, world_size):
    try:
        dist.send(torch.ones(2), dst=rank)
    except ValueError as err:
        return f"ValueError: {err}"
    return "accepted"


@expect("09-send-to-self-refused")
def _(outcomes, n):
    assert all(_returned(o).startswith("ValueError") for o in outcomes)


@case("09-isend-to-self-gloo-raises")
def isend_to_self(rank, world_size):
    seen = {}
    try:
        dist.isend(torch.ones(2), dst=rank).wait()
        seen["isend"] = "accepted"
    except RuntimeError as err:
        seen["isend"] = str(err)
    total = torch.ones(1)
    dist.all_reduce(total)
    seen["then all_reduce"] = total.item()
    return seen


@expect("09-isend-to-self-gloo-raises")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert "Pair is not connected" in seen["isend"], seen
        assert seen["then all_reduce"] == n


@case("09-detail-p2p-advances-sequence", alone=True, detail=True)
def send_then_all_reduce(rank, world_size):
    if rank == 0:
        dist.send(torch.ones(2), dst=1)
    elif rank == 1:
        dist.recv(torch.zeros(2), src=0)
    total = torch.ones(1)
    try:
        dist.all_reduce(total)
    except RuntimeError as err:
        return str(err)
    return total


@expect("09-detail-p2p-advances-sequence")
def _(outcomes, n):
    seen = [_returned(o) for o in outcomes]
    if n == 2:
        assert seen == [[2.0], [2.0]]
    else:
        assert all(isinstance(s, str) and "Sequence number" in s for s in seen), seen


@case("09-dtype-not-checked")
def float_bytes_into_ints(rank, world_size):
    if rank == 0:
        dist.send(torch.tensor([1.5, 2.5], dtype=torch.float64), dst=1)
    elif rank == 1:
        wrong = torch.zeros(2, dtype=torch.int64)
        dist.recv(wrong, src=0)
        return wrong
    return None


@expect("09-dtype-not-checked")
def _(outcomes, n):
    bits = [struct.unpack("<q", struct.pack("<d", x))[0] for x in (1.5, 2.5)]
    assert _returned(outcomes[1]) == bits


@case("send-longer", sizes=(2,), alone=True)
def send_longer(rank, world_size):
    if rank == 0:
        dist.send(torch.ones(3), dst=1)
        return "sent"
    received = torch.zeros(2)
    dist.recv(received, src=0)
    return received


@expect("send-longer")
def _(outcomes, n):
    assert _returned(outcomes[0]) == "sent"
    _killed_by_gloo(outcomes[1])


@case("09-smaller-message-accepted", sizes=(2,))
def send_shorter(rank, world_size):
    if rank == 0:
        dist.send(torch.ones(2), dst=1)
        return "sent"
    received = torch.zeros(3)
    dist.recv(received, src=0)
    return received


@expect("09-smaller-message-accepted")
def _(outcomes, n):
    assert _returned(outcomes[1]) == [1.0, 1.0, 0.0]


@case("13-detail-names-mismatch", detail=True)
def detail_shape_mismatch(rank, world_size):
    tensor = torch.ones(4 + (rank == 1))
    seen = {}
    try:
        dist.all_reduce(tensor)
        seen["mismatch"] = "accepted"
    except RuntimeError as err:
        seen["mismatch"] = str(err)
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    seen["then"] = tensor
    return seen


@expect("13-detail-names-mismatch")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert "Detected mismatch between collectives" in seen["mismatch"]
        assert "TensorShape=[5]" in seen["mismatch"]
        assert seen["then"] == [float(n)] * 4   # nothing was sent: the group still works


@case("13-detail-cost", alone=True)
def detail_cost(rank, world_size):
    import time
    tensor = torch.ones(1)
    for _ in range(10):
        dist.all_reduce(tensor)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(100):
        dist.all_reduce(tensor)
    return (time.perf_counter() - start) / 100 * 1e6


@case("13-detail-src-refused", detail=True)
def detail_bad_src(rank, world_size):
    seen = {}
    try:
        dist.broadcast(torch.ones(2), src=world_size)
        seen["bad src"] = "accepted"
    except (ValueError, RuntimeError) as err:
        seen["bad src"] = type(err).__name__
    tensor = torch.full((2,), float(rank))
    dist.broadcast(tensor, src=world_size - 1)
    seen["then"] = tensor
    return seen


@expect("13-detail-src-refused")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen["bad src"] != "accepted" and seen["then"] == [float(n - 1)] * 2


@case("13-short-scatter-list", alone=True, timeout_s=2.0)
def short_scatter_list(rank, world_size):
    import time
    start = time.monotonic()
    parts = [torch.zeros(2) for _ in range(world_size - 1)] if rank == 0 else None
    try:
        dist.scatter(torch.zeros(2), parts, src=0)
        return {"error": None, "seconds": time.monotonic() - start}
    except (ValueError, RuntimeError) as err:
        return {"error": type(err).__name__, "seconds": time.monotonic() - start}


@expect("13-short-scatter-list")
def _(outcomes, n):
    src = _returned(outcomes[0])
    assert src["error"] and src["seconds"] < 1
    for o in outcomes[1:]:
        assert _returned(o)["error"] and 1.5 <= o.result["seconds"] < 30


@case("13-detail-names-absent-ranks", sizes=(3,), alone=True, detail=True, timeout_s=2.0)
def alone_in_a_collective(rank, world_size):
    if rank != 0:
        return "not called"
    dist.all_reduce(torch.ones(2))


@expect("13-detail-names-absent-ranks")
def _(outcomes, n):
    error = _error(outcomes[0])
    assert "failed to pass monitoredBarrier" in error and "1, 2" in error, error



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


@lru_cache(maxsize=None)
def _outcomes(key: str, n: int) -> list[RankOutcome]:
    """Every rank's outcome of case `key` at world size n (each case runs once per size)."""
    entry = CASES[key]
    if entry.alone:
        return run_disposable(entry.case, world_size=n, timeout_s=entry.timeout_s,
                              limit_s=60.0, detail=entry.detail)
    return _batch_results(n, entry.detail)[key]


GLOO_RUNS = [(c.key, c.evidence, n) for c in CLAIMS if c.kind == "gloo"
             and c.evidence != "13-detail-cost" for n in CASES[c.evidence].sizes]


@pytest.mark.parametrize("claim_key, case_key, n", GLOO_RUNS,
                         ids=[f"{claim}-n{n}" for claim, _, n in GLOO_RUNS])
def test_gloo_claim(claim_key, case_key, n):
    """The behaviour the claim `claim_key` describes, run on `n` disposable gloo ranks."""
    CASES[case_key].expect(_outcomes(case_key, n), n)


@pytest.mark.parametrize("n", [2, 3])
def test_detail_checks_cost_time(n):
    """13-detail-cost: a 1-element all_reduce is slower with the DETAIL checks than without."""
    entry = CASES["13-detail-cost"]
    off, on = (max(_returned(o) for o in run_disposable(entry.case, world_size=n, detail=d))
               for d in (False, True))
    assert on > 1.5 * off, (off, on)


# ---------------------------------------------------------------- the ledger itself

def _cell_text(stem: str, cell_id: str) -> str:
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.get("id") == cell_id:
            return cell.source
    raise AssertionError(f"{stem} has no cell {cell_id}")


def _flat(text: str) -> str:
    return " ".join(text.split())


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


def test_ledger_covers_every_notebook_and_the_readme_states_its_size():
    assert {c.notebook[:2] for c in CLAIMS} == {f"{i:02d}" for i in range(14)}
    readme = (REPO / "README.md").read_text()
    gloo_tested = sum(c.kind in ("gloo", "test") for c in CLAIMS)
    nccl = sum(c.kind in ("gpu-check", "source") for c in CLAIMS)
    assert f"{len(CLAIMS)} claims" in readme, "README: the ledger's size is out of date"
    assert f"{gloo_tested} run on gloo" in readme and f"{nccl} NCCL or nccl-tests" in readme


# ---------------------------------------------------------------- gpu-check's checklist

def test_gpu_checklist_marks_what_needs_more_gpus():
    keys = [item.key for item in CHECKLIST]
    assert len(keys) == len(set(keys))
    by_key = {item.key: item for item in CHECKLIST}
    for key in ("one-rank-group", "cpu-tensor-refused", "bitwise-refused",
                "premul-sum-accepted", "isend-to-self"):
        assert by_key[key].min_gpus == 1 and by_key[key].check is not None
    assert by_key["more-ranks-than-gpus"].min_gpus == 0
    assert by_key["reduce-non-dst-untouched"].min_gpus == 2
    assert all(item.source and item.claim for item in CHECKLIST)


def test_gpu_check_without_a_gpu_lists_the_checklist_and_exits_2():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TUTORIAL_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "helpers.gpu_check"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no GPU visible" in done.stderr
    for item in CHECKLIST:
        assert item.claim in done.stdout
    assert done.stdout.count("2+ GPUs") >= 2 and "1+ GPUs" in done.stdout
    # the one item a machine without GPUs can check: the refusal names the problem
    assert "✓  [README] NCCL with more ranks than GPUs is refused" in done.stdout
    assert "✗" not in done.stdout
