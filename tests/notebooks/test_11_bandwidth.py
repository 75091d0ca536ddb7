"""Notebook 11 (bandwidth), executed at 2 gloo ranks on small sizes, and its helpers.

The saved rows must cover the eight collectives at the sizes asked, with nccl-tests'
algbw/busbw relations; the notebook must print the tables, draw the plots, pass its
self-checks and show the progress bar's final line once, without '\\r' residue.
"""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from conftest import NOTEBOOKS
from helpers.bench import alpha_beta, figures
from helpers.bench.figures import plot_busbw, plot_latency
from helpers.bench.sweep import DisplayBar
from helpers.bench.nccl_tests import plan
from helpers.bench.traffic import RING_LIKE, tree_children
from helpers.bench.wire import agrees
from helpers.checks import grade
from notebook_runner import execute, notebook_text, output_text, png_count, printed
from reports import shown_reports

NB = NOTEBOOKS / "11_bandwidth.ipynb"
ALL = ("scatter", "gather", "broadcast", "reduce", "all_reduce", "all_gather",
       "reduce_scatter", "all_to_all")
SPLIT = ("scatter", "gather", "all_gather", "reduce_scatter", "all_to_all")
N = 2
MIN_BYTES, MAX_BYTES = 8, 1024 * 1024
# Doubling from 8 B: 8, 16, ..., 1 MiB (large enough for the α-β fit to see a cost per
# byte). Every size is a row, as in nccl-tests; on 2 ranks the split collectives' pieces
# are trimmed to 16 B multiples: 8 B and 16 B give 0 B.
SIZES = [MIN_BYTES << k for k in range(18)]
# busbw / algbw by hand for 2 ranks: 2(n-1)/n, 1, (n-1)/n.
FACTOR = {"all_reduce": 1.0, "broadcast": 1.0, "reduce": 1.0, **{c: 0.5 for c in SPLIT}}


def _outputs(nb) -> list[dict]:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]


def _numbers(text: str) -> list[float]:
    """The numbers a line states, in order (1,024 and 12.5% read as 1024 and 12.5): what
    a test compares, so that a copy edit of the words around them keeps it green."""
    return [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)]


def _printed(nb, cell_id: str) -> str:
    """What the code cell `cell_id` printed or displayed as text."""
    [cell] = [c for c in nb.cells if c.get("id") == cell_id]
    return output_text(cell)


def _printed_before(nb, cell_id: str) -> str:
    """What every code cell above the cell `cell_id` printed or displayed as text."""
    ids = [c.get("id") for c in nb.cells]
    return "".join(output_text(c) for c in nb.cells[:ids.index(cell_id)]
                   if c.cell_type == "code")


def _every_rank_checked(reports: list, n: int) -> None:
    """Each rank has a ✓ verdict (data-rank, data-ok) in some Report the notebook showed."""
    for rank in range(n):
        assert any(s.by_rank().get(rank) is True for s in reports), f"no ✓ for rank {rank}"


def _check_fit_heading(nb, n: int, batches: int) -> None:
    """The α-β fit's heading (cell ab03's first line) states this run's world size, gloo,
    the ring terms and the number of batches, whatever its words around them."""
    heading = _printed(nb, "ab03").splitlines()[0]
    assert {n, batches} <= set(_numbers(heading)), heading
    assert {"ring", "gloo"} <= set(re.findall(r"\w+", heading)), heading


