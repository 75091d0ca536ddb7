"""The plans of notebook 24 (helpers/fitting/schedules.py), without engines: each plan runs
every action once, respects the data dependencies, and its idle share is the formula's."""
from __future__ import annotations

import pytest

from helpers.fitting import schedules as zs


def _formula(name: str, p: int, m: int, v: int) -> float:
    """The bubble as a share of the step, written out here: idle slots / all slots."""
    work = {"1F1B": 2 * m, "interleaved": 2 * v * m, "ZB-H1": 3 * m}[name]
    idle = {"1F1B": 2 * (p - 1), "interleaved": 2 * (p - 1), "ZB-H1": p - 1}[name]
    return idle / (work + idle)


CASES = [(name, p, m, v) for p in (2, 3, 4) for m in (p, 2 * p, 4 * p)
         for name, v in (("1F1B", 1), ("interleaved", 2), ("ZB-H1", 1))]


@pytest.mark.parametrize("name,p,m,v", CASES)
def test_every_plan_runs_each_action_once_and_meets_its_formula(name, p, m, v):
    order = zs.plan(name, p, m, v)
    kinds = ("F", "I", "W") if name == "ZB-H1" else ("F", "B")
    for r, actions in enumerate(order):
        wanted = {(k, s, i) for k in kinds for s in range(r, p * v, p) for i in range(m)}
        assert sorted(actions) == sorted(wanted)
    grid = zs.simulate(order)
    assert zs.grid_bubble(grid) == pytest.approx(_formula(name, p, m, v), abs=1e-12)
    assert zs.formula_bubble(name, p, m, v) == pytest.approx(_formula(name, p, m, v))
    # the dependencies: every action after what it needs, on the unit-time grid
    end = {a: t + 1 for row in grid for t, a in enumerate(row) if a is not None}
    for a, t in end.items():
        kind, s, i = a
        if kind == "F" and s > 0:
            assert end[("F", s - 1, i)] <= t - 1
        if kind in ("B", "I"):
            assert end[("F", s, i)] <= t - 1
            if s < p * v - 1:
                assert end[(kind, s + 1, i)] <= t - 1
        if kind == "W":
            assert end[("I", s, i)] <= t - 1


def _peak_in_flight(order) -> int:
    """The most (stage, micro-batch) a plan's rank has forwarded and not yet done with."""
    held = peak = 0
    for kind, _, _ in order:
        held += 1 if kind == "F" else -1 if kind in ("B", "W") else 0
        peak = max(peak, held)
    return peak


def test_one_f_one_b_holds_p_minus_r_and_interleaved_its_warmup_plus_one():
    assert [_peak_in_flight(o) for o in zs.plan("1F1B", 4, 8)] == [4, 3, 2, 1]
    assert [_peak_in_flight(o) for o in zs.plan("interleaved", 4, 8, 2)] == [11, 9, 7, 5]
    assert [_peak_in_flight(o) for o in zs.plan("ZB-H1", 4, 16)] == [7, 6, 5, 4]


def test_a_plan_whose_neighbours_disagree_is_a_deadlock():
    bad = zs.plan("1F1B", 2, 2)
    bad[0] = [("B", 0, 0)] + [a for a in bad[0] if a != ("B", 0, 0)]
    with pytest.raises(RuntimeError, match="deadlock at slot 0"):
        zs.simulate(bad)


@pytest.mark.parametrize("args,message", [
    (("interleaved", 4, 6, 2), "not a multiple of p = 4"),
    (("1F1B", 1, 4, 1), "needs 2\\+ ranks"),
    (("ZB-H1", 2, 4, 2), "one stage per rank"),
    (("looped", 2, 4, 1), "unknown schedule"),
])
def test_bad_sizes_are_refused_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        zs.plan(*args)


def test_stage_placements():
    assert [zs.stages_of_rank(r, 4, 2) for r in range(4)] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert [zs.stages_of_rank(r, 4, 2, "V") for r in range(4)] == [[0, 7], [1, 6], [2, 5],
                                                                    [3, 4]]
    assert [zs.owner(s, 4, "V") for s in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0]
    with pytest.raises(ValueError, match="2 stages per rank"):
        zs.stages_of_rank(0, 4, 3, "V")


def test_measured_bubble_and_order_from_spans():
    events = [[("F", "0.0", 0.0, 1.0), ("wait", "0.0", 1.0, 2.0), ("B", "0.0", 2.0, 4.0)],
              [("F", "1.0", 1.0, 2.0), ("I", "1.0", 2.0, 3.0), ("W", "1.0", 3.0, 3.5)]]
    assert zs.step_time(events) == 4.0
    assert zs.measured_bubble(events) == pytest.approx([0.25, 0.375])
    assert zs.compute_order(events[1]) == ["F1.0", "I1.0", "W1.0"]


def test_hold_makes_an_action_last_its_time():
    import time

    start = time.perf_counter()
    with zs.hold(0.02):
        pass
    assert time.perf_counter() - start >= 0.02          # a sleep lasts at least that
    with pytest.raises(ValueError, match="cannot last"):
        with zs.hold(-1.0):
            pass


def test_bubble_ranking_against_the_formulas():
    rows = [{"schedule": s, "m": 4, "measured": b, "formula": zs.formula_bubble(k, 4, 4, v)}
            for s, k, v, b in (("1F1B", "1F1B", 1, 0.45), ("interleaved 1F1B", "interleaved",
                                                            2, 0.33), ("ZB-H1", "ZB-H1", 1, 0.26))]
    assert zs.bubble_ranking(rows) == (
        "m = 4: measured 1F1B 0.45 > interleaved 1F1B 0.33 > ZB-H1 0.26; formulas 1F1B 0.43 > "
        "interleaved 1F1B 0.27 > ZB-H1 0.20; the same order")
    rows[1]["measured"] = 0.5
    assert zs.bubble_ranking(rows).endswith("; not the same order")
