"""Notebooks 17 (tensor parallel), 18 (pipeline parallel) and 19 (2-D) executed on gloo,
their results checked against references computed here, in the test's own process."""
from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from conftest import NOTEBOOKS  # noqa: E402
from helpers.training.toy import loss_fn, make_data, make_mlp  # noqa: E402
from notebook_runner import execute, notebook_text, png_count  # noqa: E402

TOL = 1e-12


def _load(results, stem) -> list[dict]:
    records = json.loads((results / f"{stem}.json").read_text())
    return records if isinstance(records, list) else [records]


def _assert_every_rank_checked(text: str, n: int) -> None:
    assert "✗" not in text
    for r in range(n):
        assert f"rank {r} ✓" in text, f"no ✓ line for rank {r}"
    assert "All ranks right!" in text, "the exercise check did not pass"


def _diff(got, expected: torch.Tensor) -> float:
    got = torch.tensor(got, dtype=expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return (got - expected).abs().max().item()


# ------------------------------------------------------------------ notebook 17

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
@pytest.mark.parametrize("n_ranks", [2, 3, 4])
def test_tensor_parallel_notebook(n_ranks, tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    nb = execute(NOTEBOOKS / "17_tensor_parallel.ipynb", tmp_path, n_ranks=n_ranks)
    [record] = _load(results, "17_tensor_parallel")
    n = n_ranks
    assert record["backend"] == "gloo" and record["world_size"] == n
    d_hidden = record["d_hidden"]
    assert d_hidden % n == 0
    k = d_hidden // n
    model, hidden_pre, output, x_grad = _unsharded(d_hidden)
    W1, b1 = model[0].weight.grad, model[0].bias.grad
    W2, b2 = model[2].weight.grad, model[2].bias.grad
    assert [r["rank"] for r in record["ranks"]] == list(range(n))
    for r, got in enumerate(record["ranks"]):
        mine = slice(r * k, (r + 1) * k)
        assert _diff(got["W1_grad"], W1[mine]) < TOL
        assert _diff(got["b1_grad"], b1[mine]) < TOL
        assert _diff(got["W2_grad"], W2[:, mine]) < TOL
        assert _diff(got["b2_grad"], b2) < TOL
        assert _diff(got["X_grad"], x_grad) < TOL
        for name in ("output", "Y2", "torch_output"):
            assert _diff(got[name], output) < TOL, name
        assert _diff(got["Y1"], hidden_pre) < TOL
        # per layer: column forward 0 calls, backward one all_reduce of dL/dX;
        # row forward one all_reduce of the output, backward 0 calls
        counts = {(layer, phase): by_name for layer, phase, by_name in got["layer_counts"]}
        batch, d_in, d_out = 48, 8, 4
        assert counts[("column-parallel", "forward")] == {}
        assert counts[("row-parallel", "backward")] == {}
        assert counts[("tanh", "forward")] == counts[("tanh", "backward")] == {}
        col = counts[("column-parallel", "backward")]["all_reduce"]
        row = counts[("row-parallel", "forward")]["all_reduce"]
        assert (col["calls"], col["size"]) == (1, batch * d_in * 8)
        assert (row["calls"], row["size"]) == (1, batch * d_out * 8)
        assert col["sent"] == pytest.approx(2 * (n - 1) / n * batch * d_in * 8)
        gather = got["gather_counts"]["all_gather"]
        assert gather["size"] == batch * d_hidden * 8
        assert gather["sent"] == pytest.approx((n - 1) / n * batch * d_hidden * 8)

    text = notebook_text(nb)
    _assert_every_rank_checked(text, n)
    assert text.count("dist.* calls seen by the counter: 0") == n
    assert png_count(nb) >= 1