@pytest.mark.notebook
def test_bandwidth_notebook_sweeps_every_collective(tmp_path, monkeypatch):
    assert SIZES[-1] == MAX_BYTES
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NB, tmp_path, n_ranks=N, min_bytes=MIN_BYTES, max_bytes=MAX_BYTES,
                 iters=10, warmup=2, hand_bytes=4096)

    rows = json.loads((results / "11_bandwidth.json").read_text())
    assert {r["collective"] for r in rows} == set(ALL)
    for collective in ALL:
        mine = [r for r in rows if r["collective"] == collective]
        expected = [plan(collective, size, N, 4) for size in SIZES]
        assert [r["bytes"] for r in mine] == [p.bytes for p in expected], collective
        assert [r["count"] for r in mine] == [p.piece for p in expected], collective
        if collective in SPLIT:
            assert [r["bytes"] for r in mine][:3] == [0, 0, 32]  # trimmed, not skipped
        for r in mine:
            assert r["world_size"] == N and r["backend"] == "gloo" and r["dtype"] == "float32"
            assert r["time_us"] > 0 or (r["count"] == 0 and collective in ("gather", "scatter"))
            assert r["algbw"] == pytest.approx(r["bytes"] / (r["time_us"] * 1e-6) / 1e9)
            assert r["busbw"] == pytest.approx(r["algbw"] * FACTOR[collective])

    text = notebook_text(nb)
    check_tables(nb, rows)
    assert png_count(nb) >= 6  # scheme, busbw, latency, bytes on the wire, α-β fit, ring/tree
    scheme = nb.cells[1]       # the scheme (the α-β model, 4 ranks) first, before any run
    assert scheme.id == "scheme" and "scheme" in scheme.metadata["tags"]
    assert "draw_alpha_beta(4)" in scheme.source and "cluster" not in scheme.source
    assert [o for o in scheme.outputs if "image/png" in o.get("data", {})]
    assert nb.cells[2].source.startswith("## What the picture shows")
    before_fit = _printed_before(nb, "ab03")   # the self-checks before the α-β fit
    assert "✓" in before_fit and "✗" not in before_fit
    reports = shown_reports(nb)
    _every_rank_checked(reports, N)
    [agree] = shown_reports(nb, "c11")         # every rank returned rank 0's rows
    assert agree.by_rank() == {r: True for r in range(N)}
    assert all(len(rows) in _numbers(said) for said in agree.texts().values()), agree.texts()
    [exercise] = shown_reports(nb, "c23")
    assert exercise.oks == [True] * 3, "the exercise check did not pass"
    assert [who for who, _, _ in exercise.verdicts] == ["bytes", "count", "busbw / algbw"]
    assert "helpers.bench.measurement.measure" in text and "by hand" in text

    # The progress bar: one display output holding its final line, nothing else.
    total = len(ALL) * len(SIZES)
    final = f"sweep: {total}/{total} points done in "
    assert text.count(final) == 1, "the bar's final text, exactly once"
    assert text.count("sweep:") == 1, "one bar line, not one per update"
    bars = [o for o in _outputs(nb) if "sweep:" in o.get("data", {}).get("text/plain", "")]
    assert len(bars) == 1 and bars[0]["output_type"] == "display_data"
    assert not any("\r" in (o.get("text", "") + o.get("data", {}).get("text/plain", ""))
                   for o in _outputs(nb)), "carriage-return residue in an output"
    check_alpha_beta_section(nb, rows, N)
    check_wire_section(json.loads((results / "11_bandwidth_wire.json").read_text()), N,
                       MAX_BYTES, reports)


def check_tables(nb, rows: list[dict]) -> None:
    """The eight nccl-tests tables: one output, each table whole in its text/plain and
    folded in its text/html under a line naming the collective, its sizes and avg busbw."""
    [cell] = [c for c in nb.cells if c.cell_type == "code"
              and c.source.strip() == "nccl_tests_tables(rows)"]
    [out] = cell.outputs
    plain, page = out["data"]["text/plain"], out["data"]["text/html"]
    for collective in ALL:
        assert f"# {collective}: world size {N}, backend gloo" in plain
    assert re.search(r"#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw", plain)
    for r in rows:  # every saved row is a line of a printed table
        assert re.search(rf"^\s*{r['bytes']}\s+{r['count']}\s+float\s", plain, flags=re.M), r
    assert plain.count("# Avg bus bandwidth") == len(ALL)
    folds = re.findall(r"<details><summary>([^<]*)</summary><pre>(.*?)</pre></details>", page,
                       flags=re.S)
    assert [line.split(" · ")[0] for line, _ in folds] == list(figures.by_collective(rows))
    assert sorted(line.split(" · ")[0] for line, _ in folds) == sorted(ALL)
    for line, table in folds:
        collective = line.split(" · ")[0]
        mine = [r for r in rows if r["collective"] == collective]
        average = sum(r["busbw"] for r in mine) / len(mine)
        assert line == (f"{collective} · {N} ranks · gloo · {len(SIZES)} sizes, "
                        f"{figures.size_label(min(r['bytes'] for r in mine))} to 1 MiB · "
                        f"avg busbw {average:.3g} GB/s"), line
        assert f"# {collective}: world size {N}, backend gloo" in table
        assert len(re.findall(r"^\s*\d+\s+\d+\s+float\s", table, flags=re.M)) == len(SIZES)


