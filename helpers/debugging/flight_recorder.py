"""torch's Flight Recorder, read by rank, and torch's own analyzer run on the dumps.

Every rank's process group keeps its last collectives in a ring buffer (torch 2.13: on by
default, `TORCH_FR_BUFFER_SIZE` entries, 2000 unless set, read at `init_process_group`).
A rank dumps it with `torch._C._distributed_c10d._dump_fr_trace()`, a pickle: this module
turns the dumps that `cluster.pull("trace")` brought back into rows by rank, and writes
them where torch's analyzer (`python -m torch.distributed.flight_recorder.fr_trace`) reads
them, one file per rank.

gloo writes its group table (`pg_config`) with empty names, which the analyzer cannot
look up (`KeyError: ('0', 0)`); `for_analyzer` rebuilds it from the names the entries
carry, every group spanning the whole world: the series' cases use the default group
only (and, with DETAIL checks, the wrapper's group, which is nameless and the same ranks).
"""
from __future__ import annotations

import copy
import pickle
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "rank_"            # the analyzer's -p: files rank_0, rank_1, ...
ANALYZER = "torch.distributed.flight_recorder.fr_trace"
ANALYZER_TIMEOUT_S = 120.0


def dump() -> dict:
    """This rank's Flight Recorder, as torch dumps it (run on a rank, after its
    `init_process_group`): {"entries": [...], "pg_status": ..., "pg_config": ..., ...}.
    On NCCL the collectives are in the buffer of CUDA events that `_dump_nccl_trace`
    reads (a CUDA build's), not in `_dump_fr_trace`'s, the one gloo fills."""
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d     # no public name in torch 2.13

    nccl = dist.is_initialized() and dist.get_backend() == "nccl"
    return pickle.loads(c10d._dump_nccl_trace() if nccl else c10d._dump_fr_trace())


@dataclass(frozen=True)
class Entry:
    """One collective in a rank's buffer."""
    seq: int                 # collective_seq_id: the n-th collective of its group
    collective: str          # "all_reduce" (profiling_name without "gloo:")
    sizes: list              # input sizes, one list per tensor
    group: str               # the group's name ("0": the default group)
    line: str                # the user's line that called it: "file.py:12" or "cell:3"

    def label(self) -> str:
        sizes = ", ".join("×".join(map(str, s)) or "scalar" for s in self.sizes)
        return f"#{self.seq} {self.collective}({sizes})"


def entries(trace: dict, group: str | None = "0") -> list[Entry]:
    """The collectives of one rank's dump, oldest first; only group `group` ("0": the
    default group; None: every group), point-to-point calls left out."""
    found = []
    for e in sorted(trace.get("entries", []), key=lambda e: e["record_id"]):
        name = e["process_group"][0]
        if e.get("is_p2p") or (group is not None and name != group):
            continue
        found.append(Entry(seq=e["collective_seq_id"],
                           collective=e["profiling_name"].split(":", 1)[-1],
                           sizes=e["input_sizes"], group=name,
                           line=_user_line(e.get("frames", []))))
    return found


def _user_line(frames: list[dict]) -> str:
    """The innermost frame outside torch: where the collective was called ("cell:6" for
    a notebook cell, "train.py:12" for a script)."""
    for frame in frames:
        path = frame["filename"]
        if "/torch/" not in path:
            where = "cell" if re.search(r"ipykernel_\d+|^<", path) else Path(path).name
            return f"{where}:{frame['line']}"
    return ""


def by_rank(pulled: list[dict[str, Any]], cluster: Any) -> dict[int, dict | None]:
    """`cluster.pull("trace", alive_only=True)` as {rank: dump}, None for a rank whose
    engine is gone (it has no dump to give). Each dump keeps only the entries made since
    its rank joined the cluster's group: an engine that outlives its group (a warm start)
    still holds the earlier groups' in its buffer; "buffer" counts them all."""
    joined = {info.rank: info.joined_ns for info in cluster.ranks}
    traces: dict[int, dict | None] = {rank: None for rank in range(cluster.world_size)}
    for state in pulled:
        rank, trace = state["rank"], dict(state["trace"])
        trace["buffer"] = len(trace.get("entries", []))
        trace["entries"] = [e for e in trace.get("entries", [])
                            if e["time_created_ns"] >= joined.get(rank, 0)]
        traces[rank] = trace
    return traces


