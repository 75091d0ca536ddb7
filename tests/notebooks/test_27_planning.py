"""Notebook 27 (planning a run) executed on gloo: its record checked against references
computed here, in the test's process, from the toy block's shapes (not the planner)."""
from __future__ import annotations

import pytest
from training_notebooks import run_training_notebook

from helpers.bench.wire import agrees

BLOCK = 18960                     # parameters of one toy block (make_block), float64
D, HEADS, FF, SEQ = 48, 12, 96, 24
BOUND = (0.5, 4.0)                # the notebook's stated bound on measured / predicted time


def _tp_local_params(n: int) -> int:
    """One block's parameters on one of n tensor-parallel ranks: q, k, v and the first MLP
    layer split by rows (with their biases), o and the second by columns (biases whole),
    the two LayerNorms whole."""
    col = 3 * (D * D // n + D // n) + FF * D // n + FF // n
    row = D * D // n + D + D * FF // n + D
    return col + row + 4 * D


@pytest.mark.timing
@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 4])
def test_planning_notebook(n_ranks, tmp_path, monkeypatch):
    nb, record = run_training_notebook("27_planning", n_ranks, tmp_path, monkeypatch)
    n, m = n_ranks, 2
    params = n * BLOCK * 8                             # the stack: one block per rank
    act = 2 * n * SEQ * D * 8                          # the whole batch's activations
    for r in record["ranks"]:
        rank = r["rank"]
        # DP: one all_reduce of every gradient; ZeRO-3: per block 2 all_gathers and a
        # reduce_scatter (an all_reduce's bytes on gloo); TP: per block 2 + 4 all_reduces.
        expected = {
            "dp_run": (2 * (n - 1) / n * params, 1, {"all_reduce": 1}),
            "fsdp_run": ((n - 1) / n * params * 2 + 2 * (n - 1) / n * params, 3 * n,
                         {"all_gather": 2 * n, "reduce_scatter": n}),
            "tp_run": (2 * (n - 1) / n * act * 6 * n, 6 * n, {"all_reduce": 6 * n}),
            "pp_run": (act / m * m * ((rank < n - 1) + (rank > 0)), 2 * m,
                       {"send": m * ((rank < n - 1) + (rank > 0))}),
        }
        for key, (model, calls, counts) in expected.items():
            run = r[key]
            assert run["calls"] == counts, (key, rank, run["calls"])
            assert agrees(run["bytes"], model, calls, n), (key, rank, run["bytes"], model)
        held = {k: sum(r[k]["memory"].values()) for k in expected}
        assert held["dp_run"] == 4 * params                  # parameters, gradients, Adam × 2
        assert held["fsdp_run"] == 4 * params // n
        assert held["tp_run"] == 4 * 8 * n * _tp_local_params(n)
        assert held["pp_run"] == 4 * 8 * BLOCK
        # the exercise: the PP step in m = 2n micro-batches of one sequence each
        sends = 2 * n * ((rank < n - 1) + (rank > 0))
        assert r["pp_more_sends"] == [SEQ * D * 8] * sends
    rows = record["errors"]
    assert [row["config"] for row in rows] == ["DP", "ZeRO-3", "TP", "PP m=2"]
    for row in rows:
        assert row["ratio"] == row["time measured us"] / row["time predicted us"]
        assert BOUND[0] <= row["ratio"] <= BOUND[1], row
        assert row["memory ok"] is True
    assert tuple(record["bound"]) == BOUND
    # the bound's cell prints this run's range, from the ratios the record keeps
    printed = "".join(o.get("text", "") for c in nb.cells if c.get("id") == "p27-bound-code"
                      for o in c.get("outputs", []))
    low = min(rows, key=lambda r: r["ratio"])
    high = max(rows, key=lambda r: r["ratio"])
    above = sum(r["ratio"] > 1 for r in rows)
    assert (f"from {low['ratio']:.2f} ({low['config']}) to {high['ratio']:.2f} "
            f"({high['config']}); measured above the prediction on {above} of {len(rows)}"
            in printed), printed
    # 1,024 ranks in one process, 2 blocks: TP 2 all_reduces a block forward, 4 backward;
    # fully_shard on each block, then the stack (no parameters of its own): an all_gather a
    # block forward, again backward, and a reduce_scatter; SP (notebook 20's plan) an
    # all_gather and a reduce_scatter per attention and MLP, forward and again backward.
    assert record["scale"]["world_size"] == 1024
    assert record["scale"]["counts"] == {
        "tp+zero3 forward": {"all_reduce": 4, "all_gather": 2},
        "tp+zero3 backward": {"all_reduce": 8, "all_gather": 2, "reduce_scatter": 2},
        "sp forward": {"all_gather": 4, "reduce_scatter": 4},
        "sp backward": {"all_gather": 4, "reduce_scatter": 4}}
    assert record["simulated"] == {str(r): 36.0 for r in range(8)}   # LocalTensorMode
    # The GPU model: one option recomputed here by hand, and the chosen one fits and is not
    # slower than it.
    by_label = {o["config"]: o for o in record["options"]}
    memory_gb, time_s = _llama70b_dp32_tp2_zero3_sp()
    option = by_label["dp32 tp2 ZeRO-3 sp"]
    assert option["memory_gb"] == pytest.approx(memory_gb, rel=1e-9)
    assert option["time_s"] == pytest.approx(time_s, rel=1e-9)
    assert option["fits"] is (memory_gb <= 80)
    assert record["chosen"]["fits"] is True and record["chosen"]["memory_gb"] <= 80
    for o in record["options"]:       # the figure's memory parts add up to the option's memory
        assert set(o["memory_parts"]) == {"parameters", "gradients", "optimizer state",
                                          "activations"}
        assert sum(o["memory_parts"].values()) / 1e9 == pytest.approx(o["memory_gb"], rel=1e-12)
    assert record["chosen"]["time_s"] <= time_s * (1 + 1e-9)
    # Llama 3 405B against the paper's table 4: the FLOP a token by hand, 6N and attention's
    # 12·L·s·h, at both sequence lengths; the step the paper's TFLOP/s imply under that count
    n405 = _llama_params(126, 16384, 53248)
    published = record["published"]
    assert [(r["gpus"], r["seq"], r["tflops"]) for r in published] == [
        (8192, 8192, 430), (16384, 8192, 400), (16384, 131072, 380)]
    for r in published:
        attention = 12 * 126 * r["seq"] * 16384
        assert r["tokens"] == 16 * 2 ** 20                       # 16M tokens a batch
        assert r["dense_per_token"] == 6 * n405
        assert r["attention_per_token"] == pytest.approx(attention, rel=1e-12)
        flops = (6 * n405 + attention) * r["tokens"]
        assert r["paper_s"] == pytest.approx(flops / (r["gpus"] * r["tflops"] * 1e12), rel=1e-12)
        assert r["paper_6n_s"] == pytest.approx(6 * n405 * r["tokens"]
                                                / (r["gpus"] * r["tflops"] * 1e12), rel=1e-12)
        assert r["ours_s"] > r["paper_s"]                        # "it over-predicts"
    short, long_ = published[0], published[2]
    assert short["attention_per_token"] < 0.1 * short["dense_per_token"]   # "under a tenth"
    assert long_["attention_per_token"] > long_["dense_per_token"]         # "more than 6N"
    assert long_["paper_6n_s"] < 0.5 * long_["paper_s"]                    # "less than half"


