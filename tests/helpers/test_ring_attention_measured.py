"""Notebook 21's measured figures hold the numbers they are given (read back by gid and
text), read at the page's size (the figure audit), and refuse work of the wrong shape."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import pytest  # noqa: E402

from helpers.figures.audit import audit  # noqa: E402
from helpers.training.schemes import rank_colour  # noqa: E402
from helpers.transformer import ring_attention_figures as figs  # noqa: E402
from helpers.transformer import ring_attention_measured as measured  # noqa: E402


def _patches(fig) -> dict:
    return {p.get_gid(): p for ax in fig.axes for p in ax.patches if p.get_gid()}


def _texts(fig) -> dict:
    return {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid()}


@pytest.mark.parametrize("n", [2, 4])
def test_steps_draw_each_block_and_count(n):
    owners = [[(r - s) % n for s in range(n)] for r in range(n)]
    causal = [[27] + [36 if 0 < s <= r else 0 for s in range(1, n)] for r in range(n)]
    fig = measured.plot_steps(owners, {"full": [[36] * n] * n, "causal": causal}, "t")
    cells, texts = _patches(fig), _texts(fig)
    for r in range(n):
        assert texts[f"total:causal:{r}"] == f"= {sum(causal[r])}"
        assert texts[f"total:full:{r}"] == f"= {36 * n}"
        for s in range(n):
            face = mcolors.to_hex(cells[f"step:causal:{r}:{s}"].get_facecolor())
            held = rank_colour(owners[r][s], True)
            assert face == (held if causal[r][s] else measured.SKIPPED)
    labels = sorted(t.get_text() for ax in fig.axes for t in ax.texts if not t.get_gid())
    assert "KV1: skip" in labels and f"KV{n - 1}: 36" in labels
    assert not audit(fig).problems()
    with pytest.raises(ValueError, match="one row per rank"):
        measured.plot_steps(owners, {"full": [[36] * (n + 1)] * n}, "t")


def test_bytes_stack_the_headers_on_the_model():
    traffic = [{"ring_bytes": {"model": 100.0, "measured": 130},
                "torch_bytes": {"measured": 150}, "torch_model": 100.0 + r} for r in range(3)]
    fig = measured.plot_bytes(traffic, "t")
    bars = _patches(fig)
    for r in range(3):
        assert bars[f"model:ring:{r}"].get_height() == 100
        assert bars[f"extra:ring:{r}"].get_height() == 30
        assert bars[f"model:context_parallel:{r}"].get_height() == 100 + r
        assert bars[f"extra:context_parallel:{r}"].get_height() == pytest.approx(50 - r)
    assert not audit(fig).problems()
    nccl = [{"ring_bytes": {"model": 100.0, "measured": None},
             "torch_bytes": {"measured": None}, "torch_model": 100.0}]
    assert "extra:ring:0" not in _patches(measured.plot_bytes(nccl, "t"))


def test_pitfalls_mark_each_rank():
    gaps = {"no rescale": [0.1, 0.2], "local": [1.0, 0.7]}
    fig = measured.plot_pitfalls(gaps, {"right": [27, 63], "local": [108, 108]}, 1e-12, "t")
    points = {ln.get_gid(): ln.get_ydata()[0] for ax in fig.axes for ln in ax.lines
              if ln.get_gid()}
    assert points == {f"gap:{name}:{r}": v[r] for name, v in gaps.items() for r in range(2)}
    bars = _patches(fig)
    assert [bars[f"scores:local:{r}"].get_height() for r in range(2)] == [108, 108]
    assert bars["scores:right:1"].get_height() == 63
    assert not audit(fig).problems()


def test_work_and_timelines_carry_the_spread_and_the_waits():
    load = [{layout: {"blocks": 1, "scores": 10 * (r + 1), "compute_ms": 2.0 + r}
             for layout in ("contiguous", "zigzag")} for r in range(2)]
    fig = figs.plot_work(load, "t")
    assert fig.axes[0].get_title(loc="left").endswith("contiguous 2.00×, zig-zag 2.00×")
    assert fig.axes[1].get_title(loc="left").endswith("contiguous 1.50×, zig-zag 1.50×")
    events = [[("compute", 0, 0.0, 0.001), ("wait", 0, 0.001, 0.0025 + r / 1000),
               ("compute", 1, 0.0025 + r / 1000, 0.004)] for r in range(2)]
    fig = figs.plot_timelines({"a": events, "b": events[:1] * 2}, "t")
    texts = {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts}
    assert texts == {"a:0:waited": "waited 1.5 ms", "a:1:waited": "waited 2.5 ms",
                     "b:0:waited": "waited 1.5 ms", "b:1:waited": "waited 1.5 ms"}
    assert fig.axes[0].get_title(loc="left") == "a: the whole loop 4.0 ms"


def test_softmax_draws_each_rank_and_the_exact_values():
    traces = [[(0.1, 2.0), (0.5, 3.0)], [(0.2, 1.0), (0.2, 4.0)]]
    fig = measured.plot_softmax(traces, [(0.5, 3.0), (0.2, 4.0)], "t")
    lines = {ln.get_gid(): list(ln.get_ydata()) for ax in fig.axes for ln in ax.lines}
    assert lines["running max m:0"] == [0.1, 0.5] and lines["running sum ℓ:1"] == [1.0, 4.0]
    assert lines["exact running sum ℓ:0"] == [3.0]
    assert not audit(fig).problems()


@pytest.mark.parametrize("n", [2, 4])
def test_tokens_errors_and_memory(n):
    from helpers.transformer import context_parallel_figures as held
    from helpers.transformer.ring_attention import token_positions

    positions = {layout: [token_positions(r, n, layout) for r in range(n)]
                 for layout in ("contiguous", "zigzag")}
    fig = held.plot_tokens(positions, 24, "t")
    filled = {g for g in _patches(fig)}
    assert filled == {f"token:{layout}:{r}:{t}" for layout, per in positions.items()
                      for r, mine in enumerate(per) for t in mine}
    assert not audit(fig).problems()
    errors = [{"default": "NotImplementedError: no strategy", "MATH": None} for _ in range(n)]
    fig = held.plot_errors(errors, "t")
    cells = _patches(fig)
    assert mcolors.to_hex(cells["error:0:default"].get_facecolor()) == held.ERROR
    assert mcolors.to_hex(cells[f"error:{n - 1}:MATH"].get_facecolor()) == rank_colour(n - 1,
                                                                                       True)
    words = {t.get_text() for t in fig.axes[0].texts}
    assert words == {"NotImplementedError", "ran"}
    assert not audit(fig).problems()
    fig = held.plot_memory(36864, [2, 3, 4, 6, 12], n, "t")
    bars = _patches(fig)
    assert [bars[f"ring:{m}"].get_height() for m in (2, 4, 12)] == [36.0, 18.0, 6.0]
    assert {bars[f"gathered:{m}"].get_height() for m in (2, 3, 4, 6, 12)} == {36.0}
    assert bars[f"ring:{n}"].get_linewidth() > bars["ring:3"].get_linewidth()
    assert not audit(fig).problems()
