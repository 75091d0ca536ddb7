"""`make bench`'s training table: each hand-built version against torch's own.

    python benchmarks/training_bench.py [--ranks 4] [--pairs "data parallel" ...] [--quick]
                                        [--save]

One torchrun job (benchmarks/training_worker.py: gloo, one thread per rank) builds every
pair of benchmarks/pairs/ on the same model, data and ranks, checks that the two sides
compute the same, and times them in interleaved pairs until the ratio by hand / torch
settles within ±tolerance (the median of the repeats' ratios; its spread is the half-width
of the 90 % bootstrap interval of that median), or says it did not. Each side's step is
then profiled on every rank (torch.profiler) and split into compute, communication
not hidden under compute, and waiting (helpers.bench.step_profile), the mean over ranks.

Written to build/bench/training.json (key "training") and .txt; --save also copies the
JSON to benchmarks/saved/training.json, the figures the notebooks quote when this machine
has not run the bench (helpers.bench.quote). Nothing is left running: the job runs in a
process session of its own, killed whole past --timeout.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from helpers.bench.quote import SAVED, row_lines  # noqa: E402
from helpers.runtime.torchrun import torchrun_command  # noqa: E402


def parse_arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--pairs", nargs="*", default=[], help="names (default: all)")
    parser.add_argument("--quick", action="store_true",
                        help="small models, few repeats: a check that it runs, not figures")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--min-repeats", type=int, default=5)
    parser.add_argument("--max-repeats", type=int, default=20)
    parser.add_argument("--budget", type=float, default=90.0,
                        help="seconds at most per pair's repeats (90)")
    parser.add_argument("--batches", type=int, default=3,
                        help="batches per measurement; its fastest is kept (3)")
    parser.add_argument("--batch-s", type=float, default=0.3,
                        help="seconds a batch of steps lasts, about (0.3)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds before the whole job is killed (1800)")
    parser.add_argument("--save", action="store_true",
                        help=f"also copy the JSON to {SAVED.relative_to(ROOT)}")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for training.json and .txt (default build/bench)")
    args = parser.parse_args(argv)
    if args.ranks < 2:
        parser.error(f"--ranks must be at least 2 (a pair compares distributed steps), "
                     f"got {args.ranks}")
    if args.quick:
        args.min_repeats, args.max_repeats, args.budget = 2, 3, 10.0
        args.batches, args.batch_s = 1, 0.02
    return args


def run_job(args: argparse.Namespace, out: Path) -> None:
    """The torchrun job, in its own process session; its log goes to our stderr."""
    config = {"pairs": args.pairs, "quick": args.quick, "tolerance": args.tolerance,
              "min_repeats": args.min_repeats, "max_repeats": args.max_repeats,
              "budget_s": args.budget, "batches": args.batches, "batch_s": args.batch_s,
              "warmup": 1 if args.quick else 2, "profile_steps": 1 if args.quick else 3,
              "timeout_s": min(args.timeout, 600.0)}
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
               PYTHONWARNINGS="ignore")
    logs = tempfile.TemporaryDirectory(prefix="training-bench-logs-")
    proc = subprocess.Popen(
        torchrun_command(args.ranks, str(HERE / "training_worker.py"), str(out),
                         json.dumps(config), log_dir=logs.name),
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        code = proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise SystemExit(f"the training bench ran past --timeout {args.timeout:.0f} s: "
                         "killed (the pairs done so far are in the log above)")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        logs.cleanup()
    if code:
        raise SystemExit(f"the training bench's torchrun job failed (exit {code}): see its "
                         "log above")


def report_lines(result: dict) -> list[str]:
    t = result
    lines = [f"training table · {t['world_size']} ranks · gloo · 1 thread per rank · "
             f"torch {t['torch']} · {t['machine']}",
             f"ratio = by hand / torch per step (median of interleaved repeats, ± the "
             f"90 % bootstrap half-width); settled when within ±{t['tolerance']:.0%}"]
    for row in t["pairs"]:
        lines += ["", f"{row['name']} (notebook {row['notebook'][:2]}) · {row['about']}"]
        lines += ["  " + line for line in row_lines(row)]
    before, after = (" ".join(f"{v:.2f}" for v in t["load"][k]) for k in ("before", "after"))
    lines += ["", "step: timed (median of the repeats' fastest batches); profiled: one step "
              "under torch.profiler, split (mean over ranks) into compute = the step's "
              "thread in torch ops, communication = gloo/c10d in flight outside compute, "
              "waiting = the rest (Python, blocking on peers); overlapped = communication "
              "under compute",
              f"load average (1, 5, 15 min) before {before}, after {after}; "
              f"{t['seconds']:.0f} s"]
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    began, load_before = time.monotonic(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="training-bench-") as folder:
        raw = Path(folder) / "pairs.json"
        run_job(args, raw)
        measured = json.loads(raw.read_text())
    import torch

    result = {**measured, "torch": torch.__version__, "backend": "gloo",
              "threads_per_rank": 1, "tolerance": args.tolerance, "quick": args.quick,
              "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
              "date": datetime.date.today().isoformat(),
              "load": {"before": load_before, "after": os.getloadavg()},
              "seconds": time.monotonic() - began,
              "command": "python benchmarks/training_bench.py " + " ".join(argv or sys.argv[1:])}
    text = "\n".join(report_lines(result))
    print(text)
    from helpers.paths import build_dir

    out = args.out or build_dir() / "bench"
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "training.json.tmp"
    tmp.write_text(json.dumps({"training": result}, indent=1) + "\n")
    os.replace(tmp, out / "training.json")
    (out / "training.txt").write_text(text + "\n")
    print(f"written: {out / 'training.json'} and .txt")
    if args.save:
        if args.quick:
            raise SystemExit("--save keeps real figures only: run it without --quick")
        SAVED.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "training.json", SAVED)
        print(f"saved: {SAVED.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
