"""The scheme drawings of 14–19 and the plots whose layout shows the split: each read from
its artists (gids, colours, positions, images), at two world sizes or shapes."""
from __future__ import annotations

import matplotlib
import matplotlib.colors as mcolors
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg

from helpers.training import data_parallel, pipeline as pp, tensor_parallel as tp, two_d, zero
from helpers.training.schemes import (draw_data_parallel, draw_groups, draw_zero,
                                      rank_colour)
from helpers.training.schemes_split import (draw_schedules, draw_tensor_parallel,
                                            schedule_order, schedule_slots)
from helpers.training.toy import make_data, make_mlp, shard


def by_gid(fig) -> dict:
    return {a.get_gid(): a for ax in fig.axes for a in ax.get_children() if a.get_gid()}


def same_colour(a, b) -> bool:
    return np.allclose(mcolors.to_rgba(a)[:3], mcolors.to_rgba(b)[:3])


def box(patch) -> tuple[float, float, float, float]:
    """x0, y0, x1, y1 in data units."""
    if hasattr(patch, "get_bbox"):
        b = patch.get_bbox()
        return b.x0, b.y0, b.x1, b.y1
    x, y = patch.get_xy()
    return x, y, x + patch.get_width(), y + patch.get_height()


def inside(inner, outer) -> bool:
    a, b = box(inner), box(outer)
    return a[0] >= b[0] and a[1] >= b[1] and a[2] <= b[2] and a[3] <= b[3]


def readable(fig) -> None:
    """At most 8 in wide; every text ≥ 10 px when the figure is shown 800 px wide (or at its
    own size, if smaller), and inside the figure."""
    width = fig.get_figwidth()
    assert width <= 8.0 + 1e-9
    renderer = FigureCanvasAgg(fig).get_renderer()     # closed figures keep no canvas
    fig.draw(renderer)
    frame = fig.bbox
    texts = [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()]
    assert texts
    for t in texts:
        assert t.get_fontsize() * 100 / 72 * min(1.0, 8.0 / width) >= 10, t.get_text()
        extent = t.get_window_extent(renderer)
        assert extent.x0 >= frame.x0 - 1 and extent.x1 <= frame.x1 + 1, t.get_text()


def test_rank_colours_are_distinct_and_light_is_lighter():
    strong = [rank_colour(r) for r in range(9)]
    assert len(set(strong)) == 9
    for r in range(9):
        assert sum(mcolors.to_rgb(rank_colour(r, light=True))) > sum(mcolors.to_rgb(strong[r]))


@pytest.mark.parametrize("n", [2, 4, 6])
def test_groups_drawing_puts_each_rank_in_its_groups(n):
    fig = draw_groups(n)
    gid = by_gid(fig)
    rows, cols = {2: (1, 2), 4: (2, 2), 6: (2, 3)}[n]
    outlined = sorted(int(k.split(":")[2]) for k in gid if k.startswith("group:evens:"))
    assert outlined == list(range(0, n, 2))
    for k in outlined:
        assert inside(gid[f"evens:rank:{k}"], gid[f"group:evens:{k}"])
    for g in range(rows):
        members = [r for r in range(n) if inside(gid[f"sub:rank:{r}"], gid[f"subgroup:{g}"])]
        assert members == list(range(g * cols, (g + 1) * cols))
        row = [r for r in range(n) if inside(gid[f"mesh:rank:{r}"], gid[f"tp:{g}"])]
        assert row == list(range(g * cols, (g + 1) * cols))
    for c in range(cols):
        column = [r for r in range(n) if inside(gid[f"mesh:rank:{r}"], gid[f"dp:{c}"])]
        assert column == [k * cols + c for k in range(rows)]
    readable(fig)


@pytest.mark.parametrize("n", [2, 4])
def test_data_parallel_drawing_has_one_shard_per_rank(n):
    fig = draw_data_parallel(n, 48)
    gid = by_gid(fig)
    shards = [gid[f"shard:{r}"] for r in range(n)]
    assert not any(k.startswith("shard:") and int(k[6:]) >= n for k in gid)
    samples = torch.arange(48)
    texts = [t.get_text() for t in fig.axes[0].texts]
    for r, patch in enumerate(shards):
        mine = shard(samples, r, n)
        assert f"rank {r}: {mine[0]}–{mine[-1]}" in texts
        assert same_colour(patch.get_edgecolor(), rank_colour(r))
        assert same_colour(gid[f"grad:{r}"].get_edgecolor(), rank_colour(r))
        # after the all_reduce every rank holds every rank's gradient
        assert [same_colour(gid[f"mean:{r}:{k}"].get_facecolor(), rank_colour(k, True))
                for k in range(n)] == [True] * n
    ys = [box(p)[1] for p in shards]                 # one bar, cut in rank order
    assert ys == sorted(ys)
    assert all(np.isclose(box(a)[3], box(b)[1]) for a, b in zip(shards, shards[1:]))
    assert "all_reduce" in gid
    readable(fig)


