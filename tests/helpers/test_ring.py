"""helpers.collectives.ring (notebook 10) without engines: the schedule, the model of every
step, the per-step check and the figure."""
from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from helpers.collectives import ring
from notebook_runner import printed

report_ring = printed(ring.report_ring)


@pytest.mark.parametrize("n", range(1, 9))
def test_schedule_matches_neighbours(n):
    steps = ring.schedule(n)
    assert len(steps) == 2 * (n - 1) + 1 and steps[0].phase == "start"
    assert [s.phase for s in steps[1:]] == ["reduce-scatter"] * (n - 1) + ["all-gather"] * (n - 1)
    for step in steps[1:]:
        for r in range(n):  # what rank r receives is what its left neighbour sends
            assert step.recv[r] == step.send[(r - 1) % n]
            assert step.send[r] != step.recv[r] or n == 1
    # reduce-scatter: every rank sends every chunk but one (the one it finishes)
    for r in range(n):
        assert sorted(s.send[r] for s in steps[1:n]) == sorted(set(range(n)) - {r})
        assert steps[n].send[r] == r if n > 1 else True  # all-gather starts with its own


@pytest.mark.parametrize("n", range(2, 9))
def test_model_of_every_step(n):
    rng = np.random.default_rng(n)
    L = 2
    data = rng.integers(-50, 50, (n, n * L)).astype(float)
    trace = ring.ring_model(data)
    assert trace.values.shape == (2 * n - 1, n, n, L) and trace.counts.shape == (2 * n - 1, n, n)
    chunks = data.reshape(n, n, L)
    total = chunks.sum(axis=0)
    np.testing.assert_array_equal(trace.values[0], chunks)
    for i in range(2 * n - 1):
        for r in range(n):
            for c in range(n):
                k = trace.counts[i, r, c]
                assert 1 <= k <= n
                if i < n:  # reduce-scatter: a sum over the k ranks r, r-1, ..., r-k+1
                    arc = sum(chunks[(r - j) % n, c] for j in range(k))
                    np.testing.assert_array_equal(trace.values[i, r, c], arc)
                elif k == n:
                    np.testing.assert_array_equal(trace.values[i, r, c], total[c])
                else:  # not reached yet: still the partial sum phase 1 left there
                    np.testing.assert_array_equal(trace.values[i, r, c], trace.values[n - 1, r, c])
        if i:  # one chunk per rank changes per step: the one it received
            changed = trace.counts[i] != trace.counts[i - 1]
            assert changed.sum(axis=1).tolist() == [1] * n
            assert [int(np.argmax(changed[r])) for r in range(n)] == list(trace.steps[i].recv)
    after_rs = trace.counts[n - 1]
    assert [after_rs[r, r] for r in range(n)] == [n] * n  # rank r finished chunk r
    assert (after_rs.sum(axis=1) == sum(range(1, n + 1))).all()
    assert (trace.counts[-1] == n).all()
    np.testing.assert_array_equal(trace.tensors()[-1], np.tile(total.reshape(-1), (n, 1)))


def test_example_data_and_rows():
    assert ring.example_data(3).tolist() == [[1, 2, 3], [11, 12, 13], [21, 22, 23]]
    assert ring.example_data(2, 2).tolist() == [[1, 1, 2, 2], [11, 11, 12, 12]]
    assert ring.phase_rows(4) == slice(0, 7)
    assert ring.phase_rows(4, "reduce-scatter") == slice(0, 4)
    assert ring.phase_rows(4, "all-gather") == slice(3, 7)
    with pytest.raises(ValueError, match="phase must be"):
        ring.phase_rows(4, "broadcast")
    with pytest.raises(ValueError, match="world_size · chunk_len"):
        ring.ring_model(np.zeros((3, 4)))
    assert "reduce-scatter 1/2" in ring.schedule_table(3)