def check_wire_section(traffic: list[dict], n: int, largest: int, reports: list) -> None:
    """Bytes on the wire: the calibration, every point saved with measured and model per
    rank, and gloo's algorithm for each collective recomputed from the saved matrices."""
    [calibration] = [s for s in reports if s.cell == "w02"]
    assert calibration.by_rank() == {rank: True for rank in range(n)}
    for rank, said in calibration.texts().items():
        # a quiet rank reads 0 B; a 64 KiB send reads S + 96 / 48: the waiting, the send
        # and the model of the send, each rank's three numbers
        want = {0: 65536 + 96, 1: 48}.get(rank, 0)
        assert sorted(_numbers(said)) == sorted([0, want, want]), (rank, said)
    assert {(t["collective"], t["bytes"]) for t in traffic} == {
        (c, traffic_plan) for c in ALL for traffic_plan in
        (plan(c, 256, n, 4).bytes, plan(c, 65536, n, 4).bytes, plan(c, largest, n, 4).bytes)}
    by_point = {(t["collective"], t["bytes"]): t for t in traffic}
    for t in traffic:
        assert t["world_size"] == n and t["backend"] == "gloo" and t["steady"], t
        assert t["other"] == [0] * n
        assert [sum(row) for row in t["matrix"]] == t["measured"]
        if t["collective"] in RING_LIKE:
            assert all(agrees(m, mo, 1, n) for m, mo in zip(t["measured"], t["model"])), t
        if t["collective"] == "reduce_scatter":
            twin = by_point[("all_reduce", t["bytes"])]
            assert t["measured"] == twin["measured"], (t, twin)
        if t["collective"] == "broadcast":                  # the tree: the whole S per edge
            edges = {(p, q) for p in range(n) for q in tree_children(p, n)}
            assert {(p, q) for p in range(n) for q in range(n)
                    if t["matrix"][p][q] >= t["bytes"]} == edges, t["matrix"]
    [wire] = [s for s in reports if s.cell == "w07"]
    for collective in ALL:
        oks = [ok for who, ok, _ in wire.verdicts if who.split()[0] == collective]
        assert oks == [True] * 3, collective
        sizes = sorted(_numbers(who)[0] for who, _, _ in wire.verdicts
                       if who.split()[0] == collective)       # "all_reduce  256 B"
        assert sizes == sorted(plan(collective, s, n, 4).bytes
                               for s in (256, 65536, largest)), (collective, sizes)


# Fitted models whose held-out check may say ✗ in one run. Measured before this was set
# (38 runs of this notebook at 2 and 4 ranks, two at a time on 2 cores, 302 fits): no ✗,
# the median miss on the sizes left out 0.02-2.52 ε (the ✗ is at 3 ε). If a right model
# gets a ✗ by chance once in a thousand fits (test_bench.py saw none in 2000), two ✗
# among a run's 8 fits come by chance less than once in 30,000 runs; stated errors that
# are wrong for two collectives or more still fail.
CHANCE_MISSES = 1


