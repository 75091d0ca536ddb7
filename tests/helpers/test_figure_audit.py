"""helpers.figures.audit: the smallest text as displayed at 1280 px, labels out of their
shapes, legends over data; on synthetic figures that break one rule each, and on the
series' figures (small inputs, 2 and 4 ranks) that issue 50 found unreadable."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
from matplotlib.patches import Circle, Rectangle

from helpers.figures.audit import COLUMN_PX, MIN_TEXT_PX, audit, png_width


def _figure(width_in: float = 4.0, height_in: float = 3.0):
    fig, ax = plt.subplots(figsize=(width_in, height_in), dpi=100)
    plt.close(fig)
    return fig, ax


def assert_reads(fig) -> None:
    problems = audit(fig).problems()
    assert not problems, problems


def test_a_6_pt_label_on_a_wide_figure_is_too_small_and_its_size_is_the_displayed_one():
    fig, ax = _figure(16, 3)
    ax.plot([0, 1], [0, 1])
    ax.text(0.5, 0.5, "tiny", fontsize=6)
    result = audit(fig)
    assert result.png_width_px > COLUMN_PX            # shown scaled down
    assert result.scale == pytest.approx(COLUMN_PX / result.png_width_px)
    assert result.min_text_px == pytest.approx(6 * 100 / 72 * result.scale)
    assert result.smallest_text == "tiny"
    assert any("smallest text" in p for p in result.problems())


def test_the_same_label_on_a_narrow_figure_reads():
    fig, ax = _figure(4, 3)
    ax.plot([0, 1], [0, 1])
    ax.text(0.5, 0.5, "readable", fontsize=7)
    result = audit(fig)
    assert result.scale == 1.0 and result.min_text_px == pytest.approx(7 * 100 / 72)
    assert result.min_text_px >= MIN_TEXT_PX and not result.problems()


def test_the_png_width_is_the_one_the_inline_backend_prints():
    from IPython.core.pylabtools import print_figure

    fig, ax = _figure(5, 2)
    ax.plot([0, 1])
    png = print_figure(fig, "png", bbox_inches="tight")
    assert audit(fig).png_width_px == png_width(png)
    assert png_width(print_figure(fig, "png", bbox_inches="tight", base64=True)) == png_width(png)


def test_a_label_spilling_out_of_its_circle_fails_and_one_inside_its_shapes_passes():
    fig, ax = _figure()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    ax.add_patch(Circle((3, 3), 0.5))
    ax.text(3, 3, "a long label spills", ha="center", va="center")
    ax.add_patch(Rectangle((5, 5), 4, 2, facecolor="#fdd0a2"))
    ax.text(7, 6, "fits", ha="center", va="center")
    assert audit(fig).spills == ["'a long label spills' leaves its Circle"]


def test_a_label_beside_a_shape_is_not_on_it():
    fig, ax = _figure()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    ax.add_patch(Circle((3, 3), 0.5))
    ax.text(4, 3, "a label beside the circle", va="center")
    assert not audit(fig).spills


@pytest.mark.parametrize("kind", ["line", "bars", "points", "image"])
def test_a_legend_over_data_fails_and_outside_the_axes_passes(kind):
    for outside in (False, True):
        fig, ax = _figure()
        if kind == "line":
            ax.plot([0, 1, 2], [0, 5, 0], label="data")
        elif kind == "bars":
            ax.bar(range(5), [5] * 5, label="data")
        elif kind == "points":
            ax.scatter([1, 2, 3], [3, 2, 1], label="data")
        else:
            ax.imshow([[1, 2], [3, 4]])
            ax.plot([0], [0], label="data")
        where = ({"loc": "upper left", "bbox_to_anchor": (1.01, 1)} if outside
                 else {"loc": "center"} if kind in ("points", "image") else
                 {"loc": "upper center" if kind == "line" else "upper left"})
        ax.legend(**where)
        assert bool(audit(fig).legend_over_data) is not outside, (kind, outside)


def test_a_legend_in_an_empty_corner_passes():
    fig, ax = _figure()
    ax.plot([0, 1, 2], [5, 0, 5], label="data")      # a V: its lower corners are empty
    ax.legend(loc="lower right")
    assert not audit(fig).legend_over_data


# --- the series' figures, at 2 and 4 ranks ---------------------------------------------

RANKS = [2, 4]


@pytest.mark.parametrize("p", RANKS)
def test_notebook_24_plans_read(p):
    from helpers.fitting.schedules_figures import draw_plans

    fig = draw_plans(p, 2 * p)
    assert_reads(fig)
    labels = [t.get_gid() for ax in fig.axes for t in ax.texts if t.get_gid()]
    assert f"slot:{p + p - 1}.{2 * p - 1}" in labels       # interleaved: the last chunk's


def _bubble_rows() -> list[dict]:
    return [{"schedule": name, "m": m, "measured": 0.1 * k + 0.05, "key": key,
             "v": 2 if key == "interleaved" else 1}
            for k, (name, key) in enumerate((("1F1B", "1F1B"), ("interleaved", "interleaved"),
                                             ("ZB-H1", "ZB-H1"))) for m in (4, 8, 16)]


@pytest.mark.parametrize("panels", [1, 2])
def test_notebook_24_bubbles_read(panels):
    from helpers.fitting.schedules_figures import plot_bubbles

    tables = {f"panel {k}": _bubble_rows() for k in range(panels)}
    assert_reads(plot_bubbles(tables, 4, "the bubble over m"))


@pytest.mark.parametrize("n", RANKS)
def test_notebook_24_timelines_read(n):
    from helpers.fitting.schedules_figures import plot_timelines

    events = [[("F", 0, 0.001 * k, 0.001 * k + 0.0008) for k in range(6)]
              + [("B", 0, 0.007, 0.009), ("wait", 0, 0.009, 0.010)] for _ in range(n)]
    assert_reads(plot_timelines({"1F1B": events, "ZB-H1": events}, "measured"))


@pytest.mark.parametrize("n", RANKS)
def test_notebook_21_ring_labels_stay_in_their_circles(n):
    from helpers.transformer.ring_attention_figures import draw_ring_attention

    assert_reads(draw_ring_attention(n))


@pytest.mark.parametrize("n", RANKS)
def test_notebook_20_activation_memory_reads(n):
    from helpers.transformer.sequence_parallel_figures import plot_activation_bytes

    tables = [{scheme: {"layernorm": 2048 * (r + 1), "tensor-parallel": 8192 // (k + 1),
                        "total": 0}
               for k, scheme in enumerate(("one process", "TP", "TP + SP"))}
              for r in range(n)]
    assert_reads(plot_activation_bytes(tables))


@pytest.mark.parametrize("collective", ["all_reduce", "scatter", "reduce",
                                        "all_to_all_single"])
@pytest.mark.parametrize("n", RANKS)
def test_records_read_with_their_diagram_and_caption(collective, n, monkeypatch):
    from helpers.figures.diagrams import load_diagram
    from helpers.figures.plots import plot_record
    from test_plots import model_record

    monkeypatch.setenv("TUTORIAL_OFFLINE", "1")
    diagram = load_diagram(collective.removesuffix("_single"))
    assert_reads(plot_record(model_record(collective, n), diagram))