def test_report_ring_grades_each_rank_and_step(capsys):
    n = 4
    trace = ring.ring_model(ring.example_data(n))
    good = trace.tensors()
    assert report_ring(good, trace) == [True] * n
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["start", "RS", "1", "RS", "2", "RS", "3", "AG", "1", "AG", "2", "AG", "3"]
    assert out[1].split() == ["rank", "0"] + ["✓"] * 8
    columns = [m.end() for m in re.finditer(r"start|RS \d|AG \d", out[0])]
    for line in out[1:]:                                  # each step's ✓ under its name
        assert [m.end() for m in re.finditer("✓", line)][1:] == columns
    bad = good.copy()
    bad[5, 2, 1] = 7.0  # rank 2, after all-gather step 2
    assert report_ring(bad, trace) == [True, True, False, True]
    out = capsys.readouterr().out
    assert "rank 2 ✗" in out and "first wrong after all-gather 2/3: chunk 1 = 7 (model: 68)" in out
    # one phase: its starting state and its n - 1 steps
    assert report_ring(bad[n - 1:], trace, phase="all-gather") == [True, True, False, True]
    assert report_ring(good[:n], trace, phase="reduce-scatter") == [True] * n
    capsys.readouterr()
    # a phase that kept too few states (the student stub): ✗ for every rank, and why
    assert report_ring(good[n - 1:n], trace, phase="all-gather") == [False] * n
    assert "the all-gather phase has 4 states" in capsys.readouterr().out
    with pytest.raises(ValueError, match="measured states must be"):
        report_ring(good[:, :2], trace)


def _cells(fig):
    return {p.get_gid(): p for ax in fig.axes for p in ax.patches if p.get_gid()}


@pytest.mark.parametrize("n", range(2, 9))
def test_plot_ring_is_one_row_per_step_and_one_column_per_rank(n):
    trace = ring.ring_model(ring.example_data(n))
    fig = ring.plot_ring(trace)
    gids = sorted(ax.get_gid() for ax in fig.axes)
    assert gids == sorted(f"step{i}:rank{r}" for i in range(2 * n - 1) for r in range(n))
    assert fig.get_figwidth() <= 13.5
    cells = _cells(fig)
    assert len(cells) == (2 * n - 1) * n * n
    final = trace.tensors()[-1]
    for r in range(n):
        for c in range(n):
            assert f"step{2 * n - 2}:rank{r}:chunk{c}={int(final[r, c])}" in cells
            assert cells[f"step{2 * n - 2}:rank{r}:chunk{c}={int(final[r, c])}"].get_facecolor()[:3] \
                == matplotlib.colors.to_rgb(ring.FULL_FACE)
    phase = ring.plot_ring(trace, phase="all-gather")
    assert len(phase.axes) == n * n


def test_plot_ring_flags_values_that_differ_from_the_model():
    trace = ring.ring_model(ring.example_data(3, 2))
    measured = trace.tensors().copy()
    measured[2, 1, 0:2] = [5.0, 6.0]   # rank 1, chunk 0, after reduce-scatter step 2
    cells = _cells(ring.plot_ring(trace, measured))
    wrong = cells["step2:rank1:chunk0=5…"]
    assert wrong.get_edgecolor()[:3] == matplotlib.colors.to_rgb(ring.WRONG_EDGE)
    others = [p for g, p in cells.items() if g != "step2:rank1:chunk0=5…"]
    assert all(p.get_edgecolor()[:3] != matplotlib.colors.to_rgb(ring.WRONG_EDGE) for p in others)
    # an unfinished exercise: the states kept so far, and a title that says so
    partial = ring.plot_ring(trace, measured[:3])
    assert len(partial.axes) == 3 * 3
    assert any("only the first 3 of 5 states were kept" in t.get_text() for t in partial.texts)
    with pytest.raises(ValueError, match="was every step of every phase kept"):
        ring.plot_ring(trace, measured[:, :, :4])


def test_chunk_colours():
    assert ring.chunk_face(1, 4) == ring.OWN_FACE and ring.chunk_face(4, 4) == ring.FULL_FACE
    partial = [ring.chunk_face(k, 5) for k in (2, 3, 4)]
    assert len(set(partial)) == 3 and ring.OWN_FACE not in partial and ring.FULL_FACE not in partial
