"""Notebook 24 (pipeline schedules after 1F1B: interleaved 1F1B and ZB-H1 by hand, torch's
multi-stage schedules) executed on gloo, checked against references computed here; and,
without engines (`docs`), the paced width its prose states against its code's."""
from __future__ import annotations

import re

import pytest
import torch
from conftest import NOTEBOOKS
from notebook_runner import notebook_text, png_count
from notebook_source import literals, prose
from training_notebooks import diff, run_training_notebook

from helpers.fitting.schedules import plan
from helpers.training.pipeline import make_stages
from helpers.training.toy import loss_fn, make_data

SCHEDULES = {"1F1B": 1, "interleaved": 2, "ZB-H1": 1}     # name: chunks per rank
TORCH = ("ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble",
         "ScheduleDualPipeV")
NB = NOTEBOOKS / "24_pipeline_schedules.ipynb"
PACED = "paced-run"          # the cell that sets the paced stages' sizes


def _saved_diff(saved, grad: torch.Tensor) -> float:
    """A saved gradient against the reference: the whole tensor, or a large one's summary."""
    if not isinstance(saved, dict):
        return diff(saved, grad)
    assert saved["shape"] == list(grad.shape) and saved["dtype"] == "float64", saved
    head = torch.tensor(saved["head"], dtype=grad.dtype)
    return max(abs(saved["norm"] - grad.norm().item()),
               abs(saved["sum"] - grad.sum().item()) / max(1.0, grad.numel() ** 0.5),
               (head - grad.flatten()[:8]).abs().max().item())


def _reference(n_stages: int, width: int, batch: int) -> list[dict]:
    X, Y = make_data(n_samples=batch)
    model = torch.nn.Sequential(*make_stages(n_stages, width))
    loss_fn(model(X), Y).backward()
    return [{k: p.grad for k, p in stage.named_parameters()} for stage in model]


def _order(events) -> list[tuple[str, int, int]]:
    """Compute spans in start order, as (kind, stage, micro-batch)."""
    spans = sorted((e for e in events if e[0] in ("F", "B", "I", "W")), key=lambda e: e[2])
    return [(e[0], *map(int, e[1].split("."))) for e in spans]


def _held(order, done=("B", "W")) -> int:
    """Most (stage, mb) forwarded and not done with (after B, or W where there is W);
    done=("I",): forwarded and still waiting for their I."""
    held = peak = 0
    for kind, *_ in order:
        held += (kind == "F") - (kind in done)
        peak = max(peak, held)
    return peak


def _bubble(events_by_rank) -> float:
    total = max(e[3] for events in events_by_rank for e in events)
    return sum(1 - sum(e[3] - e[2] for e in events if e[0] in ("F", "B", "I", "W")) / total
               for events in events_by_rank) / len(events_by_rank)


# The paced runs (every action a real computation, then a sleep to its fixed length, so
# the ranks do not compete for the cores, as with a GPU each; the fastest of three repeats,
# taken in turn):
# at each m the measured bubbles of interleaved 1F1B and ZB-H1 are below 1F1B's, as the
# formulas say, by at least RANK_MARGIN, and every measured bubble is within
# [formula − BELOW_FORMULA, formula + ABOVE_FORMULA] (the transfers, not free here).
# Calibrated on this 2-core machine beside other sessions' tests and a browser (load
# average 12-16), p = 2 and 4: margins 0.049 or more, measured − formula in [0.006, 0.27].
# With the real compute, in these and one earlier execution, interleaved 1F1B's bubble
# was above 1F1B's in 11 of 12 (p, m) rows (0.91 against 0.86 at p = 4, m = 4).
# One CI run (two repeats back to back, then) found ZB-H1 at 0.25 against 1F1B's 0.22 at
# p = 2, m = 4 (both repeats, it seems, in one busy spell). The repeats now come in turn.
RANK_MARGIN = 0.02
BELOW_FORMULA = 0.05
ABOVE_FORMULA = 0.35