def _llama_params(layers: int, h: int, ffn: int, kv: int = 1024, vocab: int = 128256) -> int:
    """A Llama 3 model's parameters by hand: q and o h × h, k and v kv × h, three SwiGLU
    matrices, two RMSNorms a layer; the embedding, the output layer and the final norm."""
    return layers * (2 * h * h + 2 * kv * h + 3 * ffn * h + 2 * h) + 2 * vocab * h + h


def _llama70b_dp32_tp2_zero3_sp() -> tuple[float, float]:
    """Llama-3-70B (80 layers, h 8192, 8 kv heads of 128, SwiGLU 28672, vocab 128,256) on
    64 GPUs as dp 32 × tp 2, ZeRO-3, SP, micro-batches of one sequence of 8,192 tokens, full
    recomputation: (GB a GPU, seconds a step) by hand, as the notebook states its model."""
    h, kv, ffn, layers, vocab = 8192, 1024, 28672, 80, 128256
    seq, batch, tp, dp = 8192, 512, 2, 32
    layer = (h * h + 2 * kv * h + h * h + 3 * ffn * h) // tp + 2 * h    # norms whole
    embed = 2 * vocab // tp * h + h                                     # in, out, final norm
    psi = layers * layer + embed                    # every row count splits over 32: no pad
    acts = layers * seq * 1 * h * 2 // tp           # each layer's input, bf16, sp-split
    memory = (2 + 2 + 12) * psi / dp + acts
    full = _llama_params(layers, h, ffn, kv, vocab)
    attention = 16 * layers * seq * h        # Q·Kᵀ and scores·V: 4·s·h a layer, 4 passes
    compute_us = (8 * full + attention) * batch * seq / 64 / (0.4 * 989e12) * 1e6
    m, act = batch // dp, seq * h * 2               # 16 micro-batches of one sequence
    nvlink = 5.0 + (1 / 2) * act / 450e3            # ring, 2 ranks: one step of S / 2
    tp_us = layers * m * 2 * 2 * 3 * nvlink         # 2 gathers + 2 scatters, fwd/bwd/recompute
    ib = lambda size: 5.0 * 31 + 31 / 32 * size / 50e3          # noqa: E731
    dp_us = layers * 3 * ib(layer * 2) + 2 * ib((embed) * 2)   # per block 2 gathers + 1 RS
    return memory / 1e9, (compute_us + tp_us + dp_us) / 1e6
