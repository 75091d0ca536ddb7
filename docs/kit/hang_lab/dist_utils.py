"""What the hang lab's training scripts share: `run(train)` starts the process group, runs
`train(rank, world_size)` and leaves the group, and each rank writes its Flight Recorder to
a file when its training ends; `log` writes a line that names the rank.

gloo writes no Flight Recorder file of its own when a collective times out (NCCL does, with
`TORCH_NCCL_DUMP_ON_TIMEOUT=1`), so each rank writes its own, whatever ends its training: a
normal end, an exception (a collective's timeout), or the SIGTERM that torchrun sends the
other ranks once one has failed. The file is `$FR_DUMP_DIR/rank_<rank>` (default folder:
`flight_recorder`), the pickle `_dump_fr_trace()` returns, one file per rank.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist
from torch._C import _distributed_c10d as c10d   # torch 2.13 gives the dump no public name


def setup() -> tuple[int, int]:
    """Join the job's gloo group, with a collective timeout of $HANG_LAB_TIMEOUT_S seconds
    (15 unless set): a collective that waits longer raises. Returns (rank, world size)."""
    timeout = timedelta(seconds=float(os.environ.get("HANG_LAB_TIMEOUT_S", "15")))
    dist.init_process_group("gloo", timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def log(message: str) -> None:
    """One line, written at once: the ranks share torchrun's output, and print() writes
    the line and its end separately, so two ranks' lines could run into each other."""
    sys.stdout.write(f"rank {dist.get_rank()}: {message}\n")
    sys.stdout.flush()


@contextlib.contextmanager
def flight_recorder_on_exit() -> Iterator[None]:
    """Run the block; when it ends, however it ends, write this rank's Flight Recorder."""
    def stop(signum: int, frame: object) -> None:
        sys.exit(128 + signum)        # SystemExit: the finally below still runs

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        folder = Path(os.environ.get("FR_DUMP_DIR", "flight_recorder"))
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"rank_{dist.get_rank()}").write_bytes(c10d._dump_fr_trace())


def run(train: Callable[[int, int], None]) -> None:
    rank, world_size = setup()
    with flight_recorder_on_exit():
        train(rank, world_size)
    dist.destroy_process_group()