def _assert_paced(record: dict, p: int) -> None:
    table = record["paced_table"]
    ms = record["microbatch_counts"][:2]
    assert sorted({row["m"] for row in table}) == ms and len(table) == 3 * len(ms)
    for m in ms:
        bubble = {row["key"]: row for row in table if row["m"] == m}
        for key in ("interleaved", "ZB-H1"):
            assert bubble[key]["measured"] <= bubble["1F1B"]["measured"] - RANK_MARGIN, (
                m, {k: row["measured"] for k, row in bubble.items()})
        for row in bubble.values():
            assert (row["formula"] - BELOW_FORMULA <= row["measured"]
                    <= row["formula"] + ABOVE_FORMULA), row
    width = record["ranks"][0]["paced_width"]
    ref = {n: _reference(n, width, record["batch"]) for n in (p, 2 * p)}
    for r, got in enumerate(record["ranks"]):
        for name, v in SCHEDULES.items():
            saved = got["paced_grads"][name]
            assert sorted(map(int, saved)) == list(range(r, p * v, p))
            for s, grads in saved.items():
                for k, grad in ref[p * v][int(s)].items():
                    assert _saved_diff(grads[k], grad) < 1e-10, (name, s, k)
        for name, m, _, events in got["paced_runs"]:      # every F lasted its slot at least
            slot = record["batch"] // m * got["forward_ms"] / 1e3 / record["batch"]
            assert all(e[3] - e[2] >= 0.99 * slot for e in events if e[0] == "F"), (name, m)


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 4])
def test_pipeline_schedules_notebook(n_ranks, tmp_path, monkeypatch):
    nb, record = run_training_notebook("24_pipeline_schedules", n_ranks, tmp_path, monkeypatch)
    p, width, batch = n_ranks, record["width"], record["batch"]
    ms = record["microbatch_counts"]
    assert ms == [p, 2 * p, 4 * p] and all(batch % m == 0 for m in ms)
    ref = {n: _reference(n, width, batch) for n in (p, 2 * p)}

    runs = {}                       # (schedule, m, repeat) → events per rank
    for r, got in enumerate(record["ranks"]):
        assert got["rank"] == r
        for name, v in SCHEDULES.items():           # the hand-built gradients, m = 2p
            saved = got["hand_grads"][name]
            assert sorted(map(int, saved)) == list(range(r, p * v, p))
            for s, grads in saved.items():
                for k, grad in ref[p * v][int(s)].items():
                    assert _saved_diff(grads[k], grad) < 1e-10, (name, s, k)
        for name, m, repeat, events, peak in got["runs"]:
            runs.setdefault((name, m, repeat), []).append(events)
            order = _order(events)
            v = SCHEDULES[name]
            kinds = ("F", "I", "W") if name == "ZB-H1" else ("F", "B")
            # every action once, on this rank's stages
            assert sorted(order) == sorted((k, s, i) for k in kinds
                                           for s in range(r, p * v, p) for i in range(m))
            assert peak == _held(order)
            if name == "1F1B":
                assert peak == min(p - r, m)
            elif name == "interleaved":
                assert peak == min(2 * (p - r - 1) + p + 1, 2 * m)
            waits = sum(e[0] == "wait" for e in events)
            sends_in = (m * v - (r == 0) * m) + (m * v - (r == p - 1) * m)
            assert waits == sends_in, (name, m, r, waits)  # one wait per message received
        for name in TORCH:                                 # torch's, on the 2p stages
            got_t = got["torch_runs"][name]
            v_shape = name in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")
            assert got_t["stages"] == ([r, 2 * p - 1 - r] if v_shape else [r, r + p])
            for s in got_t["stages"]:
                for k, grad in ref[2 * p][s].items():
                    assert _saved_diff(got_t["grads"][str(s)][k], grad) < 1e-10, (name, s)
            order = _order(got_t["events"])
            assert got_t["peak"] == _held(order) == record["torch_peaks"][name][r]
            kinds = [a[0] for a in order]
            assert record["torch_counts"][name][r] == {k: kinds.count(k) for k in "FBIW"}
            assert kinds.count("F") == 2 * 2 * p
        # torch's interleaved 1F1B is ours at m = 2p (every repeat)
        for repeat in range(2):
            ours = _order(runs[("interleaved", 2 * p, repeat)][r])
            assert ours == _order(got["torch_runs"]["ScheduleInterleaved1F1B"]["events"])

    assert set(runs) == {(n, m, k) for n in SCHEDULES for m in ms for k in range(2)}
    assert record["peaks"]["interleaved"] == [min(2 * (p - r - 1) + p + 1, 4 * p)
                                              for r in range(p)]
    # memory at m = 2p (the notebook's memory cells): the counts `run` measured are the
    # slot plan's (simulated here from zs.plan's orders); our ZB-H1 holds 2p - 1 - r, more
    # than 1F1B's p - r on every rank, of which p - r still wait for their I
    for name, v in SCHEDULES.items():
        simulated = [_held(order) for order in plan(name, p, 2 * p, v)]
        assert record["peaks"][name] == record["plan_peaks"][name] == simulated, name
    assert record["peaks"]["1F1B"] == [p - r for r in range(p)]
    assert record["peaks"]["ZB-H1"] == [2 * p - 1 - r for r in range(p)]
    waiting_for_i = [{_held(_order(runs[("ZB-H1", 2 * p, k)][r]), done=("I",))
                      for k in range(2)} for r in range(p)]
    assert waiting_for_i == [{p - r} for r in range(p)]
    assert record["zb_waiting_for_i"] == [p - r for r in range(p)]
    table = record["bubble_table"]
    assert len(table) == 3 * len(ms)
    for row in table:
        key, m, v = row["key"], row["m"], row["v"]
        formula = {"1F1B": (p - 1) / (m + p - 1), "interleaved": (p - 1) / (v * m + p - 1),
                   "ZB-H1": (p - 1) / (3 * m + p - 1)}[key]
        assert row["formula"] == pytest.approx(formula) and row["plan"] == pytest.approx(formula)
        measured = sum(_bubble(runs[(key, m, k)]) for k in range(2)) / 2
        assert row["measured"] == pytest.approx(measured, abs=1e-9)

    text = notebook_text(nb)
    raised = re.findall(r"rank ([01]): raised after ([\d.]+) s: (.+)", text)
    assert sorted(int(r) for r, _, _ in raised) == [0, 1], raised    # neither went through
    assert all(2.5 <= float(s) <= 10 for _, s, _ in raised), raised    # the 3 s timeout
    # the first rank to time out closes the pair: its peer reads its own timeout or the
    # closed connection, whichever comes first (on a loaded machine, either: suite s51a)
    reasons = [why for _, _, why in raised]
    assert any("Timed out waiting 3000ms for recv operation" in why for why in reasons)
    assert all("Timed out waiting 3000ms" in why or "Connection closed by peer" in why
               for why in reasons), reasons
    assert "went through" not in text
    assert "simulate: deadlock at slot 0" in text
    assert ("our interleaved 1F1B and torch's ScheduleInterleaved1F1B: the same order on "
            "every rank") in text
    assert png_count(nb) == 5      # the plans, the paced bubbles, two measured timelines,
                                   # the paced and real bubbles side by side
    _assert_paced(record, p)
    # the paced width the run used is the code's, which the prose states
    # (test_the_prose_states_the_paced_width_the_code_sets)
    assert all(got["paced_width"] == literals(NB, PACED)["paced_width"]
               for got in record["ranks"])


@pytest.mark.docs
def test_the_prose_states_the_paced_width_the_code_sets():
    """The paced model's width the text states is the code's, read without engines;
    test_pipeline_schedules_notebook holds the run's width to the code's."""
    assert f"(`paced_width` = {literals(NB, PACED)['paced_width']})" in prose(NB)
