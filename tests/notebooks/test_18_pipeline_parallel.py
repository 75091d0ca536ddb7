"""Notebook 18 (pipeline parallelism: GPipe and 1F1B by hand, torch's schedules) executed
on gloo, its gradients checked against the unsplit model computed here; and, without
engines (`docs`), the sizes its prose states against those its code sets."""
from __future__ import annotations

import pytest
import torch
from animation_checks import only_animation
from conftest import NOTEBOOKS
from notebook_runner import notebook_text, png_count
from notebook_source import literals, prose
from training_notebooks import RANKS, diff, run_training_notebook

from helpers.training.toy import loss_fn, make_data

TOL = 1e-12
NB = NOTEBOOKS / "18_pipeline_parallel.ipynb"
# The cells that set the sizes: the real model's and the paced one's.
SIZES, PACED = "cell-03", "paced-run"


def _saved_diff(saved, grad: torch.Tensor) -> float:
    """The largest gap between a saved gradient and the reference gradient: the whole
    tensor, or for a large one its summary (shape, dtype, norm, sum, first 8 values)."""
    if not isinstance(saved, dict):
        return diff(saved, grad)
    assert saved["shape"] == list(grad.shape) and saved["dtype"] == "float64", saved
    assert grad.numel() > 4096                  # only large tensors are summarised
    head = torch.tensor(saved["head"], dtype=grad.dtype)
    return max(abs(saved["norm"] - grad.norm().item()),
               abs(saved["sum"] - grad.sum().item()) / max(1.0, grad.numel() ** 0.5),
               (head - grad.flatten()[:8]).abs().max().item())


def _runs(got: dict) -> list[dict]:
    """A rank's pulled `runs` (schedule, m, repeat, events, peak, norms), by name."""
    keys = ("schedule", "m", "repeat", "events", "peak", "norms")
    assert all(len(run) == len(keys) for run in got["runs"])
    return [dict(zip(keys, run)) for run in got["runs"]]


def _assert_bytes_between_stages(record: dict, n: int, ms: list[int]) -> None:
    """Every step of every stage: the payload is m-independent (batch × width float64 per
    link and direction), and gloo wrote exactly it + 96 B a send + 48 B a receive."""
    payload = record["batch"] * record["width"] * 8
    assert len(record["traffic"]) == n
    for r, traffic in enumerate(record["traffic"]):
        links = (r > 0) + (r < n - 1)
        steps = {(row["schedule"], row["m"]): row for row in traffic}
        assert set(steps) == {(s, m) for s in ("GPipe", "1F1B") for m in ms}
        for (schedule, m), row in steps.items():
            assert row["sends"] == row["recvs"] == links * m, row
            assert row["model"] == links * payload, row
            assert row["measured"] == row["model"] + 96 * row["sends"] + 48 * row["recvs"], row
            # the two schedules write the same bytes
            assert row["measured"] == steps[("GPipe", m)]["measured"], row
        assert steps[("GPipe", 8)]["batched"] == 0          # blocking send/recv only
        assert steps[("1F1B", 8)]["batched"] > 0            # batch_isend_irecv too


def _assert_torch_1f1b_as_ours(record: dict, n: int, model) -> None:
    """torch's Schedule1F1B, recorded: the order of forwards and backwards of our 1F1B at
    the same m on every stage, p − s forwards before the first backward, at most p − s
    in flight; the unsplit model's gradients."""
    from helpers.training.pipeline import compute_order, in_flight, warmup_forwards

    m = record["ranks"][0]["m_torch"]
    assert m >= n and all(got["m_torch"] == m for got in record["ranks"])
    for r, got in enumerate(record["ranks"]):
        assert len(got["torch_runs"]) == 3
        theirs = {tuple(compute_order(events)) for events in got["torch_runs"]}
        ours = {tuple(compute_order(run["events"])) for run in _runs(got)
                if (run["schedule"], run["m"]) == ("1F1B", m)}
        assert len(theirs) == 1 and theirs == ours, (r, theirs, ours)
        order = theirs.pop()
        assert len(order) == 2 * m
        assert warmup_forwards(order) == in_flight(order) == n - r
        for k, grad in ((k, p.grad) for k, p in model[r].named_parameters()):
            assert _saved_diff(got["torch_1f1b_grads"][k], grad) < 1e-10


