"""The per-rank before/after figure (helpers.figures.plots)."""
from __future__ import annotations

import copy
import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

from helpers.collectives import registry as collectives
from helpers.collectives import examples
from helpers import formatting
from helpers.collectives import models
from helpers.figures import panels
from helpers.figures import plots

# Every collective of the registry but send_recv (a pair of calls: its own test below).
COLLECTIVES = [c for c in collectives.COLLECTIVES if c != "send_recv"]
PARAMS = {"scatter": {"src": 0}, "gather": {"dst": 1}, "broadcast": {"src": 2},
          "reduce": {"dst": 3, "op": "SUM"}, "all_reduce": {"op": "MAX"},
          "reduce_scatter": {"op": "SUM"}, "reduce_scatter_single": {"op": "SUM"}}


def model_record(collective: str, world_size: int = 4, params: dict | None = None) -> dict:
    """A record like the notebooks save, built from helpers.collectives.models.  Buffers the model
    leaves UNSPECIFIED get the value a real run might leave there (-7)."""
    params = dict(PARAMS.get(collective, {}) if params is None else params)
    for key in ("src", "dst"):
        if key in params:
            params[key] = min(params[key], world_size - 1)
    befores = examples.example_befores(collective, world_size, params)
    afters = examples.model_after(collective, befores, params)
    ranks = []
    for r, (b, a) in enumerate(zip(befores, afters)):
        a = {k: ([-7.0] * len(b[k]) if v is models.UNSPECIFIED else v) for k, v in a.items()}
        ranks.append({"rank": r, "device": "cpu", "before": copy.deepcopy(b), "after": a})
    return {"collective": collective, "backend": "gloo", "world_size": world_size,
            "dtype": "float32", "params": params, "ranks": ranks}


def scatter_record() -> dict:
    """Written by hand, the way a 4-rank gloo run records scatter(src=0)."""
    chunks = [[1.0, 1.0], [5.0, 5.0], [9.0, 9.0], [13.0, 13.0]]
    ranks = [{"rank": r, "device": "cpu",
              "before": {"tensor": [0.0, 0.0], "scatter_list": chunks if r == 0 else None},
              "after": {"tensor": list(chunks[r]), "scatter_list": chunks if r == 0 else None}}
             for r in range(4)]
    return {"collective": "scatter", "backend": "gloo", "world_size": 4, "dtype": "float32",
            "params": {"src": 0}, "ranks": ranks, "elapsed_s": 0.01}


def rank_axes(fig) -> dict[int, plt.Axes]:
    found = {}
    for ax in fig.axes:
        gid = ax.get_gid() or ""
        if gid.startswith("rank"):
            found[int(gid[4:])] = ax
    return found


def texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def cell_colors(ax, value: str) -> list[tuple]:
    """Face colours of the cells showing `value` in one panel."""
    return [tuple(p.get_facecolor()) for p in ax.patches
            if (p.get_gid() or "").endswith(f"={value}")]


def values(state) -> list[str]:
    if state is None or state is models.UNSPECIFIED:
        return []
    return [formatting.format_value(v) for v in panels.flatten(state)]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_one_panel_per_rank_showing_every_value(collective):
    record = model_record(collective)
    fig = plots.plot_record(record)
    axes = rank_axes(fig)
    assert sorted(axes) == [0, 1, 2, 3]
    assert fig.get_figwidth() <= 16 and fig.get_figheight() < 30
    for info in record["ranks"]:
        shown = texts(axes[info["rank"]])
        for side in ("before", "after"):
            for arg, state in info[side].items():
                missing = [v for v in values(state) if v not in shown]
                assert not missing, f"rank {info['rank']} {side} {arg}: {missing} not drawn"
        for arg in info["before"]:
            assert any(t == arg or t.startswith(f"{arg}[") for t in shown), f"no row label {arg}"


