"""`python -m tools.gpu_check` (make gpu-check): the NCCL path, on a machine with GPUs.

1. executes notebook 00 with NCCL on as many ranks as there are GPUs;
2. runs one all_reduce on cuda tensors and checks the result;
3. checks that asking for one rank more than there are GPUs is refused clearly;
4. runs the bandwidth command (`torchrun ... -m helpers.bench`) on NCCL;
5. runs the checklist of the notebooks' NCCL-only claims (tools/nccl_claims.py), ✓/✗
   each, marking those that need more GPUs than this machine has;
6. prints all_reduce times with nccl-tests' timing and with a wait per call.
and prints what ran. Exits 2 without GPUs (after listing the checklist), 1 when a check
fails.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from helpers.runtime.cluster import start_cluster
from helpers.runtime.config import ClusterConfigError, visible_gpu_count
from helpers.paths import REPO_ROOT
from tools.nccl_claims import compare_timings, run_checklist


def check_notebook00(n_gpus: int) -> None:
    import papermill

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "00.ipynb"
        t0 = time.monotonic()
        papermill.execute_notebook(
            str(REPO_ROOT / "notebooks" / "00_ranks_and_world.ipynb"), str(out),
            parameters={"n_ranks": n_gpus, "backend": "nccl"}, progress_bar=False,
            cwd=str(REPO_ROOT / "notebooks"), kernel_name="python3", execution_timeout=300)
        text = out.read_text()
    for r in range(n_gpus):
        assert f"rank {r} of {n_gpus}: backend nccl, device cuda:{r}" in text, \
            f"notebook 00 did not report rank {r} on cuda:{r}"
    print(f"✓ notebook 00 ran on NCCL with {n_gpus} rank(s) in {time.monotonic() - t0:.1f} s")


def check_all_reduce(n_gpus: int) -> None:
    with start_cluster(n_ranks=n_gpus, backend="nccl") as cluster:
        view = cluster.client.direct_view(cluster.engine_ids)
        view.execute("t = torch.full((4,), rank + 1.0, device=device)\n"
                     "dist.all_reduce(t)\n"
                     "torch.cuda.synchronize()\n"
                     "t_device = str(t.device)\n"
                     "nccl_version = '.'.join(map(str, torch.cuda.nccl.version()))", block=True)
        states = cluster.pull("t", "t_device", "nccl_version")
    expected = [n_gpus * (n_gpus + 1) / 2] * 4
    for s in states:
        assert s["t_device"] == f"cuda:{s['rank']}", s["t_device"]
        assert s["t"].tolist() == expected, (s["t"], expected)
    print(f"✓ all_reduce on cuda tensors: {n_gpus} rank(s) → {expected} "
          f"(NCCL {states[0]['nccl_version']})")


def check_refusal(n_gpus: int) -> None:
    try:
        start_cluster(n_ranks=n_gpus + 1, backend="nccl")
    except ClusterConfigError as err:
        text = str(err)
        assert f"{n_gpus + 1} rank(s)" in text and f"{n_gpus} GPU(s)" in text, text
        print(f"✓ {n_gpus + 1} ranks on {n_gpus} GPU(s) refused: {text}")
        return
    raise AssertionError("asking for more NCCL ranks than GPUs was not refused")


def check_bench(n_gpus: int) -> None:
    import json
    import subprocess

    import tempfile

    from helpers.runtime.torchrun import torchrun_command

    with tempfile.TemporaryDirectory(prefix="gpu-check-logs-") as logs:
        done = subprocess.run(
            torchrun_command(n_gpus, "-m", "helpers.bench", "--json", "--collectives",
                             "all_reduce,all_gather", "--min-bytes", "1K", "--max-bytes", "1M",
                             log_dir=logs),
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout)
    assert rows and all(r["backend"] == "nccl" and r["busbw"] >= 0 for r in rows), rows[:2]
    peak = max(rows, key=lambda r: r["busbw"])
    print(f"✓ helpers.bench on NCCL: {len(rows)} rows, peak busbw {peak['busbw']:.2f} GB/s "
          f"({peak['collective']}, {peak['bytes']} B)")


def main() -> int:
    os.environ.setdefault("TUTORIAL_OFFLINE", "1")
    n_gpus = visible_gpu_count()
    if n_gpus == 0:
        print("gpu-check: no GPU visible to torch on this machine; nothing to check",
              file=sys.stderr)
        print("The checklist it would run:")
        run_checklist(0)
        return 2
    import torch

    names = ", ".join(torch.cuda.get_device_name(i) for i in range(n_gpus))
    print(f"gpu-check: torch {torch.__version__}, {n_gpus} GPU(s): {names}")
    try:
        check_refusal(n_gpus)
        check_all_reduce(n_gpus)
        check_notebook00(n_gpus)
        check_bench(n_gpus)
        print("The notebooks' NCCL-only claims:")
        failed = [item.key for item, mark, _ in run_checklist(n_gpus) if mark == "✗"]
        print("all_reduce timed as nccl-tests does, and with a wait per call:")
        compare_timings(n_gpus)
        assert not failed, f"NCCL claims that did not hold: {', '.join(failed)}"
    except AssertionError as err:
        print(f"✗ {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
