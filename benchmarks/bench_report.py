"""The report of benchmarks/notebook_vs_torchrun.py: what it measured, as text and JSON."""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from dataclasses import dataclass, field

from helpers.bench import ratios as settle_ratios
from helpers.bench.ratios import Group

TARGETS = {"busbw": (">=", 0.95), "latency": ("<=", 1.10)}
BW_BYTES, LAT_BYTES = 64 << 20, 4


@dataclass
class Measured:
    """Everything one run measured, as the report and the JSON file read it."""
    groups: list[Group] = field(default_factory=list)
    records: dict[str, list[dict]] = field(
        default_factory=lambda: {"first": [], "cold": [], "warm": []})
    rows: dict[str, list[dict]] = field(default_factory=lambda: {
        f"{p} {m}": [] for p in ("torchrun", "notebook") for m in ("busbw", "latency")})
    extra: list[str] = field(default_factory=list)
    left: list[int] = field(default_factory=list)


def breakdown(records: list[dict]) -> dict[str, float]:
    """Median seconds per stage over the records, stages in the order first seen; a
    stage some records lack is the median over those that have it."""
    names = list(dict.fromkeys(name for r in records for name in r["stages"]))
    medians = {name: statistics.median(r["stages"][name] for r in records
                                       if name in r["stages"])
               for name in names}
    medians["python process (launch to exit)"] = statistics.median(
        r["python process (launch to exit)"] for r in records)
    return medians


def ratio_lines(groups: list[Group], units: dict[str, str],
                args: argparse.Namespace) -> list[str]:
    lines = []
    for group in groups:
        lines.append(f"[{group.repeats} repeats in {group.seconds:.0f} s; stopped: "
                     f"{group.stopped}]")
        for ratio in group.ratios:
            a, b = group.values.get(ratio.path, []), group.values.get(ratio.base, [])
            note = settle_ratios.describe(ratio, args.tolerance, args.min_repeats)
            if ratio.name in TARGETS and ratio.values:
                sign, target = TARGETS[ratio.name]
                met = ratio.median >= target if sign == ">=" else ratio.median <= target
                note += f" (target {sign} {target}: {'met' if met else 'MISSED'})"
            unit = units[ratio.name]
            if a and b:
                lines.append(f"  {ratio.name:<8} {note}\n{'':11}{ratio.path} median "
                             f"{statistics.median(a):.3f} {unit} (min {min(a):.3f}), "
                             f"{ratio.base} median {statistics.median(b):.3f} {unit} "
                             f"(min {min(b):.3f})")
    return lines


def breakdown_lines(name: str, stages: dict[str, float], total: float) -> list[str]:
    lines = [f"{name} start, median s per stage:"]
    for stage, seconds in stages.items():
        lines.append(f"  {stage:<34} {seconds:7.3f}")
    lines.append(f"  {'(start cell to first collective)':<34} {total:7.3f}")
    return lines


def report_lines(args: argparse.Namespace, measured: Measured, began: float,
                 mean_ratios: dict[str, float], stage_medians: dict[str, dict]) -> list[str]:
    units = {"busbw": "GB/s", "latency": "µs", "first": "s", "cold": "s", "warm": "s", "html": "s"}
    groups = measured.groups
    lines = [f"notebook path vs torchrun: {args.ranks} ranks, gloo, {platform.node()}, "
             f"{os.cpu_count()} CPUs, {time.monotonic() - began:.0f} s in all",
             f"ratio: median over paired repeats (A, B adjacent, order alternating); "
             f"spread: {settle_ratios.SPREAD}; settled: spread <= ±{args.tolerance:.0%} "
             f"after >= {args.min_repeats} repeats",
             "busbw, latency: each measurement's fastest batch (the path's own cost: other "
             "processes only add time), then the median ratio; start: wall seconds"]
    lines += ratio_lines(groups[:1], units, args)
    if mean_ratios:
        lines.append("  the same pairs with the mean over all calls (nccl-tests' statistic, "
                     "noisier): " + ", ".join(f"{m} x{v:.3f}" for m, v in mean_ratios.items()))
    lines += ratio_lines(groups[1:], units, args)
    for kind, record in measured.records.items():
        if record:
            total = statistics.median(r["first_collective_s"] for r in record)
            lines += breakdown_lines(kind, stage_medians[kind], total)
    return lines


def result_json(args: argparse.Namespace, measured: Measured, load: dict,
                mean_ratios: dict[str, float], stage_medians: dict[str, dict]) -> dict:
    config = {"ranks": args.ranks, "backend": "gloo", "tolerance": args.tolerance,
              "bw_batches": args.bw_batches, "lat_batches": args.lat_batches,
              "min_repeats": args.min_repeats, "max_repeats": args.max_repeats,
              "spread": settle_ratios.SPREAD, "bw_bytes": BW_BYTES, "bw_iters": args.bw_iters,
              "lat_bytes": LAT_BYTES, "lat_iters": args.lat_iters, "cpus": os.cpu_count(),
              "host": platform.node(), "load_average": load}
    groups = measured.groups
    result = {"config": config, "leftover_pids": measured.left, "start_stages": stage_medians,
              "ratios": {r.name: {"median": r.median, "spread": r.spread,
                                  "repeats": len(r.values), "values": r.values,
                                  "settled": r.settled(args.tolerance, args.min_repeats)}
                         for g in groups for r in g.ratios if r.values},
              "runs": {name: values for g in groups for name, values in g.values.items()},
              "mean_ratios": mean_ratios, "rows": measured.rows,
              "targets": TARGETS}
    for name, ratio in result["ratios"].items():
        result[f"{name}_ratio"] = ratio["median"]      # the scalars tools.compare shows
    return result
