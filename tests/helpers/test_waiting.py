"""The waiting line of %%px cells and the parts of an interrupted cell, from known states
(helpers/debugging/waiting.py, interrupted.py); the notebooks' tests run them for real."""
from __future__ import annotations

from types import SimpleNamespace

from helpers.debugging import interrupted
from helpers.debugging.waiting import GRACE_S, Waiting


def _result(parts: list[dict]) -> SimpleNamespace:
    return SimpleNamespace(msg_ids=[f"m{i}" for i in range(len(parts))],
                           metadata=parts if len(parts) > 1 else parts[0])


def test_the_line_says_what_it_waits_for_against_the_timeout():
    early = Waiting(3.2, (0, 2), 4, 5.0)
    assert early.text().startswith("⏳ waiting 3 s for rank(s) 0, 2 of 4; a collective gives up")
    late = Waiting(5.0 + GRACE_S + 1, (1,), 2, 5.0)
    assert "longer than the 5 s collective timeout" in late.text()
    assert Waiting(5.24, (), 4, 5.0, ended=True).text() == \
        "⏱ this cell took 5.2 s (collective timeout 5 s)"
    assert Waiting(4.1, (0,), 2, 20.0, ended=True).text().startswith(
        "⏹ stopped waiting after 4.1 s: rank(s) 0 had not finished")


def test_a_cell_that_ended_well_leaves_no_visible_line_only_its_data():
    bundle = Waiting(2.5, (), 2, 5.0, ended=True, hidden=True)._repr_mimebundle_()
    assert bundle["text/plain"] == ""
    assert bundle["text/html"] == ('<span class="px-waiting" data-elapsed="2.50" '
                                   'data-pending="" data-ended="true"></span>')
    shown = Waiting(2.5, (1,), 2, 5.0)._repr_mimebundle_()["text/html"]
    assert shown.startswith('<pre class="px-waiting"') and 'data-pending="1"' in shown


def test_each_part_is_the_rank_of_the_engine_that_answered_else_of_its_target():
    result = _result([{"engine_id": 7}, {"engine_id": None}, {"engine_id": 5}])
    client = SimpleNamespace(outstanding={"m1", "m2"})
    ranks = {5: 0, 6: 1, 7: 2}
    assert interrupted.ranks_of(result, [7, 6, 5], ranks) == \
        [(2, "m0"), (1, "m1"), (0, "m2")]
    assert interrupted.pending_ranks(result, [7, 6, 5], client, ranks) == (0, 1)
    single = _result([{"engine_id": None}])
    assert interrupted.ranks_of(single, 6, ranks) == [(1, "m0")]   # --targets 6


def test_a_dropped_part_and_a_stopped_one_are_told_apart():
    from ipyparallel.error import RemoteError

    parts = [{"engine_id": 0, "status": "aborted"},
             {"engine_id": 1, "status": "error",
              "error": RemoteError("KeyboardInterrupt", "", "")},
             {"engine_id": 2, "status": "ok"}]
    result = _result(parts)
    assert interrupted.dropped_ranks(result, [0, 1, 2], {0: 0, 1: 1, 2: 2}) == (0,)
    said = [interrupted.done_state(p) for p in parts]
    assert said == ["did not run the cell: its engine dropped it after an earlier error",
                    "stopped: KeyboardInterrupt", "finished the cell"]
