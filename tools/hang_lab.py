"""The kit's hang lab: run one of its scripts under torchrun, gather the evidence.

    python -m tools.hang_lab 1 [--ranks 3]    # docs/kit/hang_lab/lab1.py, 2 ranks unless set
    python -m tools.hang_lab my_copy.py       # a script beside a copy of dist_utils.py

Into build/hang_lab/<lab>/: what the job printed (job.log); each rank's Flight Recorder as
it wrote it when it left (raw/), and made readable for torch's analyzer (fr/); and, the
first time the job prints nothing for --quiet seconds after every rank has logged (a stall),
a py-spy dump of every rank (stacks/). It says where the evidence is, never what it means
(reading it is the lab), and nothing it started outlives it.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import pickle
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from helpers.debugging.flight_recorder import ANALYZER, PREFIX, write_dumps
from helpers.debugging.stacks import DUMP_TIMEOUT_S, py_spy
from helpers.paths import REPO_ROOT, build_dir
from helpers.runtime.processes import end_processes, running
from helpers.runtime.torchrun import torchrun_command

LAB_DIR = REPO_ROOT / "docs" / "kit" / "hang_lab"
LABS = ("1", "2", "3")
STARTED = re.compile(r"\brank (\d+): ")    # dist_utils.log's lines: the rank has started
LOGS = "torchrun-logs"       # torchrun's own: without it, a /tmp/torchelastic_* per run
CLEARED = ("job.log", "raw", "fr", "stacks", "checkpoints", LOGS)


@dataclass
class Result:
    """What one run of a lab script left, and where."""
    out: Path
    world_size: int
    returncode: int          # torchrun's (a signal's negative number if it was ended)
    seconds: float
    stacks_at: float | None  # seconds after the start when py-spy read the ranks
    dumped: list[int]        # the ranks that wrote a Flight Recorder file
    ended_by_runner: bool    # past its deadline, so the runner ended it


def script_of(lab: str) -> Path:
    """A lab's number ("1") or a script's path → the script."""
    path = LAB_DIR / f"lab{lab}.py" if lab in LABS else Path(lab).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no lab {lab!r}: give {', '.join(LABS)} or a script's path")
    return path


class _Output:
    """The job's lines: saved, echoed if asked, and when the last came."""

    def __init__(self, stream, log: Path, echo: bool) -> None:
        self.last, self.ranks = time.monotonic(), set()
        self.thread = threading.Thread(target=self._read, args=(stream, log, echo),
                                       daemon=True)
        self.thread.start()

    def _read(self, stream, log: Path, echo: bool) -> None:
        with log.open("w") as saved:
            for line in stream:
                saved.write(line)
                if echo:
                    print(line, end="", flush=True)
                self.ranks.update(int(found[1]) for found in STARTED.finditer(line))
                self.last = time.monotonic()


def _workers(tree: set[psutil.Process], script: Path) -> dict[int, int]:
    """rank → pid of the job's worker processes (torchrun gives each RANK)."""
    found = {}
    for proc in tree:
        with contextlib.suppress(psutil.Error):
            if str(script) in " ".join(proc.cmdline()) and "RANK" in proc.environ():
                found[int(proc.environ()["RANK"])] = proc.pid
    return found


def _spy(workers: dict[int, int], folder: Path, locals_: bool) -> None:
    """`py-spy dump --pid P` of every worker, as it prints it, to folder/rank_<r>.txt."""
    folder.mkdir(exist_ok=True)
    for rank, pid in sorted(workers.items()):
        cmd = [py_spy(), "dump", "--pid", str(pid), *(["--locals"] if locals_ else [])]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
            text = done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            text = f"py-spy gave no answer in {DUMP_TIMEOUT_S:g} s"
        (folder / f"rank_{rank}.txt").write_text(f"$ py-spy {' '.join(cmd[1:])}\n{text}")


