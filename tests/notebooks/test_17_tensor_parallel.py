"""Notebook 17 (tensor parallelism by hand and with parallelize_module) executed on gloo,
its results checked against the unsharded model computed here, in the test's process."""
from __future__ import annotations

import pytest
import torch
from notebook_runner import notebook_text, png_count
from training_notebooks import RANKS, diff, run_training_notebook

from helpers.training.toy import loss_fn, make_data, make_mlp

TOL = 1e-12


def _assert_model_plus_headers(row: dict, n: int) -> None:
    """Measured on gloo: the model's bytes plus at most the headers `agrees` allows."""
    from helpers.bench.wire import agrees

    assert row["measured"] is not None and row["measured"] > row["model"] > 0, row
    assert agrees(row["measured"], row["model"], row["calls"], n), row


def _unsharded(d_hidden: int):
    """Forward and backward of the unsharded toy MLP, with dL/dX."""
    X, Y = make_data()
    model = make_mlp(d_hidden=d_hidden)
    X = X.clone().requires_grad_(True)
    hidden_pre = model[0](X)
    output = model(X)
    loss_fn(output, Y).backward()
    return model, hidden_pre.detach(), output.detach(), X.grad


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", RANKS)
def test_tensor_parallel_notebook(n_ranks, tmp_path, monkeypatch):
    nb, record = run_training_notebook("17_tensor_parallel", n_ranks, tmp_path, monkeypatch)
    n = n_ranks
    d_hidden = record["d_hidden"]
    assert d_hidden % n == 0
    k = d_hidden // n
    model, hidden_pre, output, x_grad = _unsharded(d_hidden)
    W1, b1 = model[0].weight.grad, model[0].bias.grad
    W2, b2 = model[2].weight.grad, model[2].bias.grad
    partials = []
    for r, got in enumerate(record["ranks"]):
        mine = slice(r * k, (r + 1) * k)
        # the shards: rows of W1 (output features), columns of W2 (input features)
        assert diff(got["W1_shard"], model[0].weight.detach()[mine]) == 0.0
        assert diff(got["W2_shard"], model[2].weight.detach()[:, mine]) == 0.0
        assert diff(got["Y1_slice"], hidden_pre[:, mine]) < TOL
        partials.append(torch.tensor(got["Y2_partial"], dtype=torch.float64))
        assert diff(got["W1_grad"], W1[mine]) < TOL
        assert diff(got["b1_grad"], b1[mine]) < TOL
        assert diff(got["W2_grad"], W2[:, mine]) < TOL
        assert diff(got["b2_grad"], b2) < TOL
        assert diff(got["X_grad"], x_grad) < TOL
        for name in ("output", "Y2", "torch_output"):
            assert diff(got[name], output) < TOL, name
        assert diff(got["Y1"], hidden_pre) < TOL
        assert diff(got["torch_X_grad"], x_grad) < TOL
        assert diff(got["torch_W1_grad_local"], W1[mine]) < TOL
        # per layer: column forward 0 calls, backward one all_reduce of dL/dX;
        # row forward one all_reduce of the output, backward 0 calls
        rows = {(row["layer"], row["phase"]): row for row in got["layer_counts"]}
        batch, d_in, d_out = 48, 8, 4
        for quiet in (("column-parallel", "forward"), ("row-parallel", "backward"),
                      ("tanh", "forward"), ("tanh", "backward")):
            # no collective: nothing counted, nothing written (exactly 0 B)
            assert rows[quiet]["collectives"] == {} and rows[quiet]["measured"] == 0, quiet
        col = rows[("column-parallel", "backward")]
        row = rows[("row-parallel", "forward")]
        for block, numel in ((col, batch * d_in), (row, batch * d_out)):
            call = block["collectives"]["all_reduce"]
            assert (call["calls"], call["size"]) == (1, numel * 8)
            assert call["model"] == pytest.approx(2 * (n - 1) / n * numel * 8)
            _assert_model_plus_headers(block, n)
            assert call["measured"] == block["measured"]     # all of it inside the call
        gather = got["gather_row"]["collectives"]["all_gather"]
        assert gather["size"] == batch * d_hidden * 8
        assert gather["model"] == pytest.approx((n - 1) / n * batch * d_hidden * 8)
        _assert_model_plus_headers(got["gather_row"], n)
        # parallelize_module: no call the counter sees, the hand-built model's bytes
        for hand, theirs in zip(got["hand_traffic"], got["torch_traffic"]):
            assert hand["phase"] == theirs["phase"] and hand["calls"] == 1
            assert theirs["calls"] == 0 and theirs["measured"] > 0
            _assert_model_plus_headers({**theirs, "calls": 1, "model": hand["model"]}, n)
        assert [h["model"] for h in got["hand_traffic"]] == pytest.approx(
            [2 * (n - 1) / n * batch * d * 8 for d in (d_out, d_in)])
    # without f each rank's dL/dX is only its part (wrong); f's all_reduce sums the parts
    no_f = [torch.tensor(got["dX"], dtype=torch.float64) for got in record["ranks"]]
    assert all(diff(d.tolist(), x_grad) > 1e-6 for d in no_f)
    assert diff(sum(no_f).tolist(), x_grad) < TOL
    # the row-parallel layer's partial outputs sum to the output, once its bias is added
    assert diff((sum(partials) + model[2].bias.detach()).tolist(), output) < TOL

    text = notebook_text(nb)
    assert text.count("dist.* calls seen by the counter: 0") == n
    # "not measured:" is NOT_MEASURED (the bytes); the bench quote may say "not measured yet"
    assert "not measured:" not in text
    assert png_count(nb) >= 1
