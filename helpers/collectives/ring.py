"""Ring all-reduce step by step: the NumPy model, the per-rank check, the figure.

n ranks cut their tensor into n chunks (chunk c = elements [c·L, (c+1)·L)). In
each step every rank sends one chunk to its right neighbour (r + 1) mod n and
receives one from its left neighbour (r − 1) mod n. With k = 0 … n − 2:

- reduce-scatter phase: rank r sends chunk (r − k − 1) mod n and adds the chunk
  it receives into its chunk (r − k − 2) mod n. Afterwards rank r holds chunk r
  summed over all ranks (what `dist.reduce_scatter` gives rank r).
- all-gather phase: rank r sends chunk (r − k) mod n and overwrites its chunk
  (r − k − 1) mod n with the one it receives. Afterwards every rank holds every
  reduced chunk: the all-reduce.

`ring_model(data)` computes every rank's tensor after every step (and how many
ranks' data each chunk holds); `report_ring` checks states measured on the ranks
against it, and `plot_ring` draws them, coloured by the same model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from helpers.formatting import format_value
from helpers.checks import Report, mark
from helpers.figures.column import COLUMN_IN

PHASES = ("reduce-scatter", "all-gather")
SHORT = {"start": "start", "reduce-scatter": "RS", "all-gather": "AG"}

OWN_FACE = "#f4f4f4"        # a chunk holding one rank's data
FULL_FACE = "#3f9f4f"       # a chunk holding the sum over all ranks
WRONG_EDGE = "#d62728"
CELL_PT = 7.0               # a chunk's value: 9.7 px on the page
WIDEST_IN = 13.0            # plot_ring's widest figure (many ranks)


def send_chunk(phase: str, k: int, rank: int, n: int) -> int:
    """The chunk `rank` sends to its right neighbour at step k (0-based) of `phase`."""
    return (rank - k - 1) % n if _phase(phase) == "reduce-scatter" else (rank - k) % n


def recv_chunk(phase: str, k: int, rank: int, n: int) -> int:
    """The chunk `rank` receives from its left neighbour at step k (0-based) of `phase`."""
    return (rank - k - 2) % n if _phase(phase) == "reduce-scatter" else (rank - k - 1) % n


def _phase(phase: str) -> str:
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
    return phase


@dataclass(frozen=True)
class Step:
    """One row of the trace: the start, or the state after one ring step."""

    phase: str                    # "start", "reduce-scatter" or "all-gather"
    k: int                        # 1-based step within the phase (0 for the start)
    n: int                        # world size
    send: tuple[int, ...] = ()    # per rank: the chunk it sent at this step
    recv: tuple[int, ...] = ()    # per rank: the chunk it received (and wrote)

    @property
    def label(self) -> str:
        return "start" if self.phase == "start" else f"{self.phase} {self.k}/{self.n - 1}"

    @property
    def short(self) -> str:
        return "start" if self.phase == "start" else f"{SHORT[self.phase]} {self.k}"


def schedule(n: int) -> list[Step]:
    """The start and the 2(n − 1) steps of ring all-reduce on n ranks."""
    if n < 1:
        raise ValueError(f"world size must be at least 1, got {n}")
    steps = [Step("start", 0, n)]
    for phase in PHASES:
        for k in range(n - 1):
            steps.append(Step(phase, k + 1, n,
                              tuple(send_chunk(phase, k, r, n) for r in range(n)),
                              tuple(recv_chunk(phase, k, r, n) for r in range(n))))
    return steps


def phase_rows(n: int, phase: str | None = None) -> slice:
    """Rows of the trace that show one phase: its starting state and its n − 1 steps."""
    if phase is None:
        return slice(0, 2 * n - 1)
    return slice(0, n) if _phase(phase) == "reduce-scatter" else slice(n - 1, 2 * n - 1)


@dataclass
class RingTrace:
    """Every rank's tensor after every step, as the model computes it."""

    steps: list[Step]
    values: np.ndarray            # (steps, rank, chunk, element)
    counts: np.ndarray            # (steps, rank, chunk): how many ranks' data the chunk holds

    @property
    def world_size(self) -> int:
        return self.values.shape[1]

    def tensors(self, rows: slice = slice(None)) -> np.ndarray:
        """(steps, rank, n·L): each rank's whole tensor, flat, as the ranks hold it."""
        v = self.values[rows]
        return v.reshape(v.shape[0], v.shape[1], -1)