def run(lab: str, ranks: int = 2, timeout_s: float = 15.0, out: Path | None = None, *,
        detail: bool = False, quiet_s: float = 1.5, locals_: bool = False,
        env: dict[str, str] | None = None, echo: bool = True,
        deadline_s: float | None = None) -> Result:
    """Run a lab's script on `ranks` gloo ranks under torchrun, gather the evidence in
    `out` (default build/hang_lab/<lab>), end every process it started. A job still
    running `deadline_s` after its start (default 3 timeouts + 60 s) is ended."""
    script = script_of(lab)
    out = (out or build_dir() / "hang_lab" / (lab if lab in LABS else script.stem)).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for name in CLEARED:
        shutil.rmtree(out / name, ignore_errors=True)
        (out / name).unlink(missing_ok=True)
    settings = {"FR_DUMP_DIR": str(out / "raw"), "HANG_LAB_TIMEOUT_S": f"{timeout_s:g}",
                "TORCH_FR_BUFFER_SIZE": "2000", "PYTHONUNBUFFERED": "1",
                **({"TORCH_DISTRIBUTED_DEBUG": "DETAIL"} if detail else {}), **(env or {})}
    cmd = torchrun_command(ranks, str(script), log_dir=out / LOGS)
    start = time.monotonic()
    deadline = start + (3 * timeout_s + 60 if deadline_s is None else deadline_s)
    proc = subprocess.Popen(cmd, cwd=out, env={**os.environ, **settings}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    tree, stacks_at, ended_by_runner = {psutil.Process(proc.pid)}, None, False
    output = _Output(proc.stdout, out / "job.log", echo)
    try:
        while proc.poll() is None:
            with contextlib.suppress(psutil.Error):      # torchrun may have just ended
                tree |= set(psutil.Process(proc.pid).children(recursive=True))
            now = time.monotonic()
            if now > deadline:
                ended_by_runner = True
                break
            stalled = now - output.last >= quiet_s and output.ranks >= set(range(ranks))
            if stalled and stacks_at is None:   # the first only: later ones are the end
                _spy(_workers(tree, script), out / "stacks", locals_)
                stacks_at = now - start
            time.sleep(0.1)
    finally:
        end_processes([p for p in tree if running(p)])
        proc.wait()
        output.thread.join(timeout=10)       # the pipe closes with the last process
    traces = {}
    for path in sorted((out / "raw").glob(f"{PREFIX}*")):
        with contextlib.suppress(pickle.UnpicklingError, EOFError, ValueError):  # cut short
            traces[int(path.name[len(PREFIX):])] = pickle.loads(path.read_bytes())
    write_dumps(traces, out / "fr", ranks)
    return Result(out, ranks, proc.returncode, time.monotonic() - start, stacks_at,
                  sorted(traces), ended_by_runner)


def report(result: Result, quiet_s: float) -> str:
    """Where the evidence is (not what it says)."""
    where = os.path.relpath(result.out)
    ended = ("it ran past its deadline: the runner ended it" if result.ended_by_runner
             else f"torchrun's exit code {result.returncode}")
    stacks = (f"py-spy dump of every rank, {result.stacks_at:.1f} s after the start "
              f"({quiet_s:g} s without output)" if result.stacks_at is not None
              else f"none: the job never went {quiet_s:g} s without output")
    dumped = ", ".join(map(str, result.dumped)) or "none"
    return "\n".join([
        f"\nthe job ended after {result.seconds:.1f} s, {ended}; evidence in {where}/:",
        "  job.log          what the job printed",
        f"  raw/{PREFIX}N       each rank's Flight Recorder as it wrote it; ranks {dumped} "
        f"of {result.world_size}",
        f"  fr/{PREFIX}N        the same, readable by torch's analyzer:",
        f"                   python -m {ANALYZER} {where}/fr -p {PREFIX}",
        f"  stacks/{PREFIX}N.txt  {stacks}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lab", help=f"{', '.join(LABS)}, or the path of a script")
    parser.add_argument("--ranks", type=int, default=2, help="world size (default 2)")
    parser.add_argument("--timeout", type=float, default=15.0,
                        help="collective timeout in seconds (default 15)")
    parser.add_argument("--quiet", type=float, default=1.5,
                        help="seconds without output that count as a stall (default 1.5)")
    parser.add_argument("--detail", action="store_true", help="TORCH_DISTRIBUTED_DEBUG=DETAIL")
    parser.add_argument("--locals", action="store_true", help="py-spy dump --locals")
    parser.add_argument("--out", type=Path, help="default: build/hang_lab/<lab>")
    args = parser.parse_args(argv)
    if args.ranks < 2:
        parser.error("--ranks: 2 or more (a collective needs peers)")
    try:
        script = script_of(args.lab)
    except FileNotFoundError as err:
        parser.error(str(err))
    print(f"{script.name} on {args.ranks} gloo ranks, collective timeout {args.timeout:g} s"
          f"{', TORCH_DISTRIBUTED_DEBUG=DETAIL' if args.detail else ''}", flush=True)
    result = run(args.lab, args.ranks, args.timeout, args.out, detail=args.detail,
                 quiet_s=args.quiet, locals_=args.locals)
    print(report(result, args.quiet))
    return 0 if result.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