SHARDED = {"DP": set(), "ZeRO-1": {"optimizer state"},
           "ZeRO-2": {"gradients", "optimizer state"},
           "ZeRO-3": {"parameters", "gradients", "optimizer state"}}


@pytest.mark.parametrize("n", [2, 4])
def test_zero_drawing_shows_what_each_stage_shards(n):
    fig = draw_zero(n)
    gid = by_gid(fig)
    for stage, sharded in SHARDED.items():
        for part in ("parameters", "gradients", "optimizer state"):
            for r in range(n):
                held = [j for j in range(n) if same_colour(
                    gid[f"zero:{stage}:{part}:{r}:{j}"].get_facecolor(), rank_colour(j))]
                assert held == ([r] if part in sharded else list(range(n))), (stage, part, r)
    readable(fig)


@pytest.mark.parametrize("n, d_in, d_out", [(2, 8, 4), (4, 8, 4), (3, 5, 6)])
def test_tensor_parallel_drawing_outlines_each_rank_s_slice(n, d_in, d_out):
    fig = draw_tensor_parallel(n, d_in=d_in, d_out=d_out)
    gid = by_gid(fig)
    d_hidden = tp.hidden_size(n)
    k = d_hidden // n
    row_heights = []
    for tag, rows in (("W1T", d_in), ("W2", d_out)):
        x0, y0, x1, y1 = box(gid[tag])
        outlines = [key for key in gid if key.startswith(f"{tag}:")]
        assert len(outlines) == n
        for r in range(n):
            a = box(gid[f"{tag}:{r}"])
            cell = (x1 - x0) / d_hidden
            assert np.allclose(a, (x0 + r * k * cell, y0, x0 + (r + 1) * k * cell, y1))
            assert same_colour(gid[f"{tag}:{r}"].get_edgecolor(), rank_colour(r))
            # the same feature slice in the output and the partial below it
            for below in ("Y1", "partial"):
                b = box(gid[f"{below}:{r}"])
                assert np.allclose((b[0], b[2]), (a[0], a[2]))
        row_heights.append((y1 - y0) / rows)         # one row of cells per row of W
    assert row_heights[0] > 0 and np.isclose(*row_heights)
    assert {"chain:f", "chain:g", "g", "Y2"} <= set(gid)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "forward: identity\nbackward: all_reduce" in texts
    assert "forward: all_reduce\nbackward: identity" in texts
    readable(fig)


@pytest.mark.parametrize("n", [2, 4])
def test_the_result_plot_puts_w_back_together_and_outlines_each_rank(n):
    X, _ = make_data()
    model = make_mlp(d_hidden=tp.hidden_size(n))
    states = []
    for r in range(n):
        w1, b1 = tp.column_shard(model[0], r, n)
        w2 = tp.row_shard(model[2], r, n)
        y1 = X @ w1.T + b1
        states.append({"rank": r, "W1_shard": w1, "Y1_slice": y1, "W2_shard": w2,
                       "Y2_partial": torch.tanh(y1) @ w2.T})
    y2 = sum(s["Y2_partial"] for s in states) + model[2].bias.detach()
    for s in states:
        s["Y2"] = y2
    fig = tp.plot_shards(states, "t")
    w1_ax, y1_ax, w2_ax, *partials, y2_ax = fig.axes
    k = 4
    for ax, whole, dim in ((w1_ax, model[0].weight, 0), (y1_ax, model[0](X), 1),
                           (w2_ax, model[2].weight, 1)):
        (image,) = ax.get_images()
        assert np.allclose(image.get_array(), whole.detach().numpy())
        outlines = {a.get_gid(): a for a in ax.patches if a.get_gid()}
        assert len(outlines) == n
        for r in range(n):
            x0, y0, x1, y1 = box(outlines[f"rank:{r}"])
            lo, hi = (y0, y1) if dim == 0 else (x0, x1)
            assert round(lo + 0.5) == r * k and round(hi + 0.5) == (r + 1) * k
            assert same_colour(outlines[f"rank:{r}"].get_edgecolor(), rank_colour(r))
    assert len(partials) == n
    total = sum(np.asarray(ax.get_images()[0].get_array()) for ax in partials)
    assert np.allclose(total + model[2].bias.detach().numpy(), y2_ax.get_images()[0].get_array())
    readable(fig)