# The paced stages (compute that sleeps, leaving the cores free, as a GPU per rank does):
# the measured bubble (the fastest of three repeats, taken in turn) falls with m as
# (p − 1)/(m + p − 1) does.
# Calibrated (two repeats back to back, then) from 6 executions of this test's notebook
# (p = 2, 3, 4, twice each) on this 2-core machine beside four other sessions' tests and a
# browser (load average 10-16),
# the faster repeat recomputed from the saved runs: the worst rise from one m to the next
# was 0.074 (p = 3, 1F1B, m = 4 → 8), measured − formula stayed in [0.001, 0.248], and the
# fall from m = 1 to m = 8 was at least 0.47 of the formula's. With the real compute, in
# the same executions, the bubble rose from m = 4 to 16 in 12 of 12 (p, schedule) series
# (e.g. 0.57 → 0.71 at p = 4, GPipe), so a measurement of contention fails these checks.
RISE_TOLERANCE = 0.08        # bubble(2m) ≤ bubble(m) + this: a nearly monotone fall
BELOW_FORMULA = 0.05         # measured ≥ formula − this
ABOVE_FORMULA = 0.35         # measured ≤ formula + this (the transfers, not free here)
FALL_SHARE = 0.35            # bubble(1) − bubble(8) ≥ this × the formula's fall
LATE_WAKE_UPS = 3.0          # paced compute per step ≤ this × its paced time (late sleeps)


def _assert_paced_bubble_follows_formula(table: list[dict], n: int, paced_ms: float) -> None:
    from helpers.training.pipeline import theory_bubble

    for schedule in ("GPipe", "1F1B"):
        rows = sorted((row for row in table if row["schedule"] == schedule),
                      key=lambda row: row["m"])
        assert [row["m"] for row in rows] == [1, 2, 4, 8], rows
        bubble = [row["measured"] for row in rows]
        formula = [theory_bubble(n, row["m"]) for row in rows]
        assert [row["theory"] for row in rows] == pytest.approx(formula)
        for before, after in zip(bubble, bubble[1:]):
            assert after <= before + RISE_TOLERANCE, (schedule, bubble)
        for measured, expected in zip(bubble, formula):
            assert expected - BELOW_FORMULA <= measured <= expected + ABOVE_FORMULA, (
                schedule, bubble, formula)
        assert bubble[0] - bubble[-1] >= FALL_SHARE * (formula[0] - formula[-1]), (
            schedule, bubble, formula)
        # the compute per step: the paced time, plus however late the sleeps woke up
        compute = [row["compute_ms"] for row in rows]
        assert all(0.99 * paced_ms <= ms <= LATE_WAKE_UPS * paced_ms for ms in compute), compute


