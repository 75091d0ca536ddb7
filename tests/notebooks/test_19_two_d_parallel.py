"""Notebook 19 (2-D parallelism: data x tensor) executed on gloo, its parameters and
losses checked against one process training on the whole batch; torch's own composition
(parallelize_module on the row, fully_shard on the column) against the same reference,
its calls and the bytes it wrote to each group read from every rank's connections."""
from __future__ import annotations

import pytest
from notebook_runner import notebook_text, png_count
from training_notebooks import diff, run_training_notebook

from helpers.training.toy import make_data, make_mlp

TOL = 1e-12


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks, shape", [(4, (2, 2)), (3, (1, 3)), (2, (1, 2))])
def test_two_d_notebook(n_ranks, shape, tmp_path, monkeypatch):
    """4 ranks: a 2 × 2 mesh. 2 and 3 ranks: the stated fallback, 1 × n (tensor parallel
    only), still checked against the reference."""
    from helpers.training.toy import reference_train

    nb, record = run_training_notebook("19_two_d_parallel", n_ranks, tmp_path, monkeypatch)
    n = n_ranks
    dp, tp = shape
    assert (record["dp_size"], record["tp_size"]) == (dp, tp)
    text = notebook_text(nb)
    if dp == 1:
        assert f"{n} is prime" in text and f"This notebook runs 1 × {n}" in text
    else:
        assert f"{n} ranks: a {dp} × {tp} mesh" in text

    X, Y = make_data()
    d_hidden = 4 * tp
    ref = reference_train(make_mlp(d_hidden=d_hidden), X, Y, steps=record["steps"],
                          lr=record["lr"])
    k = d_hidden // tp
    seen = set()
    for r, got in enumerate(record["ranks"]):
        row, col = got["dp_rank"], got["tp_rank"]
        assert (row, col) == (r // tp, r % tp)          # row-major, as init_device_mesh
        seen.add((row, col))
        mine = slice(col * k, (col + 1) * k)
        expected = {"0.weight": ref.state["0.weight"][mine], "0.bias": ref.state["0.bias"][mine],
                    "2.weight": ref.state["2.weight"][:, mine], "2.bias": ref.state["2.bias"]}
        for name, value in expected.items():
            assert diff(got["params"][name], value) < TOL, (r, name)
        # each rank's loss is its replica's; their mean over the replicas is the reference's
        row_mates = [g for g in record["ranks"] if g["dp_rank"] == row]
        assert all(g["losses"] == got["losses"] for g in row_mates)
        # the last step's collectives: g on the row, then one all_reduce per shard on the column
        row_ranks = [row * tp + c for c in range(tp)]
        col_ranks = [q * tp + col for q in range(dp)]
        executed = [(c["phase"], c["name"], c["group"], c["size"]) for c in got["executed"]]
        assert executed == [("forward", "all_reduce", row_ranks, 48 // dp * 4 * 8)] + [
            ("gradient sync", "all_reduce", col_ranks, numel * 8)
            for numel in (k * 8, k, 4 * k, 4)]
        _assert_step_bytes(got["executed"], dp)
    assert seen == {(a, b) for a in range(dp) for b in range(tp)}
    replica_losses = [[g["losses"] for g in record["ranks"] if g["dp_rank"] == row][0]
                      for row in range(dp)]
    for step, ref_loss in enumerate(ref.losses):
        mean = sum(losses[step] for losses in replica_losses) / dp
        assert abs(mean - ref_loss) < TOL

    assert text.count("and no error") == n
    assert "not measured" not in text
    # the mesh, the plan, each call's bytes, the parameters, the losses, the rows of W1
    # each rank holds, the bytes per group, the gradients averaged over the wrong group
    assert png_count(nb) == 8
    _assert_torch_composition(record, ref, dp, tp, k)


def _assert_torch_composition(record: dict, ref, dp: int, tp: int, k: int) -> None:
    """parallelize_module on the row, fully_shard on the column: every rank's full
    parameters equal one process's, its losses the hand-built step's; its calls (FSDP2's on
    the column, none on a column of one rank; DTensor's g on the row; none in the optimizer
    step) and the bytes it wrote to each group, from every rank's connections."""
    from helpers.bench.wire import agrees, peer_matrix

    n = dp * tp
    sync = (k * 8 + k + 4 * k + 4) * 8                  # the four tp shards, float64
    g_size = 48 // dp * 4 * 8
    for r, got in enumerate(record["ranks"]):
        for name, value in ref.state.items():
            assert diff(got["torch_params"][name], value) < TOL, (r, name)
        assert max(abs(a - b) for a, b in zip(got["torch_losses"], got["losses"])) < TOL
        row, col = divmod(r, tp)
        row_ranks = [row * tp + c for c in range(tp)]
        col_ranks = [q * tp + col for q in range(dp)]
        fsdp = dp > 1
        assert [(c["phase"], c["name"], c["group"], c["size"]) for c in got["torch_executed"]] \
            == [("forward", "all_gather_single", col_ranks, sync)] * fsdp + [
                ("forward", "all_reduce (functional)", row_ranks, g_size)] + [
                ("backward", "reduce_scatter_single", col_ranks, sync)] * fsdp
        # FSDP2's calls are read one by one; DTensor's functional call has no bytes of its own
        for c in got["torch_executed"]:
            if "functional" in c["name"]:
                assert c["measured"] is None, c
            else:
                ring = c["model"] * (2 if "reduce_scatter" in c["name"] else 1)
                assert agrees(c["measured"], ring, 1, dp), c
        assert len(got["torch_sockets"]) == len(got["hand_sockets"]) == 3
        # FSDP2 keeps 1/dp of the tp shard: rows of its row's rows of W1
        part = k // dp
        piece = ref.state["0.weight"][col * k + row * part:col * k + (row + 1) * part]
        assert diff(got["W1_piece"], piece) < TOL, r
        assert got["torch_piece_bytes"] * dp == sync, got["torch_piece_bytes"]

    def to_groups(key: str) -> list[dict]:
        """Per rank: the bytes of the step's three blocks to its row, its column, others."""
        out = [{"tp": 0, "dp": 0, "other": 0} for _ in range(n)]
        for phase in range(3):
            sent, other = peer_matrix([got[key][phase] for got in record["ranks"]])
            for r in range(n):
                out[r]["other"] += other[r]
                for j in range(n):
                    if j == r:
                        continue
                    same_row, same_col = j // tp == r // tp, j % tp == r % tp
                    out[r]["tp" if same_row else "dp" if same_col else "other"] += sent[r][j]
        return out

    hand, torch_sent = to_groups("hand_sockets"), to_groups("torch_sockets")
    assert record["hand_group_bytes"] == hand and record["torch_group_bytes"] == torch_sent
    step_only = peer_matrix([got["torch_sockets"][2] for got in record["ranks"]])
    assert step_only == ([[0] * n for _ in range(n)], [0] * n)   # the optimizer: nothing
    for r in range(n):
        mine, theirs = hand[r], torch_sent[r]
        assert mine["other"] == theirs["other"] == 0, (mine, theirs)
        assert mine["tp"] == theirs["tp"], (mine, theirs)        # g: the same call, bytes
        assert agrees(theirs["tp"], 2 * (tp - 1) / tp * g_size, 1, tp), theirs
        if dp == 1:
            assert mine["dp"] == theirs["dp"] == 0, (mine, theirs)
        else:
            # an all_gather's ring bytes, and a reduce_scatter that gloo runs as an all_reduce
            on_gloo = (dp - 1) / dp * sync + 2 * (dp - 1) / dp * sync
            assert agrees(theirs["dp"], on_gloo, 2, dp), theirs
            assert theirs["dp"] < mine["dp"], (mine, theirs)   # two calls' headers, not four


def _assert_step_bytes(executed: list[dict], dp: int) -> None:
    """Each call: the ring model 2(q − 1)/q · S in a group of q ranks, and measured = model
    + gloo's headers; a group of one rank writes exactly 0 B. At dp ≥ 2 the gradient sync's
    headers weigh as much as its data or more."""
    from helpers.bench.wire import agrees

    for call in executed:
        q = len(call["group"])
        assert call["model"] == pytest.approx(2 * (q - 1) / q * call["size"]), call
        if q == 1:
            assert call["measured"] == 0, call
        else:
            assert call["measured"] > call["model"], call
            assert agrees(call["measured"], call["model"], 1, q), call
    sync = [c for c in executed if c["phase"] == "gradient sync"]
    if dp >= 2:
        model = sum(c["model"] for c in sync)
        assert sum(c["measured"] for c in sync) - model >= model, sync