def check_alpha_beta_section(nb, rows: list[dict], n: int) -> None:
    """The α-β cells: the numpy fit, the table, the self-check, the copy bandwidth, the
    prediction and the NCCL cell's skip, all consistent with the saved rows; every ✓/✗
    of the self-check says what the rows say, and every fitted model but CHANCE_MISSES
    predicts the sizes it was not fitted on within 3 × its stated error."""
    text, table = notebook_text(nb), _printed(nb, "ab03")
    fits = alpha_beta.fit_all(rows, "ring")
    assert set(fits) | set(fits.refused) == set(ALL) and "all_reduce" in fits
    [check] = shown_reports(nb, "ab07")         # the self-check: a verdict per fitted model
    assert {who for who, _, _ in check.verdicts} == set(fits), check.verdicts
    for collective, why in fits.refused.items():   # the table and the check say why not
        assert any(line.split()[:1] == [collective] and why in line
                   for line in table.splitlines()), (collective, why)
        assert any(note.split()[:1] == [collective] and why in note
                   for note in check.notes), (collective, why)
    # The numpy cell and fit_all agree, and both are printed from these rows.
    shown = re.search(rf"all_reduce on {n} ranks: α = ([\d.]+) µs per step, β = ([\d.]+) GB/s, "
                      r"fit error ([\d.]+)%", text)
    assert shown, "the numpy fit's line"
    plain = alpha_beta.fit_joint([r for r in rows if r["collective"] == "all_reduce"],
                                 outlier=math.inf)   # the numpy cell keeps every point
    assert float(shown[1]) == pytest.approx(plain.alpha_us, abs=0.051)
    assert float(shown[2]) == pytest.approx(plain.beta_gbps, abs=5e-4)
    assert float(shown[3]) == pytest.approx(plain.error * 100, abs=0.051)
    _check_fit_heading(nb, n, batches=5)       # the notebook's 5 batches (≤ iters = 10)
    assert all(fit.statistic == "time_min_us" for fit in fits.values())
    assert re.search(r"mean over all calls / fastest of 5 batches: median ×[\d.]+", text)
    missed = []
    for collective, fit in fits.items():
        line = re.search(rf"^{collective}\s+([\d.]+) ± [\d.]+\s+([\d.]+) ± [\d.]+\s+([\d.]+)%",
                         table, flags=re.M)
        assert line, collective
        assert float(line[1]) == pytest.approx(fit.alpha_us, abs=0.051)
        assert float(line[2]) == pytest.approx(fit.beta_gbps, abs=5e-4)
        assert fit.points >= 10 and len(fit.left_out) == fit.outliers, (collective, fit)
        # The self-check: the points ε describes (those kept), each predicted by the fit
        # to the other half of the sizes; ✓ when their median miss is within 3 ε.
        misses = alpha_beta.holdout_misses(rows, collective)
        median = float(np.median([m for k, m in misses.items() if k not in fit.left_out]))
        within = median <= 3 * fit.error
        [(_, ok, said)] = [v for v in check.verdicts if v[0] == collective]
        assert ok is within, (collective, said)
        stated = _numbers(said)          # the miss (%), the miss in ε, ε (%), the bound: 3
        assert any(abs(x - 100 * median) <= 0.051 for x in stated), (collective, said)
        assert any(abs(x - median / fit.error) <= 0.051 for x in stated), (collective, said)
        assert any(abs(x - 100 * fit.error) <= 0.051 for x in stated), (collective, said)
        missed += [] if within else [f"{collective}: {median / fit.error:.1f} ε"]
    assert len(missed) <= CHANCE_MISSES, missed
    copy = re.search(r"memory copy on rank 0: ([\d.]+) GB/s", text)
    assert copy and float(copy[1]) > 0.1
    best = max(rows, key=lambda r: r["busbw"])
    fraction = re.search(r"highest busbw: .*= ([\d.]+)% of the copy bandwidth", text)
    assert fraction and float(fraction[1]) == pytest.approx(
        100 * best["busbw"] / float(copy[1]), rel=0.01, abs=0.06)
    assert "NCCL_ALGO/NCCL_PROTO sweep skipped: backend gloo" in text


@pytest.mark.notebook
def test_bandwidth_notebook_fits_alpha_beta_at_4_ranks(tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NB, tmp_path, n_ranks=4, min_bytes=MIN_BYTES, max_bytes=MAX_BYTES,
                 iters=10, warmup=2, hand_bytes=4096)
    rows = json.loads((results / "11_bandwidth.json").read_text())
    assert {r["world_size"] for r in rows} == {4}
    reports = shown_reports(nb)
    _every_rank_checked(reports, 4)
    check_wire_section(json.loads((results / "11_bandwidth_wire.json").read_text()), 4,
                       MAX_BYTES, reports)
    assert "✗" not in _printed_before(nb, "ab03")   # the self-checks before the fit
    check_alpha_beta_section(nb, rows, 4)


# ------------------------------------------------------------------ helpers, no engines

def _row(collective: str, size: int, time_us: float, factor: float) -> dict:
    algbw = size / time_us / 1e3
    return {"collective": collective, "world_size": 4, "backend": "gloo", "dtype": "float32",
            "op": None, "root": None, "bytes": size, "count": size // 16,
            "time_us": time_us, "algbw": algbw, "busbw": algbw * factor}


