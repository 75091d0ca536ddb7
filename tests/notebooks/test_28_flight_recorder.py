"""Notebook 28 (torch's Flight Recorder) executed on gloo at 2 and 4 ranks: what each rank's
dump holds after each mistake, and what torch's analyzer made of the dumps, against what
each case must show (its rank, its sequence number, its collective)."""
from __future__ import annotations

import pytest
from notebook_runner import execute_with_results, output_text
from reports import shown_reports


def _last(summary: list[dict]) -> dict[int, int | None]:
    return {row["rank"]: row.get("last_seq") for row in summary}


def _cell(nb, cell_id: str) -> str:
    return output_text(next(c for c in nb.cells if c.get("id") == cell_id))


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 4])
def test_flight_recorder_notebook(n_ranks, tmp_path, monkeypatch):
    nb, [record] = execute_with_results("28_flight_recorder", tmp_path, monkeypatch,
                                        n_ranks=n_ranks)
    n, last = n_ranks, n_ranks - 1
    assert record["world_size"] == n
    cases = record["cases"]

    # every rank records its collectives: three good ones, three entries each
    healthy = cases["healthy"]
    assert [row["entries"] for row in healthy["summary"]] == [3] * n
    assert all(row["newest"] == "#3 all_gather(4)" for row in healthy["summary"])
    shown = _cell(nb, "c05")
    assert shown.count("TORCH_FR_BUFFER_SIZE=2000, ") == n, shown
    assert shown.count("the newest ['gloo:all_reduce', 'gloo:broadcast', 'gloo:all_gather']") \
        == n, shown
    # gloo's dump as torch writes it: the analyzer fails on its group table; fixed, it
    # reads it and finds nothing
    assert healthy["raw_returncode"] == 1 and healthy["raw"].startswith("KeyError: ('0', ")
    assert healthy["returncode"] == 0 and healthy["analyzer"].strip() == ""

    # 1 · the last rank never calls: its buffer stops at #3, the others' at #4, and the
    # analyzer names it missing from #4
    never = cases["never_calls"]
    assert _last(never["summary"]) == {r: 3 if r == last else 4 for r in range(n)}
    assert "Not all ranks joining collective, sequence number: 4" in never["analyzer"]
    assert f"missing ranks: {{{last}}}" in never["analyzer"]
    assert "collective: gloo:all_reduce" in never["analyzer"]
    assert never["ours"]["failed"] and all(f["rank"] != last for f in never["ours"]["failed"])
    shown = _cell(nb, "c18")
    assert "<module> at the cell, line" in shown and "site-packages" not in shown

    # 2 · the other order, in a new group: every rank's #1 is its first call, rank 0's
    # another than the others'; the analyzer reports a collective type mismatch at #1
    order = cases["wrong_order"]
    newest = {row["rank"]: row["newest"] for row in order["summary"]}
    assert newest == {r: "#1 all_reduce(4)" if r == 0 else "#1 broadcast(4)" for r in range(n)}
    assert "COLLECTIVE_TYPE_MISMATCH" in order["analyzer"]
    # engines that outlive their group (warm) keep its entries; fresh ones have none
    for row in order["summary"]:
        assert (row["buffer"] > row["entries"]) == record["warm"], (row, record["warm"])
    assert "Collective sequence number: 1 has errors" in order["analyzer"]

    # 3 · a dead rank: no dump; the analyzer refuses, and with --allow-incomplete-ranks
    # cannot decide; ours names the dead rank
    dead = cases["dead_rank"]
    assert [row["dump"] for row in dead["summary"]] == [r != last for r in range(n)]
    assert dead["returncode"] != 0
    assert f"Missing dump files from ranks {{{last}}}" in dead["analyzer"]
    assert f"missed FR dumps from ranks ({{{last}}})" in dead["lenient"]
    died = [f for f in dead["ours"]["failed"] if "engine process died" in f["meaning"]]
    assert [f["rank"] for f in died] == [last] and not dead["ours"]["group_usable"]

    # 4 · DETAIL refuses the mismatch before it runs: only the checks' all_gathers in the
    # buffers, the same on every rank, and the analyzer finds nothing
    detail = cases["detail_mismatch"]
    assert detail["kinds"] == {str(r): ["all_gather"] for r in range(n)}
    assert detail["returncode"] == 0 and detail["analyzer"].strip() == ""
    assert all("different arguments" in f["meaning"] for f in detail["ours"]["failed"])

    # 5 · py-spy's stacks while the straggler sleeps: the others in all_reduce from step,
    # the straggler in load_batch
    waiting = "all_reduce (distributed_c10d.py:"
    for rank, where in record["straggler"].items():
        if int(rank) == last:
            assert where.startswith("load_batch (the cell, line "), where
        else:
            assert where.startswith(waiting) and ", from the cell, line " in where, where

    [check] = shown_reports(nb, "c44")
    assert check.oks == [True] * (n + 1), check.lines()

    # 6 · ■: ranks in Python code stop at once and the group still works; ranks inside
    # all_reduce run on (the cell returns before the timeout), a new cell waits behind
    # them and they drop it, the group is broken, and the start cell recovers
    interrupt = record["interrupt"]
    sleeping, blocked = interrupt["sleeping"], interrupt["in_collective"]
    assert [r["state"] for r in sleeping["ranks"].values()] == ["stopped: KeyboardInterrupt"] * n
    [stopped] = shown_reports(nb, "i03")
    assert stopped.oks == [True] * n, stopped.lines()
    [usable] = shown_reports(nb, "i05r")
    assert usable.oks == [True] * n, usable.lines()
    [stuck] = shown_reports(nb, "i08")
    assert stuck.oks == [False] * (n - 1) + [True], stuck.lines()
    for rank, row in blocked["ranks"].items():
        if int(rank) == last:
            assert row["state"] == "finished the cell", row
        else:
            assert row["state"].startswith("blocked in all_reduce (distributed_c10d.py:"), row
            assert ", from the cell, line 3" in row["state"], row
    assert blocked["elapsed_s"] < blocked["timeout_s"], blocked
    behind = _cell(nb, "i10")
    assert f"rank(s) {', '.join(map(str, range(last)))} did not run this cell" in behind, behind
    assert "a peer rank went away" in _cell(nb, "i12")
    [back] = shown_reports(nb, "i16")
    assert back.oks == [True] * n, back.lines()
