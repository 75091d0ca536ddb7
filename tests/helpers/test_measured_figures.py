"""helpers.fitting.measured_figures (notebook 23): each figure holds the numbers it was
given and reads at 1280 px (helpers.figures.audit), at 2 and 4 ranks, no engines."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from types import SimpleNamespace

import pytest
from test_figure_audit import assert_reads

from helpers.fitting import measured_figures as mf

RANKS = [2, 4]
HOOKS = ["float64 (DDP's own)", "fp16_compress_hook", "powerSGD_hook rank 1",
         "powerSGD_hook rank 4"]


@pytest.mark.parametrize("n", RANKS)
def test_scaled_grads_one_panel_per_rank_with_its_points(n):
    reference = [0.1 * i - 0.3 for i in range(7)]
    grads = [[4 * g + 0.001 * r for g in reference] for r in range(n)]
    fig = mf.plot_scaled_grads(grads, reference, 4)
    assert_reads(fig)
    assert len(fig.axes) == n
    for r, ax in enumerate(fig.axes):
        points = ax.collections[0].get_offsets()
        assert list(points[:, 0]) == pytest.approx(reference)
        assert list(points[:, 1]) == pytest.approx(grads[r])
        assert ax.get_title() == f"rank {r}"
        assert ax.lines[1].get_ydata()[1] == pytest.approx(4 * ax.lines[0].get_ydata()[1])


@pytest.mark.parametrize("n", RANKS)
def test_outcomes_one_bar_per_rank_as_long_as_its_case(n):
    outcomes = [SimpleNamespace(rank=0, error=None, returncode=0, seconds=4.25, result=[1.0])]
    outcomes += [SimpleNamespace(rank=r, returncode=0, seconds=7.0 + r, result=None,
                                 error="RuntimeError: [unbound_buffer.cc:78] Timed out "
                                       "waiting 3000ms for recv operation to complete")
                 for r in range(1, n)]
    rows = mf.outcome_rows(outcomes)
    assert rows[0]["what"] == "returned its gradient"
    assert rows[-1]["what"] == ("raised: RuntimeError: Timed out waiting 3000ms for recv "
                                "operation to complete")
    fig = mf.plot_outcomes(rows, "a title")
    assert_reads(fig)
    ax = fig.axes[0]
    assert [p.get_width() for p in ax.patches] == pytest.approx([o.seconds for o in outcomes])
    texts = [t.get_text() for t in ax.texts]
    assert texts[0] == "4.2 s · returned its gradient" and "Timed out" in texts[-1]


@pytest.mark.parametrize("n", RANKS)
def test_hook_bytes_bars_are_what_each_rank_measured(n):
    tables = [[{"hook": h, "measured": 1000 * (k + 1) * (10 - k) + r, "model": 900 * (k + 1)}
               for k, h in enumerate(HOOKS)] for r in range(n)]
    fig = mf.plot_hook_bytes(tables, HOOKS[0], "gloo · bytes")
    assert_reads(fig)
    ax = fig.axes[0]
    widths = [p.get_width() * 1e3 for p in ax.patches]
    assert widths == pytest.approx([row["measured"] for rows in tables for row in rows])
    shares = [t.get_text() for t in ax.texts]
    base = tables[0][0]["measured"]
    assert shares == [f"× {row['measured'] / base:.3f}" for row in tables[0]]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[2] == "powerSGD_hook, PowerSGD rank 1"       # not a process rank


def test_call_sizes_one_segment_per_call_and_a_note_for_ddps_own():
    sizes = {HOOKS[0]: [], HOOKS[1]: [37920], HOOKS[2]: [4224, 2688, 2688],
             HOOKS[3]: [4224, 10752, 10752]}
    fig = mf.plot_call_sizes(sizes, "S of each call")
    assert_reads(fig)
    ax = fig.axes[0]
    assert [p.get_width() for p in ax.patches] == [s for calls in sizes.values() for s in calls]
    lefts = [p.get_x() for p in ax.patches][-3:]
    assert lefts == [0, 4224, 4224 + 10752]                   # end to end
    texts = [t.get_text() for t in ax.texts]
    assert "no call counted" in texts[0] and "10,752" in texts and "37,920" in texts


@pytest.mark.parametrize("n", RANKS)
def test_bytes_of_a_step_bars_per_rank_and_the_calls_counted_under_each(n):
    from helpers.fitting.accumulation import ring_all_reduce
    from helpers.fitting.accumulation_figures import plot_bytes

    rows = [[{"what": "by hand: one all_reduce", "calls": 1, "calls_made": 1, "size": 1696,
              "measured": 4288 + r},
             {"what": "DDP + no_sync()", "calls": 0, "calls_made": 1, "size": 1696,
              "measured": 4256 + r},
             {"what": "DDP, no_sync forgotten", "calls": 4, "calls_made": 4, "size": 1696,
              "measured": 17152 + r}] for r in range(n)]
    fig = plot_bytes(rows, n)
    assert_reads(fig)
    ax = fig.axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == [row["measured"] for rank_rows in rows for row in rank_rows]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["by hand: one all_reduce\n1 call counted",
                      "DDP + no_sync()\n0 calls counted", "DDP, no_sync forgotten\n4 calls counted"]
    models = [line.get_segments()[0][0][1] for line in ax.collections]
    assert models == pytest.approx([ring_all_reduce(1696, n)] * 2 + [4 * ring_all_reduce(1696, n)])
