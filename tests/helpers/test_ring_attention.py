"""helpers.transformer.ring_attention(_figures): the splits, the work model, the spans, the
references and the drawings, without engines."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from helpers.figures.animation import read_frame  # noqa: E402
from helpers.transformer import ring_attention as rat  # noqa: E402
from helpers.transformer import ring_attention_figures as figs  # noqa: E402


@pytest.mark.parametrize("n", [2, 3, 4])
def test_splits_cover_the_sequence_once(n):
    for layout in rat.LAYOUTS:
        every = [p for r in range(n) for p in rat.token_positions(r, n, layout)]
        assert sorted(every) == list(range(24)), layout
    size = 24 // (2 * n)
    assert rat.token_positions(0, n, "zigzag") == [*range(size),
                                                   *range(24 - size, 24)]
    assert rat.token_positions(n - 1, n, "contiguous") == list(range(24 - 24 // n, 24))


def test_bad_splits_are_refused_by_name():
    with pytest.raises(ValueError, match="does not split into 10 equal chunks"):
        rat.token_positions(0, 5, "zigzag")
    with pytest.raises(ValueError, match="not in a world of 2"):
        rat.token_positions(2, 2, "contiguous")
    with pytest.raises(ValueError, match="unknown layout"):
        rat.token_positions(0, 2, "striped")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_chunks_are_two_per_rank_even_when_neighbours(n):
    for layout in rat.LAYOUTS:
        for r in range(n):
            pieces = rat.chunks(r, n, layout)
            assert len(pieces) == 2
            size = 24 // (2 * n)
            assert [p[0] for p in pieces] == [slice(0, size), slice(size, 2 * size)]
            joined = [int(x) for _, pos in pieces for x in pos]
            assert joined == rat.token_positions(r, n, layout)
    # zig-zag's last rank holds chunks n − 1 and n: consecutive, still two chunks
    last = rat.chunks(n - 1, n, "zigzag")
    assert int(last[0][1][-1]) + 1 == int(last[1][1][0])


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_work_model(n):
    size = 24 // (2 * n)
    contiguous = rat.scores_needed(n, "contiguous", causal=True)
    zigzag = rat.scores_needed(n, "zigzag", causal=True)
    assert contiguous == [(3 + 4 * r) * size ** 2 for r in range(n)]
    assert zigzag == [(2 * n + 1) * size ** 2] * n             # balanced exactly
    assert sum(contiguous) == sum(zigzag)                     # the same work, spread
    assert rat.scores_needed(n, "zigzag", causal=False) == [24 * 24 // n] * n


def test_spans_record_in_order_and_refuse_unknown_kinds():
    spans = rat.Spans()
    spans.start()
    with spans.span("compute", 0):
        pass
    with spans.span("wait", 0):
        pass
    assert [e[:2] for e in spans.events] == [("compute", 0), ("wait", 0)]
    assert all(0 <= b <= e for _, _, b, e in spans.events)
    assert rat.total(spans.events, "compute") == spans.events[0][3] - spans.events[0][2]
    assert rat.total([("wait", 0, 0.5, 2.0), ("compute", 1, 0.0, 0.25),
                      ("wait", 1, 3.0, 3.5)], "wait") == 2.0
    with pytest.raises(ValueError, match="unknown span kind"):
        with spans.span("sleep", 1):
            pass


def test_reference_is_sdpa_and_owner_of_is_exact():
    q, k, v = rat.full_qkv()
    assert q.shape == (2, 12, 24, 4) and q.dtype == torch.float64
    for causal in (False, True):
        assert rat.max_diff(rat.full_attention(causal),
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal)) < 1e-15
    assert rat.owner_of(2.5, [1.0, 2.5, 3.0]) == 1
    with pytest.raises(ValueError, match="not exactly one"):
        rat.owner_of(1.0, [1.0, 1.0])
    assert rat.max_diff(torch.zeros(2), torch.zeros(3)) == float("inf")


@pytest.mark.parametrize("n", [2, 4])
def test_the_scheme_draws_every_chunk_pair(n):
    fig = figs.draw_ring_attention(n)
    gids = [p.get_gid() for ax in fig.axes for p in ax.patches if p.get_gid()]
    for layout in rat.LAYOUTS:
        cells = [g for g in gids if g.startswith(f"cell:{layout}:")]
        assert len(cells) == (2 * n) ** 2
    assert sum(g.startswith("pass:") for g in gids) == n
    skipped = [p for ax in fig.axes for p in ax.patches
               if (p.get_gid() or "").startswith("cell:zigzag:")
               and matplotlib.colors.to_hex(p.get_facecolor()) == figs.SKIPPED]
    assert len(skipped) == 2 * n * (2 * n - 1) // 2      # the strict upper triangle


def test_the_ring_animation_reads_back_the_record():
    held = [[(r - s) % 3 for s in range(3)] for r in range(3)]
    anim = figs.animate_kv_ring(held)
    assert anim.frame_count == 5
    assert read_frame(anim, 0)["held"] == ["KV0", "KV1", "KV2"]
    flight = read_frame(anim, 1)
    assert flight["held"] == ["", "", ""] and flight["moving"] == ["KV0", "KV1", "KV2"]
    assert read_frame(anim, 4)["held"] == ["KV1", "KV2", "KV0"]
    anim._draw_was_started = True       # read, not rendered by matplotlib: no warning
    with pytest.raises(ValueError, match="world_size lists"):
        figs.animate_kv_ring([[0, 1]])


def test_plots_carry_every_rank():
    load = [{layout: {"blocks": 1, "scores": 10 * (r + 1), "compute_ms": 1.0 + r}
             for layout in rat.LAYOUTS} for r in range(2)]
    fig = figs.plot_work(load, "t")
    gids = {p.get_gid() for ax in fig.axes for p in ax.patches}
    assert {f"scores:{layout}:{r}" for layout in rat.LAYOUTS for r in range(2)} <= gids
    events = [[("compute", 0, 0.0, 0.001), ("post", 0, 0.001, 0.0012),
               ("wait", 0, 0.0012, 0.002), ("compute", 1, 0.002, 0.003)]] * 2
    fig = figs.plot_timelines({"a": events, "b": events}, "t")
    gids = {p.get_gid() for ax in fig.axes for p in ax.patches}
    assert "a:1:wait:0" in gids and "b:0:post:0" in gids
    assert rat.work_table({"zigzag": [load[0]["zigzag"]]}).splitlines() == [
        "layout       rank  blocks merged  scores computed  compute (ms)",
        "zigzag          0              1               10          1.00"]