def test_panels_in_rank_order_and_titles():
    fig = plots.plot_record(scatter_record())
    axes = rank_axes(fig)
    boxes = {r: ax.get_position() for r, ax in axes.items()}
    order = sorted(axes, key=lambda r: (-round(boxes[r].y1, 3), boxes[r].x0))
    assert order == [0, 1, 2, 3]
    for r, ax in axes.items():
        assert f"rank {r}" in ax.get_title() and "cpu" in ax.get_title()
    headings = [t.get_text() for t in fig.texts]
    assert "scatter(src=0) · gloo · world size 4" in headings


def test_hand_written_scatter_record():
    fig = plots.plot_record(scatter_record())
    axes = rank_axes(fig)
    assert "scatter_list[3]" in texts(axes[0])
    for r in (1, 2, 3):
        assert "not passed (None)" in texts(axes[r])
        assert "scatter_list[0]" not in texts(axes[r])
    assert texts(axes[2]).count("9") == 2 and "13" not in texts(axes[2])


@pytest.mark.parametrize("collective, key, root", [
    ("scatter", "src", 2), ("gather", "dst", 1), ("broadcast", "src", 3), ("reduce", "dst", 0)])
def test_root_is_marked(collective, key, root):
    params = dict(PARAMS.get(collective, {}), **{key: root})
    fig = plots.plot_record(model_record(collective, 4, params))
    for r, ax in rank_axes(fig).items():
        title = ax.get_title()
        assert (key in title.split(" · ")) == (r == root), title
        width = max(s.get_linewidth() for s in ax.spines.values())
        assert (width > 2) == (r == root)


def test_send_recv_marks_both_ends():
    record = model_record("send_recv", 4, {"src": 3, "dst": 1})
    titles = {r: ax.get_title().split(" · ") for r, ax in rank_axes(plots.plot_record(record)).items()}
    assert "src" in titles[3] and "dst" in titles[1]
    assert not {"src", "dst"} & (set(titles[0]) | set(titles[2]))


def test_same_value_same_colour_across_panels():
    axes = rank_axes(plots.plot_record(scatter_record()))
    # scatter_list[2] on rank 0 becomes rank 2's tensor: same colour in both panels.
    on_src, on_dst = cell_colors(axes[0], "9"), cell_colors(axes[2], "9")
    assert len(on_src) == 4 and len(on_dst) == 2          # before + after on rank 0
    assert len(set(on_src + on_dst)) == 1
    assert set(cell_colors(axes[3], "13")) == set(cell_colors(axes[0], "13"))
    assert cell_colors(axes[3], "13")[0] != on_src[0]
    assert cell_colors(axes[1], "5")[0] != on_src[0]


def test_reduced_result_has_its_own_colour():
    record = model_record("all_reduce", 4, {"op": "SUM"})
    axes = rank_axes(plots.plot_record(record))
    result = formatting.format_value(record["ranks"][0]["after"]["tensor"][0])
    inputs = {formatting.format_value(r["before"]["tensor"][0]) for r in record["ranks"]}
    result_colors = {c for ax in axes.values() for c in cell_colors(ax, result)}
    assert len(result_colors) == 1
    input_colors = {c for r, ax in axes.items() for v in inputs for c in cell_colors(ax, v)}
    assert len(input_colors) == 4 and not result_colors & input_colors


def test_undefined_buffer_is_hatched_but_shows_its_value():
    record = model_record("reduce", 4, {"dst": 1, "op": "SUM"})
    record["ranks"][2]["after"]["tensor"] = [42.5, 42.5]  # what gloo happened to leave
    axes = rank_axes(plots.plot_record(record))
    assert "undefined" not in texts(axes[1])
    for r in (0, 2, 3):
        assert "undefined" in texts(axes[r])
        hatched = [p for p in axes[r].patches if (p.get_gid() or "").startswith("after:") and p.get_hatch()]
        assert len(hatched) == 2
    assert "42.5" in texts(axes[2])


