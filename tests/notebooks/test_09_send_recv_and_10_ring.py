"""Notebooks 09 (send/recv) and 10 (ring all-reduce) executed at 2, 3 and 4 ranks on gloo,
and their helpers (helpers.collectives.p2p, helpers.collectives.ring) without engines."""
from __future__ import annotations

import json
import re
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from animation_checks import assert_one_animation_of, only_animation, ring_texts  # noqa: E402
from conftest import NOTEBOOKS  # noqa: E402
from helpers.collectives import p2p, ring  # noqa: E402
from helpers import checks  # noqa: E402
from helpers.checks import check  # noqa: E402
from helpers.bench.wire import agrees  # noqa: E402
from notebook_runner import (assert_records_match_model, execute, printed,  # noqa: E402
                             notebook_text, png_count)

report_ring = printed(ring.report_ring)
report_pairs = printed(p2p.report_pairs)


def check_prediction(*args, **kwargs) -> bool:
    """True when the prediction's report says every rank is right."""
    return bool(checks.check_prediction(*args, **kwargs))


PAIR_TIMEOUT_S = 3.0   # the deadlock demo's group timeout in notebook 09


def _duration(nb, marker: str) -> float:
    """How long the (only) code cell containing `marker` ran, from papermill's metadata."""
    cells = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    assert len(cells) == 1, marker
    return float(cells[0].metadata["papermill"]["duration"])


def _load(results, stem):
    records = json.loads((results / f"{stem}.json").read_text())
    return records if isinstance(records, list) else [records]


# ------------------------------------------------------------------ notebook 09

@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks, src, dst", [(2, 0, 1), (3, 2, 0), (4, 0, 1)])
def test_send_recv_notebook(n_ranks, src, dst, tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NOTEBOOKS / "09_send_recv.ipynb", tmp_path, n_ranks=n_ranks, src=src, dst=dst)

    records = _load(results, "09_send_recv")
    n = n_ranks
    expected_pairs = ([(src, dst), (dst, src)] + [(r, (r + 1) % n) for r in range(n)]
                      + [(0, 1), (1, 0)] * 3 + [(r, (r - 1) % n) for r in range(n)])
    assert [(r["params"]["src"], r["params"]["dst"]) for r in records] == expected_pairs
    assert_records_match_model(records, n)
    for record in records:
        assert record["collective"] == "send_recv"
        ends = (record["params"]["src"], record["params"]["dst"])
        for r in record["ranks"]:  # only the two ends of a transfer hold a tensor
            assert (r["before"]["tensor"] is None) == (r["rank"] not in ends)
    first = {r["rank"]: r for r in records[0]["ranks"]}
    assert first[dst]["after"]["tensor"] == [10.0 * src + 1, 10.0 * src + 2]
    # the step-through animation of the first transfer ends with what its ranks recorded
    assert_one_animation_of(nb, records[0], "tensor")

    text = notebook_text(nb)
    assert "✗" not in text
    for r in range(n):
        assert f"rank {r} ✓" in text, f"no ✓ line for rank {r}"
    for a, b in expected_pairs:
        assert f"{a} → {b} ✓" in text
    assert "All ranks right!" in text, "the exercise check did not pass"
    assert png_count(nb) >= 3  # diagram, the send/recv record, the ring shift

    # the deadlock: both ranks of the pair raise after the timeout, at both sizes, never earlier
    raised = re.findall(r"rank (\d): (\d+) element\(s\): send raised after ([\d.]+) s", text)
    assert sorted((int(r), int(k)) for r, k, _ in raised) == [(0, 1), (0, 1 << 20), (1, 1), (1, 1 << 20)]
    assert all(PAIR_TIMEOUT_S - 0.5 <= float(t) <= PAIR_TIMEOUT_S + 3 for _, _, t in raised), raised
    assert "went through" not in text
    for marker in ("both_send_first(1 << 20, pair)", "both_send_first(1, pair)"):
        assert _duration(nb, marker) < PAIR_TIMEOUT_S + 10
    # ... the timed-out group is broken, the default group and the cluster are not
    assert text.count("the timed-out group is unusable") == 2
    for r in range(n):
        assert f"rank {r}: all_reduce on the default group still works: {n} = world_size" in text
    assert text.count("elements swapped ✓") == 3 * 2 * 2  # 3 fixes, 2 sizes, ranks 0 and 1
    assert "received [4609434218613702656, 4612811918334230528]" in text  # float64 bits as int64


# ------------------------------------------------------------------ notebook 10

