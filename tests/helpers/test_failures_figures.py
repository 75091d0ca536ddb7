"""helpers.scale.failures_figures (notebook 26): each figure holds the numbers it was given
and reads at 1280 px (helpers.figures.audit), at 2 and 4 ranks, no engines."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
from test_figure_audit import assert_reads

from helpers.scale import failures_figures as ff

RANKS = [2, 4]
RESET = ("[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
         "[127.0.0.1]:12677: Connection reset by peer. This is typically caused by a remote "
         "worker hanging")


def test_short_error_keeps_what_gloo_says():
    assert ff.short_error(RESET) == "Connection reset by peer"
    assert ff.short_error("[unbound_buffer.cc:129] Timed out waiting 5000ms") == \
        "Timed out waiting 5000ms"
    assert ff.short_error("[pair.cc:589] Connection closed by peer [127.0.0.1]:14729") == \
        "Connection closed by peer"
    assert ff.short_error(None) == "no error"


@pytest.mark.parametrize("n", RANKS)
def test_checkpoint_files_bars_are_the_files_and_the_tensors(n):
    files = [{"name": ".metadata", "bytes": 12288}] + [
        {"name": f"__{r}_0.distcp", "bytes": 22000 + 1000 * r} for r in range(n)]
    tensors = [4032 - 400 * (r == n - 1) for r in range(n)]
    fig = ff.plot_checkpoint_files(files, tensors)
    assert_reads(fig)
    ax = fig.axes[0]
    widths = [p.get_width() for p in ax.patches]
    expected = [12288] + [w for r in range(n) for w in (22000 + 1000 * r, tensors[r])]
    assert widths == expected
    assert f"{(22000 + 1000 * (n - 1)) / tensors[-1]:.1f} ×" in ax.texts[-1].get_text()


@pytest.mark.parametrize("n", RANKS)
def test_crash_one_row_per_rank_the_dead_one_said(n):
    survivors = [{"rank": r, "failed_after": 0.04 if r % 2 == 0 else 5.05,
                  "failure": RESET if r % 2 == 0 else "[x.cc:1] Timed out waiting 5000ms"}
                 for r in range(n - 1)]
    fig = ff.plot_crash(survivors, n, 5.0, 5)
    assert_reads(fig)
    ax = fig.axes[0]
    assert [p.get_width() for p in ax.patches] == [s["failed_after"] for s in survivors]
    texts = [t.get_text() for t in ax.texts]
    assert any("ended its process" in t for t in texts)
    assert texts[0] == "0.04 s · Connection reset by peer"
    assert ax.lines[0].get_xdata()[0] == 5.0                      # the timeout


def test_torchrun_a_row_per_attempt_and_rank_a_box_per_finished_step():
    events = ([{"attempt": 0, "rank": r, "pid": 11 + r, "starts_at": 0} for r in (1, 0)]
              + [{"attempt": 0, "rank": r, "step": s, "loss": 0.1 * s} for s in range(5)
                 for r in (0, 1)]
              + [{"attempt": 0, "rank": 0, "step": 5, "seconds": 0.03, "error": RESET}]
              + [{"attempt": 1, "rank": r, "pid": 21 + r, "starts_at": 3} for r in (0, 1)]
              + [{"attempt": 1, "rank": r, "step": s, "loss": 0.1 * s} for s in range(3, 8)
                 for r in (1, 0)])
    fig = ff.plot_torchrun(events, 3, 5, 8)
    assert_reads(fig)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "attempt 0 · rank 0 · pid 11", "attempt 0 · rank 1 · pid 12",
        "attempt 1 · rank 0 · pid 21", "attempt 1 · rank 1 · pid 22"]
    rows = [[round(p.get_x() - 0.05) for p in ax.patches if round(p.get_y() + 0.32) == i]
            for i in range(4)]
    assert rows == [[0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4], [3, 4, 5, 6, 7], [3, 4, 5, 6, 7]]
    texts = [t.get_text() for t in ax.texts]
    assert "0.7000" in texts and " read:\n Connection reset by peer" in texts
    assert texts.count("no line after this step") == 1          # rank 1 of attempt 0
