"""helpers.figures.audit on the figures issue 50 found unreadable in the rest of the series
(notebooks 11, 15, 18, ...): each drawn from small inputs at 2 and 4 ranks, with no engines,
must show its smallest text ≥ 9 px at 1280 px, no label out of its shape, no legend over
data."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
import torch

from test_figure_audit import assert_reads

RANKS = [2, 4]


# --- notebook 15: data parallelism -------------------------------------------------------

@pytest.mark.parametrize("n", RANKS)
def test_notebook_15_gradients_read(n):
    from helpers.training.data_parallel import make_deep_mlp, plot_grads

    model = make_deep_mlp()
    grads = [{name: torch.randn_like(p) * (r + 1) for name, p in model.named_parameters()}
             for r in range(n)]
    fig = plot_grads(grads, grads, grads[0], f"step 1 gradients · {n} ranks")
    assert_reads(fig)
    assert len(fig.axes[1].lines) == n + 1               # every rank and the reference


@pytest.mark.parametrize("measured", [True, False])
@pytest.mark.parametrize("n", RANKS)
def test_notebook_15_buckets_read(n, measured):
    from helpers.training.data_parallel import plot_buckets

    labels = ["per tensor", "1 KiB", "4 KiB", "16 KiB", "64 KiB", "all in one"]
    rows = [[{"label": label, "calls_per_step": 12 - 2 * k, "ms_per_step": 20.0 - 3 * k,
              "model_per_step": 98_304.0 * (n - 1) / n,
              "measured_per_step": (120_000.0 + 1000 * r) if measured else None}
             for k, label in enumerate(labels)] for r in range(n)]
    fig = plot_buckets(rows, f"bucketing · {n} ranks")
    assert_reads(fig)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == labels
    assert len(fig.legends[0].get_texts()) == n + 1      # every rank and the model


# --- notebook 18: pipeline parallelism ---------------------------------------------------

def _pipeline_events(n: int, m: int) -> list[list[tuple]]:
    """GPipe-like spans: every rank's m forwards after r slots, then its m backwards."""
    slot = 0.01
    return [[("forward", i, (r + i) * slot, (r + i + 0.9) * slot) for i in range(m)]
            + [("send", None, (r + m) * slot, (r + m + 0.2) * slot)]
            + [("backward", i, (2 * n + m + i - r) * slot, (2 * n + m + i - r + 1.8) * slot)
               for i in range(m)] for r in range(n)]


@pytest.mark.parametrize("m", [4, 64])
@pytest.mark.parametrize("n", RANKS)
def test_notebook_18_timelines_read(n, m):
    from helpers.training.pipeline_figures import plot_timelines

    events = _pipeline_events(n, m)
    fig = plot_timelines({"GPipe": events, "1F1B": events}, f"gloo · {n} stages · m = {m}")
    assert_reads(fig)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert (str(m - 1) in labels) is (m == 4)      # 64 micro-batches: too narrow to label


@pytest.mark.parametrize("panels", [1, 2])
@pytest.mark.parametrize("n", RANKS)
def test_notebook_18_bubbles_read(n, panels):
    from helpers.training.pipeline_figures import plot_bubbles

    table = [{"schedule": s, "m": m, "measured": 0.5 / m + 0.1 * k}
             for k, s in enumerate(("GPipe", "1F1B")) for m in (1, 2, 4, 8, 16)]
    tables = {f"panel {k}": table for k in range(panels)}
    fig = plot_bubbles(tables, n, f"gloo · p = {n} stages")
    assert_reads(fig)
    assert len(fig.legends[0].get_texts()) == 3


# --- notebooks 01-10: our own drawings of the collectives, shown as PNG ------------------

@pytest.mark.parametrize("collective", ["scatter", "gather", "broadcast", "reduce",
                                        "all_reduce", "all_gather", "reduce_scatter",
                                        "all_to_all", "send_recv"])