def _plot_model(collective, befores, afters, params):
    """plot_record of a record holding the model's states (its sentinels included)."""
    ranks = [{"rank": r, "device": "", "before": dict(b), "after": dict(a)}
             for r, (b, a) in enumerate(zip(befores, afters))]
    return plots.plot_record({"collective": collective, "backend": "model",
                              "world_size": len(ranks), "dtype": "float32",
                              "params": dict(params), "ranks": ranks})


def test_model_sentinels_are_drawn_undefined():
    befores = examples.example_befores("reduce", 3, {"dst": 0, "op": "SUM"})
    afters = examples.model_after("reduce", befores, {"dst": 0, "op": "SUM"})
    fig = _plot_model("reduce", befores, afters, {"dst": 0, "op": "SUM"})
    axes = rank_axes(fig)
    assert len(axes) == 3
    assert "undefined" in texts(axes[2]) and "33" in texts(axes[0])


def test_diagram_above_the_panels():
    png = io.BytesIO()
    tiny = plt.figure(figsize=(2, 1))
    tiny.text(0.5, 0.5, "diagram")
    tiny.savefig(png, format="png")
    caption = "Credit: somebody, https://example.org/diagram.png"
    fig = plots.plot_record(scatter_record(), diagram=png.getvalue(), diagram_caption=caption)
    diagram = [ax for ax in fig.axes if ax.get_gid() == "diagram"]
    assert len(diagram) == 1 and len(diagram[0].images) == 1
    assert "somebody" in " ".join(texts(diagram[0]))
    assert len(rank_axes(fig)) == 4
    # the diagram sits above every rank panel (the figure fits the page's column)
    assert all(diagram[0].get_position().y0 > ax.get_position().y1
               for ax in rank_axes(fig).values())
    assert not [ax for ax in plots.plot_record(scatter_record()).axes if ax.get_gid() == "diagram"]


@pytest.mark.parametrize("collective", ["scatter", "all_to_all", "reduce", "all_gather_single"])
def test_eight_ranks_wrap(collective):
    fig = plots.plot_record(model_record(collective, 8))
    axes = rank_axes(fig)
    assert sorted(axes) == list(range(8))
    rows = {round(ax.get_position().y1, 3) for ax in axes.values()}
    assert len(rows) >= 2
    assert fig.get_figwidth() <= 16
    fig.canvas.draw()                                     # renders without error


def test_one_rank():
    fig = plots.plot_record(model_record("all_reduce", 1))
    assert list(rank_axes(fig)) == [0]
    fig.canvas.draw()


def test_split_sizes_are_plain_text():
    params = {"input_split_sizes": [1, 2, 1, 2]}
    befores = examples.example_befores("all_to_all_single", 4, params)
    afters = examples.model_after("all_to_all_single", befores, params)
    axes = rank_axes(_plot_model("all_to_all_single", befores, afters, params))
    assert "[1, 2, 1, 2]" in texts(axes[0])
    assert not cell_colors(axes[0], "[1, 2, 1, 2]")


@pytest.mark.parametrize("value, text", [
    (1.0, "1"), (2.5, "2.5"), (1 / 3, "0.333"), (-0.0, "0"), (7, "7"), (64.0, "64"),
    (0.1 + 0.2, "0.3"), (1e-5, "1e-05"), (123456.7, "1.23e+05"), (float("nan"), "nan"), (True, "T")])
def test_format_value(value, text):
    assert formatting.format_value(value) == text


def test_zero_dim_tensors_and_numpy_values():
    import numpy as np
    ranks = [{"rank": r, "device": f"cuda:{r}", "before": {"tensor": float(r + 1)},
              "after": {"tensor": np.float32(3.0)}} for r in range(2)]
    record = {"collective": "all_reduce", "backend": "nccl", "world_size": 2, "dtype": "float32",
              "params": {"op": "SUM"}, "ranks": ranks}
    axes = rank_axes(plots.plot_record(record))
    assert "cuda:1" in axes[1].get_title()
    assert {"2", "3", "tensor"} <= set(texts(axes[1]))