@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks, chunk_len", [(2, 3), (3, 1), (4, 2)])
def test_ring_all_reduce_notebook(n_ranks, chunk_len, tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NOTEBOOKS / "10_ring_all_reduce.ipynb", tmp_path, n_ranks=n_ranks,
                 chunk_len=chunk_len)

    n = n_ranks
    records = _load(results, "10_ring_all_reduce")
    assert [r["collective"] for r in records] == ["all_reduce", "all_reduce",
                                                  "reduce_scatter_single", "all_gather_single"]
    assert_records_match_model(records, n)
    data = ring.example_data(n, chunk_len)
    trace = ring.ring_model(data)
    ours = records[0]
    assert [r["before"]["tensor"] for r in ours["ranks"]] == data.tolist()
    assert [r["after"]["tensor"] for r in ours["ranks"]] == [data.sum(axis=0).tolist()] * n
    # every rank after every step, as measured on the ranks, is the model's state
    states = np.array(ours["ring_states"])
    assert states.shape == (2 * n - 1, n, n * chunk_len)
    np.testing.assert_allclose(states, trace.tensors())

    text = notebook_text(nb)
    assert "✗" not in text
    for r in range(n):
        assert f"rank {r} ✓" in text
        assert f"rank {r}: ring ✓ equals dist.all_reduce" in text
        assert (f"rank {r}: phase 1 ✓ = reduce_scatter_single, "
                "reduce_scatter + all_gather ✓ = all_reduce") in text
        factor = 2 * (n - 1) / n
        assert f"rank {r}: sent {2 * (n - 1) * chunk_len} of {n * chunk_len} elements = {factor:.3f}" in text
        # bytes on the wire: our ring (to r + 1) and the library's (to r - 1), measured
        size = n * 1024 * 1024
        model = 2 * (n - 1) / n * size
        wire = re.search(rf"rank {r} ✓  ours (\d+) B \((\d+) to rank {(r + 1) % n}\), library "
                         rf"(\d+) B \((\d+) to rank {(r - 1) % n}\), model {model:.0f} B; "
                         "results equal", text)
        assert wire, f"rank {r}: no bytes line"
        ours, ours_right, library, library_left = map(int, wire.groups())
        assert agrees(ours, model, 1, n) and agrees(library, model, 1, n), wire.group(0)
        assert ours_right >= model and library_left >= model
    # the step-by-step tables: one ✓ per step for every rank (phase 1, the exercise, the whole)
    for steps in (n, n, 2 * n - 1):
        line = re.compile(r"rank \d ✓" + r"\s+✓" * steps + r"\s*$", re.M)
        assert len(line.findall(text)) >= n
    assert png_count(nb) >= 3  # diagram, ring figure, all_reduce record
    # the animation: one frame per step and state in flight, ending with the measured states
    anim = only_animation(nb, "ranks")
    assert anim["frames"] == 1 + 2 * 2 * (n - 1)
    assert anim["last"]["ranks"] == ring_texts(states[-1], n)


# ------------------------------------------------------------------ helpers.collectives.ring

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


# ------------------------------------------------------------------ helpers.collectives.p2p

def _tensor(values):
    return {"values": values, "dtype": "float32", "device": "cpu"}


class FakeCluster:
    """What the p2p helpers use of a TutorialCluster: gather, ranks, backend, world size."""

    backend = "gloo"

    def __init__(self, states):
        self.states = states
        self.world_size = len(states)
        self.ranks = [SimpleNamespace(rank=r, device="cpu") for r in range(self.world_size)]

    def pull(self, *names):
        return [{"rank": r, **{n: s[n] for n in names}} for r, s in enumerate(self.states)]


def _shift_states(n, shift, wrong_rank=None):
    states = []
    for r in range(n):
        src = (r - shift) % n
        inbox = [10.0 * src + 1, 10.0 * src + 2]
        if r == wrong_rank:
            inbox = [0.0, 0.0]
        out = [10.0 * r + 1, 10.0 * r + 2]
        states.append({"before": {"outbox": _tensor(out), "inbox": _tensor([0.0, 0.0])},
                       "after": {"outbox": _tensor(out), "inbox": _tensor(inbox)}})
    return states


def test_shift_records_report_and_prediction(capsys):
    cluster = FakeCluster(_shift_states(3, -1))
    records = p2p.shift_records(cluster, shift=-1)
    assert [(r["params"]["src"], r["params"]["dst"]) for r in records] == [(0, 2), (1, 0), (2, 1)]
    first = records[0]
    assert first["collective"] == "send_recv" and first["dtype"] == "float32"
    assert [r["before"]["tensor"] for r in first["ranks"]] == [[1.0, 2.0], None, [0.0, 0.0]]
    assert [r["after"]["tensor"] for r in first["ranks"]] == [[1.0, 2.0], None, [1.0, 2.0]]
    assert report_pairs(records) == [True] * 3
    assert capsys.readouterr().out.splitlines() == [
        "0 → 2 ✓  rank 2 received [1.0, 2.0]", "1 → 0 ✓  rank 0 received [11.0, 12.0]",
        "2 → 1 ✓  rank 1 received [21.0, 22.0]"]
    got = p2p.received_by_rank(records, 3)
    assert got == [{"tensor": [11.0, 12.0]}, {"tensor": [21.0, 22.0]}, {"tensor": [1.0, 2.0]}]
    assert check_prediction([[11.0, 12.0], [21.0, 22.0], [1.0, 2.0]], got, "tensor") is True

    bad = p2p.shift_records(FakeCluster(_shift_states(3, 1, wrong_rank=1)), shift=1)
    assert report_pairs(bad) == [False, True, True]  # rank 1 receives in 0 → 1
    out = capsys.readouterr().out
    assert "0 → 1 ✗  rank 1 received [0.0, 0.0] (model: [1.0, 2.0]" in out


def test_pair_records_of_an_exchange_between_two_of_four_ranks():
    states = _shift_states(2, 1) + [{"before": {"outbox": None, "inbox": None},
                                     "after": {"outbox": None, "inbox": None}}] * 2
    records = p2p.pair_records(FakeCluster(states), [(0, 1), (1, 0)])
    assert all(all(check(r)) for r in records)
    assert [r["after"]["tensor"] for r in records[1]["ranks"]] == [[11.0, 12.0], [11.0, 12.0], None, None]
    with pytest.raises(ValueError, match="two different ranks"):
        p2p.pair_records(FakeCluster(states), [(1, 1)])


def test_plot_exchange_draws_every_rank():
    fig = p2p.plot_transfers(FakeCluster(_shift_states(4, 1)), "ring shift")
    assert sorted(ax.get_gid() for ax in fig.axes) == [f"rank{r}" for r in range(4)]