def example_data(n: int, chunk_len: int = 1) -> np.ndarray:
    """(n, n·L): chunk c of rank r holds 10·r + c + 1 (the series' convention)."""
    return np.array([[10.0 * r + c + 1 for c in range(n) for _ in range(chunk_len)]
                     for r in range(n)])


def ring_model(data: Any) -> RingTrace:
    """Run ring all-reduce (SUM) on `data`, one row per rank, in NumPy; keep every step."""
    data = np.asarray(data, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] % data.shape[0]:
        raise ValueError(f"data must be (world_size, world_size · chunk_len), got {data.shape}")
    n = data.shape[0]
    values = data.reshape(n, n, -1).copy()
    counts = np.ones((n, n), dtype=int)
    steps = schedule(n)
    all_values, all_counts = [values.copy()], [counts.copy()]
    for step in steps[1:]:
        left = [(r - 1) % n for r in range(n)]
        sent_v = [values[left[r], step.send[left[r]]].copy() for r in range(n)]
        sent_c = [counts[left[r], step.send[left[r]]] for r in range(n)]
        for r in range(n):
            c = step.recv[r]
            if c != step.send[left[r]]:      # cannot happen: the schedule matches up
                raise AssertionError(f"rank {r} expects chunk {c}, its left sends another")
            if step.phase == "reduce-scatter":
                values[r, c] += sent_v[r]
                counts[r, c] += sent_c[r]
            else:
                values[r, c] = sent_v[r]
                counts[r, c] = sent_c[r]
        all_values.append(values.copy())
        all_counts.append(counts.copy())
    return RingTrace(steps, np.array(all_values), np.array(all_counts))


# ------------------------------------------------------------ measured states

def gathered_states(cluster: Any, name: str = "states") -> np.ndarray:
    """(steps, rank, elements): the list `name` of tensors every rank kept, one per step."""
    per_rank = cluster.pull(name)
    arrays = [np.array([np.asarray(t, dtype=np.float64) for t in r[name]]) for r in per_rank]
    lengths = {a.shape for a in arrays}
    if len(lengths) != 1:
        raise ValueError(f"the ranks kept different numbers of states: "
                         f"{[a.shape[0] for a in arrays]}")
    return np.stack(arrays, axis=1)


def chunk_text(chunk: np.ndarray) -> str:
    """A chunk's cell text: its value, or its first value and … when they differ."""
    first = format_value(float(chunk[0]))
    return first if np.all(chunk == chunk[0]) else first + "…"


def report_ring(measured: Any, trace: RingTrace, phase: str | None = None,
                rtol: float = 1e-5, atol: float = 1e-6) -> Report:
    """Check measured states rank by rank, step by step: one ✓/✗ line per rank.

    `measured` is (steps, rank, elements), e.g. from `gathered_states`: the whole
    run (2n − 1 states), or with `phase` one phase (its starting state and n − 1 steps).
    """
    n = trace.world_size
    rows = phase_rows(n, phase)
    steps = trace.steps[rows]
    expected = trace.tensors(rows)
    measured = np.asarray(measured, dtype=np.float64)
    verdicts = Report()
    if measured.ndim != 3 or measured.shape[1] != n:
        raise ValueError(f"measured states must be (steps, {n} ranks, elements), got {measured.shape}")
    if measured.shape[0] != len(steps) or measured.shape[2] != expected.shape[2]:
        what = f"the {phase} phase" if phase else "the whole ring"
        verdicts.note(f"{mark(False)} {what} has {len(steps)} states "
                      f"(the start and {len(steps) - 1} steps) "
                      f"of {expected.shape[2]} elements per rank; the ranks kept "
                      f"{measured.shape[0]} state(s) of {measured.shape[2]} elements. Keep a "
                      "copy of the tensor before the first step and after every step.")
        for _ in range(n):
            verdicts.verdict(False)
        return verdicts
    good = np.isclose(measured, expected, rtol=rtol, atol=atol).all(axis=2)  # (steps, rank)
    width = max(len(s.short) for s in steps)
    margin = len(f"rank {n - 1}") + 4                 # "rank n-1", then " ✓  " as Report writes it
    verdicts.note(" " * margin + " ".join(f"{s.short:>{width}}" for s in steps))
    for r in range(n):
        ok = bool(good[:, r].all())
        line = " " * (len(str(n - 1)) - len(str(r))) + " ".join(   # the step columns aligned
            f"{mark(g):>{width}}" for g in good[:, r])
        if not ok:
            i = int(np.argmin(good[:, r]))
            m = measured[i, r].reshape(n, -1)
            e = expected[i, r].reshape(n, -1)
            bad = [c for c in range(n) if not np.allclose(m[c], e[c], rtol=rtol, atol=atol)]
            line += (f"   first wrong after {steps[i].label}: "
                     + ", ".join(f"chunk {c} = {chunk_text(m[c])} (model: {chunk_text(e[c])})"
                                 for c in bad[:3]))
        verdicts.add(r, ok, line)
    return verdicts


