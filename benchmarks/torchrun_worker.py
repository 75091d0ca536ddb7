"""The torchrun side of `make bench`: one torchrun job that measures on request.

    torchrun --standalone --nproc_per_node 4 benchmarks/torchrun_worker.py REQUEST_DIR

Started once by notebook_vs_torchrun.py, so that its ranks, like the notebook path's
engines, are already up when a measurement is asked for, and the two paths can be
timed turn about. Rank 0 waits for REQUEST_DIR/request-<k>.json (the arguments of
helpers.bench.measurement.measure, or {"stop": true}), every rank runs it, rank 0
writes REQUEST_DIR/result-<k>.json. It writes REQUEST_DIR/ready once the group is up,
and stops by itself after IDLE_S seconds without a request (a driver that died).
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch.distributed as dist

from helpers.bench.measurement import measure

IDLE_S = 300.0
POLL_S = 0.01


def write_atomically(path: Path, data: object) -> None:
    """Write JSON to a temporary name, then rename: the reader never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def next_request(folder: Path, k: int) -> dict:
    """Rank 0: the k-th request, or a stop after IDLE_S seconds without one."""
    path = folder / f"request-{k}.json"
    deadline = time.monotonic() + IDLE_S
    while not path.exists():
        if time.monotonic() > deadline:
            return {"stop": True, "why": f"no request for {IDLE_S:.0f} s"}
        time.sleep(POLL_S)
    return json.loads(path.read_text())


def main() -> int:
    folder = Path(sys.argv[1])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=IDLE_S + 60))
    rank = dist.get_rank()
    if rank == 0:
        write_atomically(folder / "ready", {"world_size": dist.get_world_size()})
    try:
        for k in range(1 << 30):
            box = [next_request(folder, k) if rank == 0 else None]
            dist.broadcast_object_list(box, src=0)
            request = box[0]
            if request.get("stop"):
                break
            try:
                result = measure(**request)
            except ValueError as error:        # a bad request: said, not fatal
                result = {"error": str(error)}
            if rank == 0:
                write_atomically(folder / f"result-{k}.json", result)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
