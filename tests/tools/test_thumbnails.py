"""The index cards' pictures (tools.thumbnails): one size, large text, each notebook's own result.

The results files are made by the real helpers (records.record_from_states, run_record,
diagnose, ring_model, the examples' model), shaped as the notebooks save them.
"""
from __future__ import annotations

import io
import json
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.image import imread
from matplotlib.colors import to_rgb
from matplotlib.text import Text

from tools.thumbnails import (BAD, HEIGHT_PX, MIN_FONT, WIDTH_PX, figure_for, letterbox, png,
                              thumbnail)

N = 4


def _cluster(n: int = N) -> SimpleNamespace:
    return SimpleNamespace(backend="gloo", world_size=n,
                           ranks=[SimpleNamespace(rank=r, device="cpu") for r in range(n)])


def _record(collective: str, params: dict, size: int = 2) -> dict:
    from helpers.collectives.examples import example_befores, model_after
    from helpers.records import record_from_states

    befores = example_befores(collective, N, params, size=size)
    afters = model_after(collective, befores, params)
    return record_from_states(_cluster(), collective, params,
                              [{"before": b, "after": a} for b, a in zip(befores, afters)])


def _save(tmp_path, name: str, data) -> None:
    (tmp_path / name).write_text(json.dumps(data))


def _card(tmp_path, stem: str):
    """(the figure, the decoded PNG) of a card, after the checks every card must pass."""
    fig = figure_for(stem, tmp_path)
    assert fig is not None
    image = imread(io.BytesIO(thumbnail(stem, tmp_path)), format="png")
    assert image.shape[:2] == (HEIGHT_PX, WIDTH_PX)                 # one size for every card
    assert image[..., :3].std() > 0.1                              # not blank
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert texts and min(t.get_fontsize() for t in texts) >= MIN_FONT   # ≥ 10 px on a card
    return fig, image


def _gids(fig) -> list[str]:
    return [a.get_gid() for a in fig.findobj() if a.get_gid()]


def test_a_collective_record_is_every_rank_before_and_after(tmp_path):
    _save(tmp_path, "01_scatter.json", [_record("scatter", {"src": 0})])
    fig, _ = _card(tmp_path, "01_scatter")
    gids = _gids(fig)
    # rank 0 (src) passes scatter_list: one cell per rank's piece; the others pass None
    assert [g for g in gids if g.startswith("before0[")] == [
        "before0[0]=1", "before0[1]=2", "before0[2]=3", "before0[3]=4"]
    assert {"before1=None", "before2=None", "before3=None"} <= set(gids)
    assert [g for g in gids if g.startswith("after")] == [f"after{r}[0]={r + 1}" for r in range(N)]
    assert "rank 0 · src" in [t.get_text() for t in fig.findobj(Text)]


def test_a_file_of_several_records_shows_the_first(tmp_path):
    _save(tmp_path, "05_all_reduce.json", [_record("all_reduce", {"op": "SUM"}, size=1),
                                          _record("broadcast", {"src": 0})])
    fig, _ = _card(tmp_path, "05_all_reduce")
    assert [g for g in _gids(fig) if g.startswith("after")] == [
        f"after{r}[0]=64" for r in range(N)]                        # 1 + 11 + 21 + 31


def test_08_is_the_transpose_grid(tmp_path):
    _save(tmp_path, "08_all_to_all.json", [_record("all_to_all", {})])
    fig, _ = _card(tmp_path, "08_all_to_all")
    cells = {g.split("=")[0]: g.split("=")[1] for g in _gids(fig) if "][" in g}
    assert len(cells) == 2 * N * N
    assert all(cells[f"received[{j}][{i}]"] == cells[f"sent[{i}][{j}]"]
               for i in range(N) for j in range(N))
    assert cells["sent[1][2]"] == "13"
    assert fig.texts[0].get_text().endswith("✓")