def test_schedule_orders_follow_notebook_18():
    assert schedule_order("GPipe", 2, 0, 4) == ["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]
    assert schedule_order("1F1B", 2, 0, 4) == ["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"]
    assert schedule_order("1F1B", 2, 1, 4) == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]
    for p, m in ((4, 8), (4, 2), (3, 5)):
        for s in range(p):
            order = schedule_order("1F1B", p, s, m)
            assert pp.warmup_forwards(order) == pp.in_flight(order) == min(p - s, m)
            assert sorted(order) == sorted(schedule_order("GPipe", p, s, m))
    with pytest.raises(ValueError, match="schedule"):
        schedule_order("interleaved", 2, 0, 4)


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8)])
def test_schedule_grid_cells_and_order(p, m):
    fig = draw_schedules(p, m)
    gid = by_gid(fig)
    n_slots = 2 * (m + p - 1)                       # GPipe, unit slots: the formula's step
    assert max(schedule_slots("GPipe", p, m).values()) + 1 == n_slots
    for name in ("GPipe", "1F1B"):
        cells = {tuple(k.split(":")[1:]): v for k, v in gid.items() if k.startswith(name + ":")}
        assert len(cells) == p * n_slots
        slot = {}
        for (s, t, op), patch in cells.items():
            if op:
                slot[(int(s), op)] = int(t)
                kind = "forward" if op[0] == "F" else "backward"
                assert same_colour(patch.get_facecolor(), pp.COLOURS[kind])
        for s in range(p):
            drawn = [op for (st, op), _ in sorted(slot.items(), key=lambda kv: kv[1])
                     if st == s]
            assert drawn == schedule_order(name, p, s, m)
            idle = sum(1 for (st, _, op) in cells if int(st) == s and not op)
            assert idle == n_slots - 2 * m          # the bubble: (p − 1)/(m + p − 1) of it
            for i in range(m):                      # inputs arrive before they are used
                if s:
                    assert slot[(s, f"F{i}")] > slot[(s - 1, f"F{i}")]
                if s < p - 1:
                    assert slot[(s, f"B{i}")] > slot[(s + 1, f"B{i}")]
                assert slot[(s, f"B{i}")] > slot[(s, f"F{i}")]
    readable(fig)


@pytest.mark.parametrize("dp, tp_size", [(2, 2), (1, 5), (2, 3)])
def test_two_d_mesh_marks_the_collective_on_each_axis(dp, tp_size):
    fig = two_d.plot_mesh(dp, tp_size, "t")
    gid = by_gid(fig)
    assert sorted(k for k in gid if k.startswith("tp:")) == sorted(
        f"tp:{r}:{c}" for r in range(dp) for c in range(tp_size - 1))
    assert sorted(k for k in gid if k.startswith("dp:")) == sorted(
        f"dp:{c}:{r}" for c in range(tp_size) for r in range(dp - 1))
    for r in range(dp * tp_size):
        assert same_colour(gid[f"mesh:rank:{r}"].get_edgecolor(), rank_colour(r))
    texts = "\n".join(t.get_text() for t in fig.axes[0].texts)
    assert "g's all_reduce" in texts and "all_reduce of each gradient shard" in texts
    readable(fig)


def legend_off_the_axes(fig, ax) -> None:
    FigureCanvasAgg(fig).draw()
    legend = ax.get_legend() or fig.legends[0]
    assert not legend.get_window_extent().overlaps(ax.get_window_extent())


def test_loss_plot_counts_steps_and_keeps_its_legend_off_the_lines():
    fig = data_parallel.plot_losses([[0.5, 0.4, 0.3], [0.7, 0.6, 0.5]], [0.6, 0.5, 0.4])
    (ax,) = fig.axes
    assert list(ax.get_xticks()) == [1, 2, 3]
    legend_off_the_axes(fig, ax)


def test_timeline_gives_each_bucket_its_own_lane():
    timeline = {"forward": (0.0, 0.001), "backward": (0.001, 0.004), "wait": (0.004, 0.02),
                "step": (0.02, 0.021), "buckets": [(0.002 + i * 1e-4, 0.01 + i * 1e-3)
                                                   for i in range(9)]}
    fig = data_parallel.plot_timeline([timeline, timeline], "t")
    (ax,) = fig.axes
    for rank in range(2):
        lanes = []
        for i in range(9):
            (bar,) = [c for c in ax.collections if c.get_gid() == f"bucket:{rank}:{i}"]
            y0, y1 = bar.get_paths()[0].get_extents().intervaly
            lanes.append((y0, y1))
        assert all(b[0] >= a[1] for a, b in zip(lanes, lanes[1:]))   # no two share a lane
    assert ax.get_legend() is None and fig.legends
    legend_off_the_axes(fig, ax)


def test_zero_bar_plots_keep_their_legends_below_the_bars():
    measured = [{s: 1000.0 * (i + 1) for i, s in enumerate(zero.STAGES)}] * 2
    model = {s: 800.0 for s in zero.STAGES}
    fig = zero.plot_comm(measured, model, model)
    legend_off_the_axes(fig, fig.axes[0])
    parts = dict.fromkeys(("parameters", "gradients", "optimizer state", "peak gathered"), 10.0)
    fig = zero.plot_memory([{s: parts for s in zero.STAGES}] * 2,
                           {s: dict(list(parts.items())[:3]) for s in zero.STAGES})
    legend_off_the_axes(fig, fig.axes[0])
    assert fig.get_figwidth() <= 8
