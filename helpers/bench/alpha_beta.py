"""The α-β (latency-bandwidth) model of a collective, fitted to a sweep (notebook 11, and
`torchrun -m helpers.bench --fit`).

A collective run by algorithm A on n ranks, moving S bytes (nccl-tests' size column),
is modelled as

    t(S) = α · steps_A(n) + bytes_A(n) · S / β

α: the fixed cost of one step (µs); β: the bandwidth of one rank's link (GB/s);
steps_A(n): the steps one after the other; bytes_A(n) · S: what one rank's link carries.
At one world size steps and bytes are constants: the sweep fixes a line t = a + c · S
(intercept a, slope c), and the algorithm's terms turn it into α = a / steps and
β = bytes / c. Whether the terms are the right ones shows only across world sizes:
`fit_joint` fits one α and one β to sweeps at several n.

On a shared machine the noise is one-sided and heavy-tailed: another process only ever
slows a call down, sometimes several times over. Three things make the fit cope:
each point is the fastest of its batches (`time_min_us`, measure(..., batches=k)) rather
than the mean, which a single slowed call drags up; the least squares weigh relative
errors (measured / model − 1, close to fitting in log space), so 8 B and 64 MiB count
alike; and points far off the model are left out, and counted, before the error is stated.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

Row = Mapping[str, Any]
Terms = Callable[[int], tuple[float, float]]   # n → (steps, bytes per rank / S)


def _log2(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


def _height(n: int) -> int:
    """floor(log2 n): the depth of a heap-ordered binary tree of n ranks."""
    return n.bit_length() - 1


def _tree_down(n: int) -> int:
    """Σ over a heap tree's levels of the most children of a node: the sends, one after the
    other, that bring the sum down (level d's first node 2^d − 1 has 2 if 2^(d+1) < n)."""
    return sum(2 if 2 ** (d + 1) < n else 1 for d in range(_height(n)))


# Per algorithm and collective: n → (latency steps, bytes on one rank's link / S).
# "ring": the ring / chain / direct-to-peers algorithm whose bytes are nccl-tests' busbw
# factor; "tree": a pipelined binary tree (log2 n steps deep, every byte up and/or down
# the tree once). Textbook models, not a reading of any library's code.
ALGORITHMS: dict[str, dict[str, Terms]] = {
    "ring": {
        "all_reduce": lambda n: (2 * (n - 1), 2 * (n - 1) / n),
        "broadcast": lambda n: (n - 1, 1.0),
        "reduce": lambda n: (n - 1, 1.0),
        **{c: (lambda n: (n - 1, (n - 1) / n))
           for c in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")},
    },
    "tree": {
        "all_reduce": lambda n: (2 * _log2(n), 2.0),
        "broadcast": lambda n: (_log2(n), 1.0),
        "reduce": lambda n: (_log2(n), 1.0),
        **{c: (lambda n: (_log2(n), (n - 1) / n))
           for c in ("all_gather", "reduce_scatter", "gather", "scatter")},
    },
    # notebook 25's hand-built all_reduces, not pipelined: every step waits for its
    # whole message. Binary tree in heap order (children 2v + 1, 2v + 2): S up per level,
    # then a parent sends S to each child in turn. Our double tree runs its two trees
    # (S/2 each) one after the other. Halving-doubling on the largest power of two p ≤ n,
    # the n − p extra ranks folded in and out (two more steps of S each).
    "binary_tree": {"all_reduce": lambda n: (2 * _height(n), _height(n) + _tree_down(n))},
    "double_binary_tree": {"all_reduce": lambda n: (4 * _height(n), _height(n) + _tree_down(n))},
    "halving_doubling": {"all_reduce": lambda n: (
        2 * _height(n) + 2 * (n & (n - 1) != 0),
        2 * ((1 << _height(n)) - 1) / (1 << _height(n)) + 2 * (n & (n - 1) != 0))},
}


@dataclass(frozen=True)
class Fit:
    """α (µs) and β (GB/s) of one collective, and how well the model fits the points."""
    collective: str
    algorithm: str
    world_sizes: tuple[int, ...]
    alpha_us: float
    beta_gbps: float
    alpha_err_us: float        # one standard error, from the least-squares covariance
    beta_err_gbps: float
    error: float               # RMS of measured/model − 1 over the points kept
    points: int                # points the fit kept
    outliers: int = 0          # points left out, more than `outlier` × error away
    statistic: str = "time_us"  # the rows' time fitted: "time_min_us" (fastest batch) or mean
    left_out: tuple[tuple[int, int], ...] = ()   # (world size, bytes) of each outlier

    @property
    def crossover_bytes(self) -> float:
        """S where the latency and bandwidth terms are equal, at the first world size."""
        steps, per_byte = terms(self.collective, self.world_sizes[0], self.algorithm)
        return self.alpha_us * 1e-6 * self.beta_gbps * 1e9 * steps / per_byte

    @property
    def alpha_beta_bytes(self) -> float:
        """n* = α · β in bytes: a message of n* bytes costs α to start and α to send."""
        return self.alpha_us * 1e-6 * self.beta_gbps * 1e9

    def predict_us(self, size_bytes: Any, n: int | None = None,
                   algorithm: str | None = None) -> Any:
        """Modelled time (µs) at size(s) S on n ranks with `algorithm` (default: the fit's)."""
        steps, per_byte = terms(self.collective, n or self.world_sizes[0],
                                algorithm or self.algorithm)
        size = np.asarray(size_bytes, dtype=float)
        return self.alpha_us * steps + per_byte * size / (self.beta_gbps * 1e3)


def terms(collective: str, n: int, algorithm: str = "ring") -> tuple[float, float]:
    """(steps, bytes per rank / S) of `collective` on n ranks; ValueError naming bad input."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; valid: {', '.join(ALGORITHMS)}")
    if collective not in ALGORITHMS[algorithm]:
        valid = ", ".join(ALGORITHMS[algorithm])
        raise ValueError(f"no {algorithm} model for {collective!r}; valid: {valid}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"the model needs a world size >= 2 (one rank moves nothing), "
                         f"got {n!r}")
    return ALGORITHMS[algorithm][collective](n)


def fitted_time_us(row: Row) -> float:
    """The time of a row the fit uses: its fastest batch (`time_min_us`) when it was
    measured in batches, else its mean time per call (`time_us`)."""
    return row["time_min_us"] if "time_min_us" in row else row["time_us"]


def _least_squares(design: np.ndarray, size: np.ndarray,
                   time_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(α µs, 1/β µs per byte) and their covariance; every row divided by its time."""
    matrix = np.column_stack([design[:, 0], design[:, 1] * size]) / time_us[:, None]
    solution, *_ = np.linalg.lstsq(matrix, np.ones_like(time_us), rcond=None)
    residual = matrix @ solution - 1
    dof = max(len(time_us) - 2, 1)
    return solution, np.linalg.pinv(matrix.T @ matrix) * (residual @ residual) / dof


def _arrays(collective: str, rows: Sequence[Row],
            algorithm: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(design: steps and bytes/S per row, S per row, the time fitted per row)."""
    design = np.array([terms(collective, r["world_size"], algorithm) for r in rows])
    return (design, np.array([r["bytes"] for r in rows], dtype=float),
            np.array([fitted_time_us(r) for r in rows], dtype=float))


def _model_us(design: np.ndarray, size: np.ndarray, solution: np.ndarray) -> np.ndarray:
    """t = α · steps + (1/β) · bytes/S · S per row, from solution (α µs, 1/β µs per byte)."""
    return design[:, 0] * solution[0] + design[:, 1] * size * solution[1]


def _fit_relative(design: np.ndarray, size: np.ndarray, time_us: np.ndarray,
                  outlier: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """fit_joint's fit, no checks: (solution, covariance, kept points, RMS error)."""
    kept = np.ones(len(time_us), dtype=bool)
    while True:
        solution, covariance = _least_squares(design[kept], size[kept], time_us[kept])
        relative = time_us / _model_us(design, size, solution) - 1   # every point
        error = float(np.sqrt(np.mean(relative[kept] ** 2)))
        spread = 1.4826 * float(np.median(np.abs(relative[kept])))  # robust: not set by outliers
        far = kept & (np.abs(relative) > outlier * max(spread, 1e-12))
        room = len(time_us) // 3 - int((~kept).sum())  # at most a third left out
        if not far.any() or room <= 0:
            return solution, covariance, kept, error
        worst = np.argsort(-np.abs(np.where(far, relative, 0)))[:min(room, int(far.sum()))]
        kept[worst] = False


NO_GROWTH = "the time does not grow with the size"   # fit_joint's refusal of a sweep


def fit_joint(rows: Sequence[Row], algorithm: str = "ring", outlier: float = 3.0) -> Fit:
    """One α and one β for the rows of ONE collective (any world sizes, ≥ 2), by least
    squares on the relative error: every point weighs the same, 8 B or 64 MiB.

    A point more than `outlier` × the spread of the residuals (1.4826 × their median
    size, which one slow call cannot inflate) from the model, e.g. a call slowed by another
    process, is left out and the fit repeated, until none is; at most a third of the
    points. The stated error is the RMS of measured/model − 1 over the points kept.
    Rows of count 0 (nothing moved) are not points. ValueError when
    the rows mix collectives, or leave fewer than 3 points, or fewer than 2 sizes.
    """
    used = [r for r in rows if r["bytes"] > 0]
    names = sorted({r["collective"] for r in rows})
    if len(names) != 1:
        raise ValueError(f"fit one collective at a time, got {names or 'no rows'}")
    if len(used) < 3 or len({r["bytes"] for r in used}) < 2:
        raise ValueError(f"{names[0]}: need >= 3 points of >= 2 sizes with bytes > 0 to fit "
                         f"α and β, got {len(used)}")
    measured = [fitted_time_us(r) for r in used]
    bad = [t for t in measured if not (t > 0 and math.isfinite(t))]
    if bad:
        raise ValueError(f"{names[0]}: times must be finite and > 0, got {bad[:3]}")
    design, size, time_us = _arrays(names[0], used, algorithm)
    batched = sum("time_min_us" in r for r in used)
    statistic = {0: "time_us", len(used): "time_min_us"}.get(batched, "mixed")
    solution, covariance, kept, error = _fit_relative(design, size, time_us, outlier)
    alpha_us, inv_beta = solution
    alpha_err, inv_beta_err = np.sqrt(np.clip(np.diag(covariance), 0, None))
    if inv_beta <= 0:
        raise ValueError(f"{names[0]}: {NO_GROWTH} here "
                         f"(slope {inv_beta:.3g} µs/B): no bandwidth to fit; sweep larger sizes")
    beta = 1 / inv_beta / 1e3   # bytes per µs → GB/s
    return Fit(names[0], algorithm, tuple(sorted({r["world_size"] for r in used})),
               float(alpha_us), float(beta), float(alpha_err),
               float(beta * inv_beta_err / inv_beta), error, int(kept.sum()),
               int((~kept).sum()), statistic,
               tuple((r["world_size"], r["bytes"]) for r, k in zip(used, kept) if not k))


class Fits(dict):
    """Fit per collective; `refused` names each collective that could not be fitted, and why."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: dict[str, str] = {}


def fit_all(rows: Sequence[Row], algorithm: str = "ring") -> Fits:
    """fit_joint per collective that has a model for `algorithm` (series order); a
    collective whose rows cannot be fitted (e.g. a sweep too small to show a cost per
    byte) goes to `.refused` with the reason, instead of stopping the others."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row["collective"], []).append(row)
    fits = Fits()
    for collective, group in groups.items():
        if collective in ALGORITHMS[algorithm]:
            try:
                fits[collective] = fit_joint(group, algorithm)
            except ValueError as error:
                fits.refused[collective] = str(error)
    return fits


def holdout_misses(rows: Sequence[Row], collective: str, algorithm: str = "ring",
                   outlier: float = 3.0) -> dict[tuple[int, int], float]:
    """|measured / predicted − 1| of every point of `collective`, keyed (world size,
    bytes), each predicted by a fit that never saw it: per world size the sizes in order,
    alternate sizes form two halves, each half is fitted as fit_joint fits (relative least
    squares, outliers left out) and predicts the other. ValueError when a half has fewer
    than 3 points."""
    points = sorted((r for r in rows if r["collective"] == collective and r["bytes"] > 0),
                    key=lambda r: (r["world_size"], r["bytes"]))
    position = {}
    halves: list[list[Row]] = [[], []]
    for r in points:
        index = position[r["world_size"]] = position.get(r["world_size"], -1) + 1
        halves[index % 2].append(r)
    if min(len(h) for h in halves) < 3:
        raise ValueError(f"{collective}: a held-out check needs >= 6 sizes with bytes > 0, "
                         f"got {len(points)}")
    misses = {}
    for fitted, predicted in ((halves[0], halves[1]), (halves[1], halves[0])):
        solution, *_ = _fit_relative(*_arrays(collective, fitted, algorithm), outlier)
        design, size, time_us = _arrays(collective, predicted, algorithm)
        for r, miss in zip(predicted, time_us / _model_us(design, size, solution) - 1):
            misses[r["world_size"], r["bytes"]] = abs(float(miss))
    return misses


def fit_table(fits: Mapping[str, Fit]) -> str:
    """One line per collective: α ± err (µs), β ± err (GB/s), fit error, n* and crossover."""
    lines = [f"{'collective':<15} {'α (µs)':>16} {'β (GB/s)':>18} {'fit err':>8} "
             f"{'n*=αβ':>10} {'S crossover':>12} {'left out':>9}"]
    for fit in fits.values():
        lines.append(f"{fit.collective:<15} {fit.alpha_us:8.1f} ± {fit.alpha_err_us:<5.1f} "
                     f"{fit.beta_gbps:9.3f} ± {fit.beta_err_gbps:<6.3f} {fit.error:8.1%} "
                     f"{fit.alpha_beta_bytes:9.0f}B {fit.crossover_bytes:11.0f}B "
                     f"{fit.outliers:>4} of {fit.points + fit.outliers}")
    for collective, why in getattr(fits, "refused", {}).items():
        lines.append(f"{collective:<15} no fit: {why}")
    return "\n".join(lines)


# ------------------------------------------------------------------ the physical limits

def copy_bandwidth_gbps(device: Any = "cpu", size_bytes: int = 64 << 20,
                        repeats: int = 5) -> float:
    """Best of `repeats` timed `dst.copy_(src)` of `size_bytes` on `device`: S / t in GB/s
    (bytes copied; memory traffic is twice that: one read and one write)."""
    import torch

    if size_bytes < 4 or repeats < 1:
        raise ValueError(f"need size_bytes >= 4 and repeats >= 1, got {size_bytes}, {repeats}")
    device = torch.device(device)
    src = torch.ones(size_bytes // 4, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)                                  # first touch: page faults, not copying
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        dst.copy_(src)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return src.numel() * 4 / best / 1e9


def nvidia_smi_links(timeout_s: float = 20.0) -> str | None:
    """`nvidia-smi nvlink --status` and `nvidia-smi topo -m` output, or None without
    nvidia-smi (no NVIDIA driver: nothing to report)."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = []
    for args in (["nvlink", "--status"], ["topo", "-m"]):
        proc = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                              timeout=timeout_s)
        out.append(f"$ nvidia-smi {' '.join(args)}\n{proc.stdout or proc.stderr}")
    return "\n".join(out)


NCCL_SETTINGS = [{"NCCL_ALGO": algo, "NCCL_PROTO": proto}
                 for algo in ("Ring", "Tree") for proto in ("LL", "LL128", "Simple")]


def nccl_algo_sweep(gpus: int, max_bytes: str = "64M", iters: int = 20,
                    timeout_s: float = 300.0) -> dict[str, list[dict]]:
    """all_reduce under torchrun on `gpus` GPUs, once per NCCL_ALGO × NCCL_PROTO setting
    (NCCL reads them when a communicator is made, hence one job each). Returns the JSON
    rows per setting ('Ring/LL', ...); a setting NCCL refuses maps to []."""
    if gpus < 2:
        raise ValueError(f"the NCCL_ALGO/NCCL_PROTO sweep needs 2+ GPUs, got {gpus}")
    import json
    import tempfile

    from helpers.runtime.torchrun import torchrun_command

    results = {}
    for setting in NCCL_SETTINGS:
        with tempfile.TemporaryDirectory(prefix="nccl-sweep-logs-") as logs:
            cmd = torchrun_command(gpus, "-m", "helpers.bench", "--backend", "nccl",
                                   "--collectives", "all_reduce", "--max-bytes", max_bytes,
                                   "--iters", str(iters), "--json", log_dir=logs)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  env={**os.environ, **setting})
        key = f"{setting['NCCL_ALGO']}/{setting['NCCL_PROTO']}"
        results[key] = json.loads(proc.stdout) if proc.returncode == 0 else []
    return results


def report_fit(rows: Sequence[Row], fits: Mapping[str, Fit], times: float = 3.0) -> Any:
    """✓/✗ per collective: does the model predict sizes it was not fitted on about as well
    as its stated error ε says? Each half of the sweep (alternate sizes) is fitted and
    predicts the other half (`holdout_misses`); ✓ when the median miss over the points ε
    describes (those the fit to every size kept) is within `times` × ε."""
    from helpers.checks import Report, mark

    verdicts = Report()
    for collective, fit in fits.items():
        try:
            misses = holdout_misses(rows, collective, fit.algorithm)
        except ValueError as why:
            verdicts.note(f"{collective:<15} – not checked: {why}")
            continue
        median = float(np.median([m for k, m in misses.items() if k not in fit.left_out]))
        ok = median <= times * fit.error + 1e-12
        verdicts.add(f"{collective:<15}", ok, f"median miss on the sizes left out "
                     f"{median:5.1%} = {median / max(fit.error, 1e-12):.1f} ε "
                     f"(ε = {fit.error:.1%}; {mark(True)} up to {times:g} ε)")
    for collective, why in getattr(fits, "refused", {}).items():
        verdicts.note(f"{collective:<15} – not checked, no fit: {why}")
    return verdicts