def test_10_is_the_ring_grid_with_the_measured_states(tmp_path):
    from helpers.collectives.ring import example_data, ring_model

    data = example_data(N)
    trace = ring_model(data)
    record = _record("all_reduce", {"op": "SUM"}, size=N)
    for r, rank in enumerate(record["ranks"]):
        rank["before"]["tensor"] = data[r].tolist()
    record["ring_states"] = trace.tensors().tolist()               # (steps, rank, elements)

    def framed_red(fig) -> list[str]:
        return [p.get_gid() for p in fig.axes[0].patches
                if np.allclose(p.get_edgecolor()[:3], to_rgb(BAD), atol=0.01)]

    _save(tmp_path, "10_ring_all_reduce.json", [record])
    fig, _ = _card(tmp_path, "10_ring_all_reduce")
    cells = [g for g in _gids(fig) if g.startswith("step")]
    assert len(cells) == len(trace.steps) * N * N == (2 * (N - 1) + 1) * N * N
    assert not framed_red(fig)
    record["ring_states"][-1][0][0] = 999.0                       # a wrong last state: framed
    _save(tmp_path, "10_ring_all_reduce.json", [record])
    assert framed_red(figure_for("10_ring_all_reduce", tmp_path)) == [
        f"step{len(trace.steps) - 1}:rank0:chunk0"]


def test_00_is_each_rank_working_then_waiting_in_the_barrier(tmp_path):
    from matplotlib.patches import Rectangle

    timings = [{"rank": r, "arrived": 0.2 * r, "left": 0.61} for r in range(N)]
    _save(tmp_path, "00_ranks_and_world.json",
          {"kind": "00_ranks_and_world", "timings": timings})
    fig, _ = _card(tmp_path, "00_ranks_and_world")
    boxes = {a.get_gid(): a for a in fig.findobj(Rectangle) if a.get_gid()}
    for t in timings:
        working, waiting = boxes[f"rank{t['rank']}:working"], boxes[f"rank{t['rank']}:waiting"]
        # the waits all end together; each rank's work is as long as it was late
        assert waiting.get_x() + waiting.get_width() == pytest.approx(
            boxes["rank0:waiting"].get_x() + boxes["rank0:waiting"].get_width())
        assert working.get_width() == pytest.approx(
            (waiting.get_x() + waiting.get_width() - working.get_x()) * t["arrived"] / 0.61)


def test_11_is_the_busbw_curves(tmp_path):
    rows = [{"collective": c, "bytes": b, "busbw": b / 1e6 * (k + 1), "algbw": 0.0,
             "backend": "gloo", "world_size": N, "dtype": "float32", "time_us": 1.0}
            for k, c in enumerate(("all_reduce", "all_gather")) for b in (0, 1024, 1 << 20)]
    _save(tmp_path, "11_bandwidth.json", rows)
    fig, _ = _card(tmp_path, "11_bandwidth")
    lines = {ln.get_gid(): ln for ln in fig.axes[0].lines}
    assert set(lines) == {"busbw:all_reduce", "busbw:all_gather"}
    assert list(lines["busbw:all_reduce"].get_xdata()) == [1024, 1 << 20]   # 0 B: off a log axis
    assert fig.axes[0].get_legend() is not None


def test_12_is_the_probe_table_one_cell_per_op_and_dtype(tmp_path):
    ops, dtypes = ["SUM", "AVG", "BAND"], ["float32", "int64", "bool"]
    cases = [{"collective": c, "dtype": d, "op": op,
              "status": "refused" if (op == "BAND" and d.startswith("float")) or
              (op == "AVG" and d != "float32") else "ok"}
             for c in ("reduce", "all_reduce") for op in ops for d in dtypes]
    cases[0]["status"] = "wrong"                                  # reduce, float32, SUM
    cases += [{"collective": "broadcast", "dtype": d, "op": None, "status": "ok"} for d in dtypes]
    survey = {"backend": "gloo", "world_size": N, "reducing": ["reduce", "all_reduce"],
              "ops": ops, "dtypes": dtypes, "cases": cases}
    _save(tmp_path, "12_backend_support.survey.json", survey)
    _save(tmp_path, "12_backend_support.json", [_record("all_reduce", {"op": "SUM"})])
    fig, _ = _card(tmp_path, "12_backend_support")
    cells = dict(g.split("=") for g in _gids(fig) if "=" in g)
    assert len(cells) == len(ops) * len(dtypes)
    assert cells["SUM:float32"] == "WRONG" and cells["SUM:int64"] == "accepted"
    assert cells["BAND:float32"] == "refused" and cells["BAND:int64"] == "accepted"
    assert cells["AVG:int64"] == "refused"


