"""Notebook 21 (ring attention by hand; torch's context_parallel) executed on gloo, its
outputs, work counts and bytes checked against references computed here, in the test's
process, from the block's toy (not from the notebook's helpers)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from animation_checks import only_animation
from notebook_runner import notebook_text, png_count
from training_notebooks import diff, run_training_notebook

from helpers.bench.wire import agrees
from helpers.transformer.block import make_block, make_tokens, split_heads

TOL = 1e-12
SEQ, BATCH, HEADS, HEAD_DIM = 24, 2, 12, 4


def _qkv():
    X, _ = make_tokens()
    block = make_block()
    with torch.no_grad():
        h = block.ln1(X)
        a = block.attn
        return [split_heads(p(h), 12) for p in (a.q, a.k, a.v)]


def _zigzag(r: int, n: int, seq: int = SEQ) -> list[int]:
    size = seq // (2 * n)
    return [*range(r * size, (r + 1) * size), *range((2 * n - 1 - r) * size, (2 * n - r) * size)]


def _scores(r: int, n: int, layout: str, seq: int = SEQ) -> int:
    """Scores rank r computes, causal, counted by brute force over (query, key) chunks of
    seq/(2n) tokens: a pair is computed unless every key is later than every query."""
    size = seq // (2 * n)
    mine = [2 * r, 2 * r + 1] if layout == "contiguous" else [r, 2 * n - 1 - r]
    return sum(size * size for qc in mine for kc in range(2 * n) if kc <= qc)


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 4])
def test_context_parallel_notebook(n_ranks, tmp_path, monkeypatch):
    nb, record = run_training_notebook("21_context_parallel", n_ranks, tmp_path, monkeypatch)
    n = n_ranks
    assert record["seq"] == SEQ and record["long_seq"] == 16 * SEQ
    q, k, v = _qkv()
    full = {False: F.scaled_dot_product_attention(q, k, v, is_causal=False),
            True: F.scaled_dot_product_attention(q, k, v, is_causal=True)}
    block_bytes = 2 * BATCH * HEADS * (SEQ // n) * HEAD_DIM * 8      # K and V of SEQ/n tokens
    # every rank held every block once, its own first, then its left neighbour's …
    assert record["owners"] == [[(r - s) % n for s in range(n)] for r in range(n)]
    for r, got in enumerate(record["ranks"]):
        mine = list(range(r * SEQ // n, (r + 1) * SEQ // n))
        assert got["positions"] == mine and got["zz_positions"] == _zigzag(r, n)
        assert diff(got["ring_out"]["full"], full[False][:, :, mine]) < TOL
        assert diff(got["ring_out"]["causal"], full[True][:, :, mine]) < TOL
        assert diff(got["zigzag_out"], full[True][:, :, _zigzag(r, n)]) < TOL
        assert diff(got["torch_out"], full[False][:, :, _zigzag(r, n)]) < TOL
        # the contiguous runs' work per step (the steps figure): every pair not causal;
        # causal, 3 chunk pairs of the own block, a whole earlier block, nothing later
        size = SEQ // (2 * n)
        assert got["ring_work"]["full"] == [(2 * size) ** 2] * n
        assert got["ring_work"]["causal"] == [3 * size ** 2] + [
            (2 * size) ** 2 if s <= r else 0 for s in range(1, n)]
        # one query merged block by block (the softmax figure): the max never falls, and
        # the last merge is the softmax over every key, computed here
        scores = (q[0, 0, mine[0]] @ k[0, 0].T / math.sqrt(HEAD_DIM))
        maxes = [m for m, _ in got["trace"]]
        assert maxes == sorted(maxes) and len(maxes) == n
        assert got["exact"][0] == pytest.approx(scores.max().item(), rel=1e-12)
        assert got["trace"][-1][0] == pytest.approx(got["exact"][0], rel=1e-12)
        assert got["trace"][-1][1] == pytest.approx(
            torch.exp(scores - scores.max()).sum().item(), rel=1e-12)
        # zig-zag's work per step: 3 chunk pairs at its own step, 2 at each other one
        assert got["zigzag_work"] == [3 * size ** 2] + [2 * size ** 2] * (n - 1)
        # the work, counted (the long sequence): exact, balanced under zig-zag
        load = got["load"]
        for layout in ("contiguous", "zigzag"):
            assert load[layout]["scores"] == _scores(r, n, layout, 16 * SEQ), layout
            assert load[layout]["compute_ms"] > 0
        assert load["contiguous"]["blocks"] == r + 1 and load["zigzag"]["blocks"] == n
        # the timelines: per step a merge, then (but the last) a post and a wait; the
        # overlapped loop posts before it merges
        for name, events in got["timelines"].items():
            first = ["post", "compute"] if name == "overlapped" else ["compute", "post"]
            expected = [(kind, s) for s in range(n - 1) for kind in first + ["wait"]]
            assert [(kind, step) for kind, step, _, _ in events] == expected + [
                ("compute", n - 1)], name
            starts = [begin for _, _, begin, _ in events]
            assert starts == sorted(starts) and all(b <= e for _, _, b, e in events), name
        # bytes: n − 1 isends of one K/V block, gloo's exact framing on top
        ring = got["ring_bytes"]
        assert (ring["sends"], ring["recvs"], ring["batched"]) == (n - 1, n - 1, 2 * (n - 1))
        assert ring["model"] == (n - 1) * block_bytes
        assert ring["measured"] == ring["model"] + 96 * (n - 1) + 48 * (n - 1)
        # context_parallel: no dist.* call, two all_gathers of the whole K (or V)
        theirs = got["torch_bytes"]
        assert theirs["calls"] == 0 and theirs["all_gather"] == 2
        assert got["torch_calls"] == {"c10d_functional.all_gather_into_tensor": 2}
        whole = BATCH * HEADS * SEQ * HEAD_DIM * 8
        assert got["torch_model"] == pytest.approx(2 * (n - 1) / n * whole)
        assert got["torch_model"] == pytest.approx(ring["model"])    # the same bytes, modelled
        assert agrees(theirs["measured"], got["torch_model"], 2, n)
        # causal context_parallel raises with both CPU kernels, torch's choice being flash
        no_strategy = ("NotImplementedError: Operator aten._scaled_dot_product_flash_attention"
                       "_for_cpu.default does not have a sharding strategy registered.")
        assert got["causal_errors"] == {
            "default": no_strategy, "FLASH_ATTENTION": no_strategy,
            "MATH": "RuntimeError: aten.add.Tensor got mixed torch.Tensor and DTensor, need to "
                    "convert all torch.Tensor to DTensor before calling distributed operators!"}
        # the pitfalls are wrong on every rank, and local positions skip nothing
        assert got["no_rescale_gap"] > 1e-3 and got["local_gap"] > 1e-3
        assert got["local_work"] == [3 * (SEQ // (2 * n)) ** 2] * n   # every block a diagonal
    text = notebook_text(nb)
    assert "not measured" not in text
    assert png_count(nb) >= 10          # the scheme and the nine figures of this run
    # the animation ends on the last step: rank r holds rank r + 1's block
    last = only_animation(nb, "held")["last"]
    assert last["held"] == [f"KV{(r + 1) % n}" for r in range(n)] and last["moving"] == []
    assert math.isfinite(record["ranks"][0]["load"]["zigzag"]["compute_ms"])