def for_analyzer(trace: dict, world_size: int) -> dict:
    """A copy of a dump that torch's analyzer can read: `pg_config` named after the groups
    the entries use (gloo leaves the names empty), each spanning ranks 0..world_size-1;
    nameless groups (the DETAIL checks' wrapper) named "pg<id>"; the entries numbered from
    0 (`record_id`), as a fresh process numbers them: the analyzer lines the ranks up by
    that number, and a warm engine's count goes on from its earlier groups'."""
    fixed = copy.deepcopy(trace)
    fixed["entries"].sort(key=lambda e: e["record_id"])
    for number, e in enumerate(fixed["entries"]):
        e["record_id"] = number       # lined up by it (align_trace_from_beginning)
    ranks = str(list(range(world_size)))
    config = {}
    for e in fixed["entries"]:
        name, desc = e["process_group"]
        if not name:
            name = desc = f"pg{e['pg_id']}"
            e["process_group"] = (name, desc)
        config[name] = {"name": name, "desc": desc, "ranks": ranks}
    fixed["pg_config"] = config or {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}}
    return fixed


def write_dumps(traces: dict[int, dict | None], folder: Path, world_size: int,
                fix: bool = True) -> list[int]:
    """One file per rank with a dump (`PREFIX` + rank), fixed for the analyzer unless
    `fix` is False; the ranks written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for rank, trace in sorted(traces.items()):
        if trace is None:
            continue
        data = for_analyzer(trace, world_size) if fix else trace
        (folder / f"{PREFIX}{rank}").write_bytes(pickle.dumps(data))
        written.append(rank)
    return written


@dataclass(frozen=True)
class AnalyzerRun:
    """What torch's analyzer printed for one set of dumps."""
    command: str
    returncode: int
    output: str

    def verdict(self) -> str:
        """Its finding in a line: when it failed, its error (the last line); else the
        first line that names a rank or a mismatch; else "nothing found"."""
        lines = [ln.strip() for ln in self.output.splitlines() if ln.strip()]
        if self.returncode != 0:
            return lines[-1] if lines else f"exit code {self.returncode}, no output"
        keys = ("Culprit rank", "missing ranks", "Not all ranks", "cannot decide",
                "mismatch")
        for ln in lines:
            if any(k in ln for k in keys):
                return ln
        return lines[0] if lines else "nothing found (no output, exit code 0)"

    def found(self) -> bool:
        """Whether it ran and reported a finding (not an error, nothing, or "cannot
        decide")."""
        text = self.output
        return (self.returncode == 0 and "cannot decide" not in text
                and any(k in text for k in ("Culprit rank", "missing ranks", "mismatch")))

    def shown(self) -> str:
        """The output with each stack trace cut to the caller's own frames: those of the
        installed packages and the standard library left out, a cell's frame named as
        the cell's line, a script's by its file name (no machine's paths)."""
        kept = []
        for line in self.output.splitlines():
            frame = re.fullmatch(r"(\s*\S+) at (\S+):(\d+)\s*", line)
            if frame is None:
                kept.append(line)
                continue
            name, path, number = frame.groups()
            if "site-packages" in path or "/lib/python3" in path:
                continue
            where = "the cell" if re.search(r"ipykernel_\d+", path) else Path(path).name
            kept.append(f"{name} at {where}, line {number}")
        return "\n".join(kept).strip()