class _Composite(Exception):
    def __init__(self, elist):
        self.elist = elist


def test_13_is_what_happened_by_rank_for_every_mistake(tmp_path):
    from helpers.runtime.diagnose import diagnose

    engines = {e: e for e in range(N)}
    mismatch = diagnose(_Composite([("RuntimeError", "Detected mismatch between collectives "
                                     "on ranks", None, {"engine_id": e}) for e in range(N)]),
                        engines)
    absent = diagnose(_Composite([("RuntimeError", "[Rank 0]: Ranks 1, 2, 3 failed to pass "
                                   "monitoredBarrier in 5000 ms", None, {"engine_id": 0})]),
                      engines, targets=[0])
    _save(tmp_path, "13_debugging.json", [mismatch, absent])
    fig, _ = _card(tmp_path, "13_debugging")
    cells = {p.get_gid(): p.get_facecolor() for p in fig.axes[0].patches
             if (p.get_gid() or "").startswith("mistake")}
    assert len(cells) == 2 * N
    assert len({cells[f"mistake1:rank{r}"] for r in range(1, N)}) == 1   # 1-3 never reached
    assert cells["mistake1:rank0"] != cells["mistake1:rank1"]
    assert cells["mistake0:rank0"] != cells["mistake1:rank0"]       # usable group vs lost


def _run(kind: str, pulled: list[list[dict]], **metadata) -> dict:
    from helpers.records import run_record

    return run_record(kind, _cluster(), pulled, **metadata)


def test_17_is_the_whole_w_with_each_ranks_block(tmp_path):
    import torch

    from helpers.training.tensor_parallel import column_shard, row_shard

    torch.manual_seed(0)
    first, second = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
    pulled = [[{"rank": r, "W1_shard": column_shard(first, r, N)[0],
                "W2_shard": row_shard(second, r, N)} for r in range(N)]]
    _save(tmp_path, "17_tensor_parallel.json", _run("17_tensor_parallel", pulled, d_hidden=16))
    fig, _ = _card(tmp_path, "17_tensor_parallel")
    w1, w2 = (next(ax for ax in fig.axes if ax.get_images() and
                   any((p.get_gid() or "").startswith(name) for p in ax.patches))
              for name in ("W1", "W2"))
    assert np.allclose(w1.get_images()[0].get_array(), first.weight.detach().numpy())
    assert np.allclose(w2.get_images()[0].get_array(), second.weight.detach().numpy())
    assert [p.get_gid() for p in w1.patches] == [f"W1:rank{r}" for r in range(N)]
    assert [p.get_height() for p in w1.patches] == [4] * N       # 16 rows: 4 per rank
    assert [p.get_width() for p in w2.patches] == [4] * N        # 16 columns: 4 per rank