check_factors = printed(figures.check_factors)
grade_the_row = printed(
    lambda prediction, row: grade(prediction, {"bytes": row["bytes"], "count": row["count"],
                                               "busbw / algbw": row["busbw"] / row["algbw"]},
                                  "the all_gather row"))   # the exercise's check cell


def test_check_factors_marks_a_wrong_factor(capsys):
    rows = [_row("all_gather", 1024, 10.0, 0.75), _row("all_reduce", 1024, 10.0, 1.5)]
    assert check_factors(rows, {"all_gather": 0.75, "all_reduce": 1.5})
    assert capsys.readouterr().out.count("✓") == 2
    rows.append(_row("all_reduce", 2048, 10.0, 0.75))  # half the right busbw
    assert not check_factors(rows, {"all_gather": 0.75, "all_reduce": 1.5})
    out = capsys.readouterr().out
    assert re.search(r"all_reduce\s+✗.*1 of 2 rows", out) and "all_gather      ✓" in out


def test_grade_prediction_asks_then_grades(capsys):
    row = _row("all_gather", 960, 5.0, 0.75)  # 1000 B on 4 ranks: 62 per rank, trimmed to 60
    assert not grade_the_row({"bytes": ..., "count": ..., "busbw / algbw": ...}, row)
    assert "✎ Fill in your prediction first" in capsys.readouterr().out   # the student's stub
    assert not grade_the_row({"bytes": ..., "count": 60, "busbw / algbw": 0.75}, row)
    assert re.search(r"bytes\s+✗  predicted \.\.\. .*\(fill this one in\)", capsys.readouterr().out)
    assert not grade_the_row({"bytes": 992, "count": 60, "busbw / algbw": 0.75}, row)
    out = capsys.readouterr().out
    assert re.search(r"bytes\s+✗", out) and re.search(r"count\s+✓", out)
    assert grade_the_row({"bytes": 960, "count": 240 // 4, "busbw / algbw": 3 / 4}, row)
    assert "✗" not in capsys.readouterr().out


def test_plots_mark_the_peak_and_skip_zero_busbw():
    rows = [_row(c, 8 << k, 5.0 + k, f) for c, f in (("broadcast", 1.0), ("all_reduce", 1.5))
            for k in range(6)]
    rows.append({**_row("all_reduce", 1 << 20, 1.0, 1.0), "busbw": 0.0})  # 1 rank
    fig = plot_busbw(rows)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert any("peak: all_reduce" in t and "256 B" in t for t in labels), labels
    assert len(fig.axes[0].get_legend().get_texts()) == 2
    assert max(x for line in fig.axes[0].get_lines() for x in line.get_xdata()) == 256
    small = plot_latency(rows, max_bytes=64)
    xs = {x for line in small.axes[0].get_lines() for x in line.get_xdata()}
    assert xs == {8, 16, 32, 64}
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    for figure in (fig, small):   # the legend beside the axes, never on the data, in the figure
        renderer = FigureCanvasAgg(figure).get_renderer()   # closed by pyplot: no canvas
        legend = figure.axes[0].get_legend().get_window_extent(renderer)
        axes = figure.axes[0].get_window_extent(renderer)
        assert legend.x0 >= axes.x1 and legend.x1 <= figure.bbox.x1, (legend, axes)


class _Handle:
    def __init__(self, shown: list):
        self.shown = shown

    def update(self, obj, raw=False):
        self.shown.append(obj)


def test_display_bar_updates_one_output_and_prints_nothing(monkeypatch, capsys):
    import IPython.display

    shown: list = []
    calls = []

    def fake_display(obj, raw=False, display_id=None):
        calls.append(display_id)
        shown.append(obj)
        return _Handle(shown)

    monkeypatch.setattr(IPython.display, "display", fake_display)
    bar = DisplayBar(total=3, desc="sweep", unit="point", mininterval=0)
    for _ in range(3):
        bar.update()
    bar.close()
    assert calls == [True], "one display output, updated in place"
    assert all(set(obj) == {"text/plain"} for obj in shown)
    assert shown[0]["text/plain"].startswith("sweep:   0%")
    assert any(t["text/plain"].startswith("sweep: 100%|██████████| 3/3") for t in shown)
    assert shown[-1]["text/plain"].startswith("sweep: 3/3 points done in 00:0")
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