def test_our_own_drawings_carry_their_audit_and_read(collective, monkeypatch):
    from IPython.core.formatters import DisplayFormatter

    from helpers.figures.audit import METADATA_KEY, FigureAudit
    from helpers.figures.diagrams import DiagramDisplay, load_diagram

    monkeypatch.setenv("TUTORIAL_OFFLINE", "1")
    shown = DiagramDisplay(load_diagram(collective))
    _, metadata = DisplayFormatter().format(shown.image)
    result = FigureAudit(**metadata["image/png"][METADATA_KEY])
    assert result.png_width_px > 0
    assert not result.problems(), result.problems()


# --- notebook 10: the ring all-reduce --------------------------------------------------

@pytest.mark.parametrize("n", RANKS)
def test_notebook_10_ring_reads(n):
    from helpers.collectives.ring import example_data, plot_ring, ring_model

    fig = plot_ring(ring_model(example_data(n)))
    assert_reads(fig)
    assert fig.get_figwidth() <= 7.92


# --- notebook 11: bandwidth --------------------------------------------------------------

def _traffic(n: int, size: int) -> list[dict]:
    """Every benchmarked collective's row at one size: each rank writes its model's bytes
    to the next rank, one of them a little more (a header)."""
    from helpers.bench.nccl_tests import model_sent
    from helpers.collectives.registry import BENCHMARKED

    rows = []
    for collective in BENCHMARKED:
        model = [model_sent(collective, size, n, r) for r in range(n)]
        matrix = [[model[i] + (i == 0) * 64 if j == (i + 1) % n else 0 for j in range(n)]
                  for i in range(n)]
        rows.append({"collective": collective, "bytes": size, "world_size": n,
                     "backend": "gloo", "model": model, "matrix": matrix,
                     "measured": [sum(line) for line in matrix]})
    return rows


@pytest.mark.parametrize("n", RANKS)
def test_notebook_11_traffic_reads(n):
    from helpers.bench.figures import plot_traffic
    from helpers.collectives.registry import BENCHMARKED

    fig = plot_traffic(_traffic(n, 1 << 20), 1 << 20)
    assert_reads(fig)
    assert [ax.get_title().split()[0] for ax in fig.axes if ax.get_visible()] == \
        list(BENCHMARKED)


# --- notebook 14: groups and meshes ------------------------------------------------------

SHAPES = [(1, 2), (2, 2)]      # 2 and 4 ranks


@pytest.mark.parametrize("shape", SHAPES)
def test_notebook_14_phases_read(shape):
    from helpers.training.mesh import PHASES, hierarchical_reference, plot_phases

    n = shape[0] * shape[1]
    inputs = [[100.0 * r + i for i in range(2 * shape[1])] for r in range(n)]
    fig = plot_phases(hierarchical_reference(inputs, shape), shape, f"{n} ranks")
    assert_reads(fig)
    assert [ax.get_title() for ax in fig.axes] == list(PHASES)


@pytest.mark.parametrize("shape", SHAPES)
def test_notebook_14_crossings_read(shape):
    from helpers.training.mesh import PHASES, plot_crossings

    n = shape[0] * shape[1]
    seen = {"matrix": [[0 if i == j else 16384 * (1 + (i + j) % 3) for j in range(n)]
                       for i in range(n)], "between rows": [16384] * n}
    fig = plot_crossings({phase: seen for phase in PHASES[1:]}, shape, "bytes · S = 65,536 B")
    assert_reads(fig)
    assert fig.axes[0].texts[1].get_text() == "32K"


# --- notebooks 16 and 19: ZeRO-3 / FSDP2 shards, the 2-D mesh's parameters ---------------

