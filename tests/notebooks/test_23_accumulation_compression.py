"""Notebook 23 (accumulation, recomputation, compressed gradients) executed on gloo, its
record checked against references computed here, in the test's process."""
from __future__ import annotations

import pytest
import torch
from notebook_runner import notebook_text, png_count
from training_notebooks import run_training_notebook

from helpers.bench.wire import agrees
from helpers.transformer.block import loss_fn, make_block, make_tokens

K, N_PARAMS_MLP, N_PARAMS_BLOCK = 4, 8 * 16 + 16 + 16 * 4 + 4, 18960
ROWS, COLS = 4 * 48 + 96 + 48, 4 * 48 + 48 + 96   # Σ rows, Σ columns of the block's matrices
VECTORS = 4224                                     # the biases and LayerNorms, float64 bytes


def _ring(nbytes: float, n: int) -> float:
    return 2 * (n - 1) / n * nbytes


def _saved_bytes(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> int:
    """Bytes of the distinct storages autograd saves in forward, parameters left out."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in params:
            seen[s.data_ptr()] = s.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn(model(x), y)
    return sum(seen.values())


def _float64_losses(steps: int = 6, lr: float = 0.5) -> list[float]:
    X, Y = make_tokens(batch=12)
    block = make_block()
    opt = torch.optim.SGD(block.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(block(X), Y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 4])
def test_accumulation_compression_notebook(n_ranks, tmp_path, monkeypatch):
    nb, record = run_training_notebook("23_accumulation_compression", n_ranks, tmp_path,
                                       monkeypatch)
    n = n_ranks
    assert record["k"] == K and record["micro"] == 48 // (K * n)
    S = N_PARAMS_MLP * 8
    one = _ring(S, n)
    X, Y = make_tokens(batch=12)
    per = 12 // n
    stack = torch.nn.Sequential(*(make_block(seed=i) for i in range(4)))
    plain_saved = _saved_bytes(stack, X[:per], Y[:per])
    one_process = _float64_losses()
    for rank, got in enumerate(record["ranks"]):
        assert got["grad_bytes"] == S and got["hand_calls"] == [1, 1, 1]
        assert agrees(got["hand_bytes"][-1], one, 1, n), got["hand_bytes"]
        assert agrees(got["ddp_bytes"][-1], one, 1, n), got["ddp_bytes"]
        forgot = record["bytes_rows"][rank][2]
        assert forgot["calls"] == K and agrees(forgot["measured"], K * one, K, n), forgot
        # recomputation: 4 blocks, each forward once more; the plain stack's bytes as here
        plain, ckpt = got["costs"]["plain"], got["costs"]["checkpointed"]
        assert (plain["block_forwards"], ckpt["block_forwards"]) == (4, 8)
        assert plain["saved_bytes"] == plain_saved
        assert 4 * per * 24 * 48 * 8 <= ckpt["saved_bytes"] < plain_saved / 5
        rows = {r["hook"]: r for r in got["compression"]}
        exact = rows["float64 (DDP's own)"]
        assert exact["calls"] == 0 and exact["max_error"] < 1e-12
        assert agrees(exact["measured"], _ring(N_PARAMS_BLOCK * 8, n), 1, n)
        for hook in ("fp16_compress_hook", "fp16 by hand", "bf16_compress_hook, wrapped"):
            r = rows[hook]
            assert (r["calls"], r["size"]) == (1, N_PARAMS_BLOCK * 2), r
            assert agrees(r["measured"], _ring(N_PARAMS_BLOCK * 2, n), 1, n), r
        assert 0 < rows["fp16_compress_hook"]["rel_error"] < 1e-3
        assert rows["fp16 by hand"]["rel_error"] == rows["fp16_compress_hook"]["rel_error"]
        assert 0 < rows["bf16_compress_hook, wrapped"]["rel_error"] < 1e-2
        for r_ in (1, 2, 4):
            r = rows[f"powerSGD_hook rank {r_}"]
            size = VECTORS + 8 * r_ * (ROWS + COLS)
            assert (r["calls"], r["size"]) == (3, size), r
            assert agrees(r["measured"], _ring(size, n), 3, n), r
            assert r["rel_error"] > rows["bf16_compress_hook, wrapped"]["rel_error"]
    losses = record["mean_losses"]
    assert losses["float64 (DDP's own)"] == pytest.approx(one_process, abs=1e-12)
    for hook in ("fp16_compress_hook", "fp16 by hand", "bf16_compress_hook, wrapped"):
        assert losses[hook] == pytest.approx(one_process, abs=1e-3), hook
    last = [losses[f"powerSGD_hook rank {r}"][-1] for r in (1, 2, 4)]
    assert last[0] > last[1] > last[2] > one_process[-1], last
    assert record["refusal"] == ("BF16 all reduce communication hook required CUDA 11+ and "
                                 "NCCL 2.10+ or XPU and XCCL")
    # the refusal is this CPU-only build's (what torch's _check_comm_hook reads), on gloo;
    # the suite runs on a CPU-only torch (a CUDA build registers the hook: make gpu-check)
    assert record["bf16_build"] == {
        "torch.version.cuda": None, "torch.version.hip": None, "NCCL": None,
        "XCCL and an XPU": False}
    assert (f"on gloo, bf16_compress_hook → TypeError: {record['refusal']}"
            in notebook_text(nb))
    assert record["batched"] == ["AssertionError in _orthogonalize, called from "
                                 "batched_powerSGD_hook"] * n
    assert "fp16_compress_hook" in record["compression_table"]
    assert png_count(nb) >= 4
