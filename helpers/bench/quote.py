"""The training table of `make bench`, quoted where a notebook needs it.

    show_training_pair("data parallel")      # in a notebook cell: that pair's row

A notebook never types a ratio: it shows the bench's saved output. That is
build/bench/training.json when `make bench` ran on this machine (full size, not
--quick), else benchmarks/saved/training.json, the run saved with the repository
(`python benchmarks/training_bench.py --save`); the text says which, where and when.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from helpers.paths import REPO_ROOT, build_dir

SAVED = REPO_ROOT / "benchmarks" / "saved" / "training.json"
GOAL = 1.10                       # the hand-built step at most 10 % slower than torch's
PARTS = ("compute", "communication", "waiting")


def training_table() -> tuple[dict, Path] | None:
    """(the table, its file): this machine's last full run, else the saved one."""
    for path in (build_dir() / "bench" / "training.json", SAVED):
        if path.exists():
            table = json.loads(path.read_text())["training"]
            if not table.get("quick"):
                return table, path
    return None


def training_row(name: str) -> tuple[dict, dict, Path]:
    """(the pair's row, its table, the file). LookupError if no run has that pair."""
    found = training_table()
    if found is None:
        raise LookupError("no training table: `make bench` writes one "
                          "(build/bench/training.json)")
    table, path = found
    for row in table["pairs"]:
        if row["name"] == name:
            return row, table, path
    raise LookupError(f"no pair {name!r} in {path}: its pairs are "
                      f"{[r['name'] for r in table['pairs']]}")


def verdict(row: dict) -> str:
    if not row["settled"]:
        return "did not settle"
    return f"goal ≤ {GOAL:.2f}: " + ("met" if row["ratio"] <= GOAL else "missed")


def row_lines(row: dict) -> list[str]:
    """The ratio, then both sides' step time and its parts (ms), in lines of ≤ 80."""
    columns = ("step", "profiled", *PARTS, "overlapped")
    lines = [f"by hand / torch per step: ×{row['ratio']:.3f} ±{row['spread']:.1%} "
             f"({row['repeats']} repeats, {verdict(row)})",
             f"CPU time per step, all ranks: ×{row['cpu_ratio']:.3f}",
             f"{'ms per step':<12}" + "".join(f"{c:>{len(c) + 2}}" for c in columns)]
    for side in ("hand", "torch"):
        parts = row["breakdown"][side]
        values = (row["step_ms"][side], parts["step"], *(parts[p] for p in columns[2:]))
        lines.append(f"{'by hand' if side == 'hand' else 'torch':<12}" + "".join(
            f"{v:>{len(c) + 2}.1f}" for c, v in zip(columns, values)))
    if "busbw_GBps" in row:
        bw = row["busbw_GBps"]
        lines.append(f"busbw (fastest batch): by hand {bw['hand']:.3f} GB/s, "
                     f"torch {bw['torch']:.3f} GB/s")
    return lines + [f"by hand: {row['hand']}", f"torch: {row['torch']}"]


def show_training_pair(name: str) -> None:
    """Print the pair's row of the training table, and where it was measured."""
    try:
        row, table, path = training_row(name)
    except LookupError as missing:
        print(f"{name}: not measured yet ({missing})")
        return
    where = ("this machine's `make bench`" if path != SAVED else
             "the run saved with the repository; `make bench` measures yours")
    print(f"make bench · {name} · measured {table['date']} on {table['machine']}")
    print(f"torch {table['torch']}, {table['backend']}, {table['world_size']} ranks of 1 "
          f"thread, load average {table['load']['before'][0]:.1f}")
    print(f"({where})")
    print(textwrap.fill(f"model: {row['about']}", 80, subsequent_indent="  "))
    print("\n".join(row_lines(row)))