@pytest.mark.parametrize("n", RANKS)
def test_notebook_16_shards_read(n):
    from helpers.training.zero import plot_shards

    sizes = {"0.weight": 64, "0.bias": 16, "2.weight": 32, "2.bias": 2}
    shards = [{name: torch.arange(-(-size // n), dtype=torch.float32) * 0.01 * (r + 1)
               for name, size in sizes.items()} for r in range(n)]
    fig = plot_shards(shards, shards, f"each rank's shard · {n} ranks")
    assert_reads(fig)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["by hand",
                                                                  "FSDP2 to_local()"]


@pytest.mark.parametrize("n", RANKS)
def test_notebook_19_params_read(n):
    from helpers.training import two_d
    from helpers.training.toy import make_mlp

    k = 4
    ref = make_mlp(d_hidden=2 * k).state_dict()
    states = []
    for r in range(n):
        tp = r % 2
        mine = slice(tp * k, (tp + 1) * k)
        states.append({"rank": r, "dp_rank": r // 2, "tp_rank": tp,
                       "params": {"0.weight": ref["0.weight"][mine], "0.bias": ref["0.bias"][mine],
                                  "2.weight": ref["2.weight"][:, mine], "2.bias": ref["2.bias"]}})
    fig = two_d.plot_params(states, ref, k, f"after 3 steps · {n // 2} × 2 mesh")
    assert_reads(fig)
    assert len([ax for ax in fig.axes if ax.get_visible()]) == n


# --- notebook 20: the block split by heads, then by sequence ----------------------------

@pytest.mark.parametrize("n", RANKS)
def test_notebook_20_block_split_reads(n):
    from helpers.transformer.sequence_parallel_figures import draw_block_split

    fig = draw_block_split(n)
    assert_reads(fig)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "attention\n(q k v, o)" in texts and f"r{n - 1}: every token" in texts


# --- notebook 23: gradient compression ---------------------------------------------------

HOOKS = ["float64 (DDP's own)", "fp16_compress_hook", "fp16 by hand",
         "bf16_compress_hook, wrapped", "powerSGD_hook rank 1", "powerSGD_hook rank 2",
         "powerSGD_hook rank 4"]


@pytest.mark.parametrize("n", RANKS)
def test_notebook_23_compression_reads(n):
    from helpers.fitting.accumulation_figures import plot_compression

    losses = {hook: [2.05 - 0.02 * step * (1 - 0.05 * k) for step in range(6)]
              for k, hook in enumerate(HOOKS)}
    errors = [{hook: 0.0 if k == 0 else 10.0 ** (-4 + k / 2) for k, hook in enumerate(HOOKS)}
              for _ in range(n)]
    fig = plot_compression(losses, errors)
    assert_reads(fig)
    right = fig.axes[1]
    assert len(right.patches) == n * len(HOOKS)
    assert right.get_xlim()[0] <= min(p.get_x() for p in right.patches)   # bars start inside


# --- notebook 08: all_to_all_single with uneven splits ---------------------------------

@pytest.mark.parametrize("n", RANKS)
def test_notebook_08_uneven_record_reads_with_after_under_before(n, monkeypatch):
    from helpers.figures.diagrams import load_diagram
    from helpers.figures.plots import plot_record
    from test_plots import model_record

    monkeypatch.setenv("TUTORIAL_OFFLINE", "1")
    record = model_record("all_to_all_single", n,
                          {"input_split_sizes": list(range(1, n + 1))})
    fig = plot_record(record, load_diagram("all_to_all"))
    assert_reads(fig)
    panel = next(ax for ax in fig.axes if ax.get_gid() == "rank0")
    cells = {p.get_gid().split("[")[0] for p in panel.patches if p.get_gid()}
    assert {"before:input", "after:output"} <= cells        # both sides, every rank
    x = {name: min(p.get_x() for p in panel.patches if (p.get_gid() or "").startswith(name))
         for name in ("before:input", "after:input")}
    assert x["before:input"] == x["after:input"] if n == 4 else x["before:input"] < x["after:input"]


# --- the executed-notebook check reads one audit per animation player --------------------

def test_a_player_counts_once_not_its_controls_too():
    """An animation player's markup holds a `nccl-animation-controls` div too; only the
    player itself carries (and must carry) the audit."""
    import sys
    from pathlib import Path

    import nbformat

    from helpers.figures.animation import player_html

    sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
    from figure_checks import figure_audits

    audit = {"png_width_px": 600, "scale": 1.0, "min_text_px": 12.0, "smallest_text": "x",
             "spills": [], "legend_over_data": []}
    page = player_html(["data:image/png;base64,AA==", "data:image/png;base64,AA=="], "p-1",
                       600, 300, {}, "t", 500, audit=audit)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(outputs=[
        nbformat.v4.new_output("display_data", data={"text/html": page})])])
    assert [found for _, found in figure_audits(nb)] == [audit]