def _assert_paced_runs(record: dict, n: int, X, Y) -> None:
    """The paced runs: the real gradients (m = 4, both schedules) of the unsplit paced
    model; every forward lasted at least its paced time."""
    from helpers.training.pipeline import make_stages

    width = record["ranks"][0]["paced_width"]
    model = torch.nn.Sequential(*make_stages(n, width))
    loss_fn(model(X), Y).backward()
    for r, got in enumerate(record["ranks"]):
        for schedule in ("GPipe", "1F1B"):
            for k, p in model[r].named_parameters():
                assert _saved_diff(got["paced_grads"][schedule][k], p.grad) < 1e-10
        for schedule, m, _, events in got["paced_runs"]:
            forwards = [e for e in events if e[0] == "forward"]
            assert sorted(e[1] for e in forwards) == list(range(m))
            paced_s = got["forward_ms"] / 1e3 / m
            assert all(e[3] - e[2] >= 0.99 * paced_s for e in forwards), (schedule, m)


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", RANKS)
def test_pipeline_parallel_notebook(n_ranks, tmp_path, monkeypatch):
    from helpers.training.pipeline import make_stages, theory_bubble

    nb, record = run_training_notebook("18_pipeline_parallel", n_ranks, tmp_path, monkeypatch)
    n = n_ranks

    # the reference: the unsplit model on the whole batch, here
    X, Y = make_data(n_samples=record["batch"])
    model = torch.nn.Sequential(*make_stages(n, record["width"]))
    loss = loss_fn(model(X), Y)
    loss.backward()
    *first, last = record["ranks"]           # the loss: on the last stage only
    assert abs(last["torch_loss"] - loss.item()) < TOL
    assert abs(last["hand_loss"] - loss.item()) < TOL
    assert all(got["torch_loss"] is None and got["hand_loss"] is None for got in first)
    ms = sorted({run["m"] for run in _runs(record["ranks"][0])})
    assert len(ms) >= 4
    for r, got in enumerate(record["ranks"]):
        assert got["rank"] == r
        ref = {k: p.grad for k, p in model[r].named_parameters()}
        assert list(got["grads_m4"]) == ["GPipe", "1F1B"]
        for schedule in ("GPipe", "1F1B"):
            assert set(got["grads_m4"][schedule]) == set(ref)
            for k, grad in ref.items():
                assert _saved_diff(got["grads_m4"][schedule][k], grad) < 1e-10
        assert set(got["torch_grads"]) == set(ref)
        for k, grad in ref.items():
            assert _saved_diff(got["torch_grads"][k], grad) < 1e-10
        for run in _runs(got):
            m = run["m"]
            for k, grad in ref.items():
                assert abs(run["norms"][k] - grad.norm().item()) < 1e-10
            kinds = [e[0] for e in run["events"]]
            for kind in ("forward", "backward"):
                mbs = sorted(e[1] for e in run["events"] if e[0] == kind)
                assert mbs == list(range(m)), (run["schedule"], m, kind)
            if run["schedule"] == "GPipe":   # blocking transfers only
                links = (r > 0) + (r < n - 1)
                assert kinds.count("send") == kinds.count("recv") == links * m
            starts = [e[2] for e in run["events"]]
            assert starts == sorted(starts) and all(e[3] >= e[2] >= 0 for e in run["events"])
    assert record["peaks"]["GPipe"] == [8] * n
    assert record["peaks"]["1F1B"] == [min(n - r, 8) for r in range(n)]
    _assert_bytes_between_stages(record, n, ms)
    _assert_torch_1f1b_as_ours(record, n, model)

    table = record["bubble_table"]
    assert {(row["schedule"], row["m"]) for row in table} == {
        (s, m) for s in ("GPipe", "1F1B") for m in ms}
    for row in table:
        assert row["theory"] == pytest.approx(theory_bubble(n, row["m"]))
        assert 0.0 < row["measured"] < 1.0 and row["step_ms"] > 0
        if row["m"] == 1:   # one micro-batch: the stages cannot overlap at all
            assert row["measured"] > 0.5 * row["theory"]
        assert row["compute_ms"] > 0 and row["transfer_ms"] > 0
    _assert_paced_bubble_follows_formula(record["paced_table"], n,
                                         record["ranks"][0]["forward_ms"]
                                         + record["ranks"][0]["backward_ms"])
    _assert_paced_runs(record, n, X, Y)

    text = notebook_text(nb)
    # the sizes the run used are those the code sets, which the prose states
    # (test_the_prose_states_the_sizes_the_code_sets)
    sizes = literals(NB, SIZES)
    assert (record["batch"], record["width"]) == (sizes["batch"], sizes["width"])
    assert all(got["paced_width"] == literals(NB, PACED)["paced_width"]
               for got in record["ranks"])
    assert "fell at every step" in text or "did not fall at every step" in text
    for r in range(n):
        assert (f"rank {r}: m = {n - 1} refused: Number of microbatches ({n - 1}) must be "
                f"greater than or equal to the number of stages ({n}).") in text
    for r, what in ((0, "the output of micro-batch 1"), (1, "the gradient of micro-batch 0")):
        assert f"rank {r}: sending {what} raised after 3." in text
    # "not measured:" is NOT_MEASURED (the bytes); the bench quote may say "not measured yet"
    assert "went through" not in text and "not measured:" not in text
    assert png_count(nb) >= 7  # scheme, timelines, bubbles, torch 1F1B, time split, peaks, bytes
    # the animation ends with the fastest recorded m = 8 run of each schedule, span by span
    last = only_animation(nb, "spans")["last"]["spans"]
    for schedule in ("GPipe", "1F1B"):
        repeats = {}
        for got in record["ranks"]:
            for run in _runs(got):
                if (run["schedule"], run["m"]) == (schedule, 8):
                    repeats.setdefault(run["repeat"], []).append(run["events"])
        fastest = min(repeats.values(), key=lambda runs: max(e[3] for ev in runs for e in ev))
        for r, events in enumerate(fastest):
            drawn = sorted((k, x0, x1) for k, x0, x1 in last[schedule][r])
            wanted = sorted((e[0], e[2], e[3]) for e in events if e[3] > e[2])
            assert [k for k, *_ in drawn] == [k for k, *_ in wanted]
            assert [x for _, *ends in drawn for x in ends] == pytest.approx(
                [x for _, *ends in wanted for x in ends], abs=1e-9)


@pytest.mark.docs
def test_the_prose_states_the_sizes_the_code_sets():
    """The sizes the text states are the code's (issue 20, fix 1), read without engines;
    test_pipeline_parallel_notebook holds the run's sizes to the code's."""
    text, sizes = prose(NB), literals(NB, SIZES)
    assert f"with `batch` = {sizes['batch']} samples" in text
    assert f"The width (`width` = {sizes['width']})" in text
    assert f"(`paced_width` = {literals(NB, PACED)['paced_width']})" in text