# ------------------------------------------------------------ the figure

def chunk_face(count: int, n: int) -> str:
    """Colour of a chunk holding the data of `count` of the n ranks."""
    import matplotlib
    import matplotlib.colors as mcolors

    if count >= n:
        return FULL_FACE
    if count <= 1:
        return OWN_FACE
    shade = 0.25 + 0.45 * (count - 1) / max(n - 2, 1)   # partial sums: lighter → darker blue
    return mcolors.to_hex(matplotlib.colormaps["Blues"](shade))


def plot_ring(trace: RingTrace, measured: Any = None, phase: str | None = None,
              title: str | None = None, max_width_in: float = COLUMN_IN):
    """Small multiples: one row per step, one column per rank, one cell per chunk.

    Cells show the measured values (the model's when `measured` is None) and are
    coloured by how many ranks' data the chunk holds in the model (green: summed
    over all ranks). The chunk received at a step has a thick outline; a value that
    differs from the model is framed in red. Fewer measured states than the model
    has (an unfinished exercise) draws those and says so. The figure is at most
    `max_width_in` wide (the page's column: shown unscaled) while its cells' text can stay
    at CELL_PT or more; beyond that (5+ ranks) it grows, up to WIDEST_IN. Axes carry gid
    "step<i>:rank<r>", cells "step<i>:rank<r>:chunk<c>=<text>".
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from helpers.figures.panels import text_color_for

    n = trace.world_size
    rows = phase_rows(n, phase)
    steps = trace.steps[rows]
    counts = trace.counts[rows]
    expected = trace.tensors(rows)
    shown = expected if measured is None else np.asarray(measured, dtype=np.float64)
    missing = ""
    if shown.ndim == 3 and shown.shape[1:] == expected.shape[1:] and 0 < len(shown) < len(steps):
        missing = f" · only the first {len(shown)} of {len(steps)} states were kept"
        steps, counts, expected = steps[:len(shown)], counts[:len(shown)], expected[:len(shown)]
    if shown.shape != expected.shape:
        raise ValueError(f"the measured states have shape {shown.shape} (steps, ranks, elements),"
                         f" the model {expected.shape}: was every step of every phase kept?")
    shown = shown.reshape(len(steps), n, n, -1)
    expected = expected.reshape(len(steps), n, n, -1)

    label_w, gap, top, bottom, margin = 1.75, 0.3, 1.2, 0.2, 0.25
    texts = [chunk_text(shown[i, r, c]) for i in range(len(steps))
             for r in range(n) for c in range(n)]
    longest = max(0.62 * max(map(len, texts)), 1.8)        # the widest text, in em
    def fit(width_in: float) -> float:         # the cell that makes the figure this wide
        return (width_in - label_w - margin - (n - 1) * gap) / (n * n)

    # the cell the column allows, but not one too small for its text at CELL_PT unless
    # that is wider than WIDEST_IN (7+ ranks: such a figure does not read at 1280 px)
    cell = min(0.5, max(fit(max_width_in), min((CELL_PT * longest + 2) / 72, fit(WIDEST_IN))))
    row_h, row_gap = cell, 0.12
    fs = min(max(CELL_PT, 20.0 * cell), 10.0, 72 * cell / longest)
    width = label_w + n * n * cell + (n - 1) * gap + margin
    height = top + len(steps) * (row_h + row_gap) + 0.25 * (phase is None and n > 1) + bottom
    fig = plt.figure(figsize=(width, height), dpi=100)
    fig.patch.set_facecolor("white")
    heading = (title or (f"ring all-reduce, {n} ranks · " +
                         (f"{phase} phase" if phase else "reduce-scatter, then all-gather"))) + missing
    fig.text(0.15 / width, 1 - 0.28 / height, heading, fontsize=13, fontweight="bold",
             ha="left", va="center")
    fig.text(0.15 / width, 1 - 0.45 / height,
             "one cell per chunk · grey: one rank's data · blue: partial sums\n"
             "green: summed over all ranks · thick outline: received at this step",
             fontsize=8.5, color="#555555", ha="left", va="top")

    y = top
    for i, step in enumerate(steps):
        if phase is None and i == n and n > 1:
            y += 0.25                       # a little air between the two phases
        for r in range(n):
            x = label_w + r * (n * cell + gap)
            ax = fig.add_axes([x / width, 1 - (y + row_h) / height, n * cell / width, row_h / height])
            ax.set_gid(f"step{i}:rank{r}")
            ax.set_xlim(0, n)
            ax.set_ylim(0, 1)
            ax.set_axis_off()
            for c in range(n):
                wrong = not np.allclose(shown[i, r, c], expected[i, r, c], rtol=1e-5, atol=1e-6)
                face = "white" if wrong else chunk_face(int(counts[i, r, c]), n)
                received = bool(step.recv) and step.recv[r] == c
                edge, lw = ((WRONG_EDGE, 2.6) if wrong else ("#111111", 2.2) if received
                            else ("#8a8a8a", 0.7))
                text = chunk_text(shown[i, r, c])
                ax.add_patch(Rectangle((c + 0.04, 0.04), 0.92, 0.92, facecolor=face,
                                       edgecolor=edge, linewidth=lw, clip_on=False,
                                       gid=f"step{i}:rank{r}:chunk{c}={text}"))
                ax.text(c + 0.5, 0.5, text, ha="center", va="center", fontsize=fs,
                        color=WRONG_EDGE if wrong else text_color_for(face))
            if i == 0:
                ax.set_title(f"rank {r}", fontsize=10, fontweight="bold", pad=3)
        fig.text((label_w - 0.12) / width, 1 - (y + row_h / 2) / height, step.label,
                 ha="right", va="center", fontsize=9, color="#333333")
        y += row_h + row_gap
    plt.close(fig)
    return fig


def schedule_table(n: int) -> str:
    """The schedule as text: per step and rank, the chunk it sends → the chunk it receives."""
    lines = [f"{'step':<20}" + "   ".join(f"rank {r}" for r in range(n))]
    for step in schedule(n)[1:]:
        lines.append(f"{step.label:<20}" + "   ".join(
            f"{f'{step.send[r]}→{step.recv[r]}':^6}" for r in range(n)).rstrip())
    return "\n".join(lines)



def report_wire(pulled: list[dict]) -> Report:
    """Notebook 10's bytes on the wire: our ring and dist.all_reduce against the ring model.

    Each rank's `wire`: ours / library (bytes written, None on NCCL), their sockets,
    same (equal results), bytes (S). ✓ when both write 2(n−1)/n·S plus gloo's headers,
    ours mostly to rank r + 1 and the library's to rank r − 1.
    """
    from helpers.bench.nccl_tests import model_sent
    from helpers.bench.wire import agrees, peer_matrix

    n = len(pulled)
    wires = [p["wire"] for p in pulled]
    size = wires[0]["bytes"]
    report = Report(f"bytes each rank wrote, S = {size} B: ours, the library's, the ring model")
    if wires[0]["ours"] is None:
        for r, w in enumerate(wires):
            report.add(r, w["same"], f"model {model_sent('all_reduce', size, n, r):.0f} B; "
                                     "not measured (NCCL's bytes pass through no socket)")
        return report
    ours, _ = peer_matrix([w["ours_sockets"] for w in wires])
    library, _ = peer_matrix([w["library_sockets"] for w in wires])
    for r, w in enumerate(wires):
        model = model_sent("all_reduce", size, n, r)
        right, left = (r + 1) % n, (r - 1) % n
        ok = (w["same"] and agrees(w["ours"], model, 1, n) and agrees(w["library"], model, 1, n)
              and ours[r][right] >= model and library[r][left] >= model)
        report.add(r, ok, f"ours {w['ours']} B ({ours[r][right]} to rank {right}), library "
                          f"{w['library']} B ({library[r][left]} to rank {left}), model "
                          f"{model:.0f} B; results {'equal' if w['same'] else 'DIFFER'}")
    return report