def analyze(traces: dict[int, dict | None], world_size: int, *flags: str,
            fix: bool = True) -> AnalyzerRun:
    """Run torch's analyzer on the ranks' dumps (written to a temporary folder), with
    `flags` (e.g. "--allow-incomplete-ranks", "-j"); bounded by ANALYZER_TIMEOUT_S."""
    with tempfile.TemporaryDirectory(prefix="fr-") as folder:
        write_dumps(traces, Path(folder), world_size, fix=fix)
        argv = [ANALYZER, folder, "-p", PREFIX, *flags]
        shown = f"python -m {ANALYZER} DUMPS -p {PREFIX} {' '.join(flags)}".strip()
        done = _run_as_main(argv, Path(folder), ANALYZER_TIMEOUT_S)
        if done is None:
            return AnalyzerRun(shown, -1, f"(no answer after {ANALYZER_TIMEOUT_S:g} s)")
        returncode, output = done
        return AnalyzerRun(shown, returncode, output.replace(folder, "DUMPS"))


def _run_as_main(argv: list[str], folder: Path, timeout_s: float) -> tuple[int, str] | None:
    """`python -m argv[0] argv[1:]`: its exit code and its stdout then stderr; None when it
    ran past `timeout_s`. A child of this process's forkserver where there is one (the
    server imported torch already: a fork instead of a new `python` importing torch, a
    second each time), else a new `python`."""
    from helpers.runtime import start_method
    from helpers.runtime.disposable_rank import PRELOAD

    if not start_method.forkserver_usable():
        cmd = [sys.executable, "-m", *argv]
        try:
            ran = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        return ran.returncode, ran.stdout + ran.stderr
    out, err = folder / "stdout.txt", folder / "stderr.txt"
    for path in (out, err):     # there, empty, should the child end before it writes
        path.write_text("")
    child = start_method.forkserver_context(PRELOAD).Process(
        target=_module_as_main, args=(argv, str(out), str(err)))
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        return None
    return child.exitcode, out.read_text() + err.read_text()


def _module_as_main(argv: list[str], stdout: str, stderr: str) -> None:
    """In the forked child: what `python -m` does with `argv` (runpy.run_module as
    __main__, sys.argv its arguments), fds 1 and 2 to the files `stdout` and `stderr`. An
    uncaught exception prints its traceback from the module's own frame on (not this
    function's nor runpy's) and exits 1, as Python does; multiprocessing turns SystemExit
    into the exit code as Python does."""
    import importlib.util
    import os
    import runpy
    import traceback

    for fd, path in ((1, stdout), (2, stderr)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.argv = list(argv)
    try:
        runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    except SystemExit:
        raise
    except BaseException as err:
        module_file = importlib.util.find_spec(argv[0]).origin
        tb = err.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != module_file:
            tb = tb.tb_next
        traceback.print_exception(type(err), err, tb or err.__traceback__)
        sys.exit(1)


def summary(traces: dict[int, dict | None]) -> list[dict[str, Any]]:
    """Per rank: whether it gave a dump, its entries of this group's life and all that
    its buffer holds, its newest collective of the default group and where it was called; for
    the tables and the saved results."""
    rows = []
    for rank, trace in sorted(traces.items()):
        if trace is None:
            rows.append({"rank": rank, "dump": False})
            continue
        found = entries(trace)
        newest = found[-1] if found else None
        rows.append({"rank": rank, "dump": True, "entries": len(trace["entries"]),
                     "buffer": trace.get("buffer", len(trace["entries"])),
                     "last_seq": newest.seq if newest else None,
                     "newest": newest.label() if newest else None,
                     "line": newest.line if newest else None})
    return rows


def side_by_side(cases: dict[str, dict]) -> list[tuple[str, str, bool, str]]:
    """Per section of the notebook: its name, the analyzer's line, whether it is a
    finding, and the series' diagnosis as ranks per meaning ("" for none)."""
    rows = []
    for name, found in cases.items():
        theirs = AnalyzerRun("", found["returncode"], found["analyzer"])
        by_meaning: dict[str, list[int]] = {}
        for f in (found.get("ours") or {"failed": []})["failed"]:
            by_meaning.setdefault(f["meaning"].split(" (")[0], []).append(f["rank"])
        said = "; ".join(f"{'rank' if len(r) == 1 else 'ranks'} {', '.join(map(str, r))}: "
                         f"{meaning}" for meaning, r in by_meaning.items())
        rows.append((name.replace("_", " "), theirs.verdict(), theirs.found(), said))
    return rows