def test_training_cards_from_their_saved_runs(tmp_path):
    rng = np.random.default_rng(0)
    grads = [{"w": rng.normal(size=6).tolist()} for _ in range(N)]
    mean = {"w": np.mean([g["w"] for g in grads], axis=0).tolist()}
    _save(tmp_path, "15_data_parallel.json", _run("15_data_parallel", [[
        {"rank": r, "grads_before": grads[r], "grads_after": mean} for r in range(N)]]))
    fig, _ = _card(tmp_path, "15_data_parallel")
    before, after = (ax.get_images()[0].get_array() for ax in fig.axes[1:])
    assert before.shape == (N, 6) and np.ptp(before, axis=0).max() > 0
    assert np.ptp(after, axis=0).max() == 0 and "✓" in fig.axes[0].texts[-1].get_text()

    memory = {s: {"parameters": 400 // k, "gradients": 400 // k, "optimizer state": 800 // k,
                  "peak gathered": 0 if s == "DP" else 100}
              for k, s in enumerate(("DP", "ZeRO-1", "ZeRO-2", "ZeRO-3"), 1)}
    _save(tmp_path, "16_zero_fsdp.json", _run("16_zero_fsdp", [[
        {"rank": r, "results": {s: {"memory": m} for s, m in memory.items()}}
        for r in range(N)]]))
    fig, _ = _card(tmp_path, "16_zero_fsdp")
    bars = {p.get_gid(): p.get_width() for p in fig.axes[0].patches if p.get_gid()}
    assert len(bars) == 4 * 4
    assert bars["DP:optimizer state"] == pytest.approx(2 * bars["DP:parameters"])

    events = [[["forward", 0, 0.01 * r, 0.01 * r + 0.01], ["backward", 0, 0.1, 0.12]]
              for r in range(N)]
    _save(tmp_path, "18_pipeline_parallel.json", _run("18_pipeline_parallel", [[
        {"rank": r, "runs": [[name, 8, 0, events[r], 1, {}] for name in ("GPipe", "1F1B")]}
        for r in range(N)]]))
    fig, _ = _card(tmp_path, "18_pipeline_parallel")
    spans = [g for g in _gids(fig) if ":rank" in g]
    assert len(spans) == 2 * N * 2 and "GPipe:rank3:backward" in spans

    crossings = {"in rows": {"matrix": [[0, 9, 0, 0], [9, 0, 0, 0], [0, 0, 0, 9], [0, 0, 9, 0]]},
                 "across": {"matrix": [[0, 0, 5, 0], [0, 0, 0, 5], [5, 0, 0, 0], [0, 5, 0, 0]]}}
    _save(tmp_path, "14_groups_and_meshes.json", _run("14_groups_and_meshes", [[
        {"rank": r, "mesh_coordinate": [r // 2, r % 2]} for r in range(N)]],
        shape=[2, 2], crossings=crossings))
    fig, _ = _card(tmp_path, "14_groups_and_meshes")
    assert sorted(g for g in _gids(fig) if g.startswith("link")) == [
        "link0-1", "link0-2", "link1-3", "link2-3"]                # no diagonal: nothing sent

    executed = lambda r: [{"phase": "forward", "group": [r - r % 2, r - r % 2 + 1],
                           "measured": 100},
                          {"phase": "gradient sync", "group": [r % 2, r % 2 + 2], "measured": 30}]
    _save(tmp_path, "19_two_d_parallel.json", _run("19_two_d_parallel", [[
        {"rank": r, "dp_rank": r // 2, "tp_rank": r % 2, "executed": executed(r)}
        for r in range(N)]], dp_size=2, tp_size=2))
    fig, _ = _card(tmp_path, "19_two_d_parallel")
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert labels.count("tp: forward\n100 B") == 2 and labels.count("dp: gradient sync\n30 B") == 2


def test_the_transformer_block_cards_from_their_saved_runs(tmp_path):
    """20: activations by setting and region; 21: scores per rank and split; 22: rows sent,
    rank × expert, each expert under its owner's colour."""
    kept = {"one process": {"layernorm": 400, "tensor-parallel": 3000, "total": 3400},
            "TP": {"layernorm": 400, "tensor-parallel": 1000, "total": 1400},
            "TP + SP": {"layernorm": 100, "tensor-parallel": 1000, "total": 1100}}
    _save(tmp_path, "20_tensor_sequence_parallel.json", _run("20_tensor_sequence_parallel", [[
        {"rank": r, "saved_bytes": kept} for r in range(N)]]))
    fig, _ = _card(tmp_path, "20_tensor_sequence_parallel")
    bars = {p.get_gid(): p.get_width() for p in fig.axes[0].patches if p.get_gid()}
    assert len(bars) == 3 * 2
    assert bars["TP:layernorm"] == pytest.approx(4 * bars["TP + SP:layernorm"])
    assert bars["one process:tensor-parallel"] == pytest.approx(3 * bars["TP:tensor-parallel"])

    load = lambda r: {"contiguous": {"blocks": r + 1, "scores": 100 * (3 + 4 * r),
                                     "compute_ms": 1.0 + r},
                      "zigzag": {"blocks": N, "scores": 100 * (2 * N + 1), "compute_ms": 2.5}}
    _save(tmp_path, "21_context_parallel.json", _run("21_context_parallel", [[
        {"rank": r, "load": load(r)} for r in range(N)]]))
    fig, _ = _card(tmp_path, "21_context_parallel")
    bars = {p.get_gid(): p.get_width() for p in fig.axes[0].patches if p.get_gid()}
    assert len({w for g, w in bars.items() if g.startswith("zigzag")}) == 1   # balanced
    assert bars["contiguous:rank3"] == pytest.approx(5 * bars["contiguous:rank0"])

    sent = [[3, 0, 5, 1, 2, 2, 0, 3], [1, 1, 1, 1, 1, 1, 1, 9]] * 2
    _save(tmp_path, "22_expert_parallel.json", _run("22_expert_parallel", [[
        {"rank": r, "load_runs": [{"cf": 1.25, "send_counts": sent[r], "dropped": [[0, 1]] * r},
                                  {"cf": 0.75, "send_counts": sent[r], "dropped": [[0, 1]] * 5}]}
        for r in range(N)]], top_k=2))
    fig, _ = _card(tmp_path, "22_expert_parallel")
    cells = {g: p for g in _gids(fig) for p in fig.axes[0].patches if p.get_gid() == g}
    assert len([g for g in cells if g.startswith("sent:")]) == N * 8
    owners = [to_rgb(cells[f"owner:e{e}"].get_facecolor()) for e in range(8)]
    assert owners[0] == owners[1] != owners[2] == owners[3]      # two experts a rank
    words = [t.get_text() for t in fig.axes[0].texts]
    assert "9" in words and "cf 1.25: 6 dropped · cf 0.75: 20 dropped" in words


def test_the_cards_of_part_4_from_their_saved_runs(tmp_path):
    """23: a bar per hook, its length the measured bytes; 24: each hand-built schedule's
    fastest run at m = 2 × ranks, its compute spans per rank."""
    rows = [{"hook": "fp32", "measured": 4000, "rel_error": 1e-16},
            {"hook": "fp16", "measured": 1000, "rel_error": 3e-4}]
    _save(tmp_path, "23_accumulation_compression.json", _run("23_accumulation_compression", [[
        {"rank": r, "compression": rows} for r in range(N)]]))
    fig, _ = _card(tmp_path, "23_accumulation_compression")
    bars = {p.get_gid(): p.get_width() for p in fig.axes[0].patches if p.get_gid()}
    assert bars["hook:fp32"] == pytest.approx(4 * bars["hook:fp16"])
    assert "fp16: 0.25× · error 3e-04" in [t.get_text() for t in fig.axes[0].texts]

    def events(r: int, slow: float) -> list:
        return [["F", "0.0", 0.01 * r, 0.01 * r + 0.01], ["wait", "0.0", 0.05, 0.06],
                ["I", "0.0", 0.1, 0.1 + slow], ["W", "0.0", 0.2, 0.21]]
    _save(tmp_path, "24_pipeline_schedules.json", _run("24_pipeline_schedules", [[
        {"rank": r, "runs": [["ZB-H1", 2 * N, 0, events(r, 0.05), 1],
                             ["ZB-H1", 2 * N, 1, events(r, 0.01), 1],
                             ["ZB-H1", N, 0, events(r, 0.01), 1]]} for r in range(N)]]))
    fig, _ = _card(tmp_path, "24_pipeline_schedules")
    spans = [g for g in _gids(fig) if g.startswith("ZB-H1:")]
    assert len(spans) == 3 * N and "ZB-H1:rank3:W" in spans          # waits are not drawn
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert "ZB-H1 · 210 ms" in labels                                # the faster repeat


def test_the_cards_of_part_5_from_their_saved_runs(tmp_path):
    """25: a bar per rank and algorithm, its length the measured bytes; 26: the three loss
    curves, the restart drawn from its first step; 27: predicted and measured bars."""
    size = 1000
    rows = [{"algorithm": name, "rank": r, "measured": size * (2 if name == "tree" and r < 2
                                                               else 1.5), "model": 0, "ok": 1}
            for name in ("ring", "tree") for r in range(N)]
    _save(tmp_path, "25_algorithms.json", _run("25_algorithms", [[{"rank": r}
                                                                   for r in range(N)]],
                                                 S=size, bytes_rows=rows))
    fig, _ = _card(tmp_path, "25_algorithms")
    bars = {p.get_gid(): p.get_width() for p in fig.axes[0].patches if p.get_gid()}
    assert len(bars) == 2 * N
    assert bars["tree:rank0"] == pytest.approx(bars["tree:rank3"] * 4 / 3)
    assert bars["ring:rank0"] == bars["tree:rank3"]

    losses = [1.0, 0.8, 0.6, 0.5, 0.4, 0.35, 0.3, 0.28]
    _save(tmp_path, "26_checkpoints_failures.json", _run(
        "26_checkpoints_failures", [[{"rank": r, "resumed": losses[3:]} for r in range(N)]],
        saved_world_size=2, reference=losses, interrupted=losses[:5]))
    fig, _ = _card(tmp_path, "26_checkpoints_failures")
    lines = {line.get_gid(): line.get_xdata() for line in fig.axes[0].lines}
    assert len(lines["reference"]) == 8 and len(lines["interrupted"]) == 5
    assert lines["resumed"][0] == lines["reference"][3]              # resumed at step 3
    assert "resumed at step 3" in [t.get_text() for t in fig.axes[0].texts]

    errors = [{"config": "DP", "time predicted us": 100.0, "time measured us": 150.0,
               "ratio": 1.5}, {"config": "TP", "time predicted us": 300.0,
                               "time measured us": 200.0, "ratio": 2 / 3}]
    _save(tmp_path, "27_planning.json", _run("27_planning", [[{"rank": r} for r in range(N)]],
                                             errors=errors))
    fig, _ = _card(tmp_path, "27_planning")
    bars = {p.get_gid(): p.get_width() for p in fig.axes[0].patches if p.get_gid()}
    assert bars["TP:predicted"] == pytest.approx(3 * bars["DP:predicted"])
    assert bars["DP:measured"] == pytest.approx(1.5 * bars["DP:predicted"])
    assert "×0.67" in [t.get_text() for t in fig.axes[0].texts]


def test_no_saved_results_means_none_and_the_page_plot_is_letterboxed(tmp_path):
    from matplotlib.figure import Figure

    assert thumbnail("00_ranks_and_world", tmp_path) is None
    (tmp_path / "14_groups.json").write_text("{not json")
    assert thumbnail("14_groups", tmp_path) is None
    _save(tmp_path, "15_dp.json", {"ranks": [{"rank": 0, "loss": 1.0}]})
    assert thumbnail("15_dp", tmp_path) is None
    tall = Figure(figsize=(3, 9), dpi=50)                          # 150 × 450: a tall page plot
    tall.add_axes([0, 0, 1, 1]).imshow(np.zeros((9, 3)), cmap="gray", aspect="auto")
    image = imread(io.BytesIO(letterbox(png(tall))), format="png")[..., :3]
    assert image.shape[:2] == (HEIGHT_PX, WIDTH_PX)
    dark = np.where(image.mean(axis=2) < 0.5)
    assert dark[0].min() == 0 and dark[0].max() == HEIGHT_PX - 1   # full height
    width = dark[1].max() - dark[1].min() + 1
    assert abs(width - HEIGHT_PX / 3) <= 2                         # 1:3 kept, not stretched
    assert abs((dark[1].min() + dark[1].max()) / 2 - WIDTH_PX / 2) <= 2   # centred
