"""The training table of `make bench`: the taught code it runs, the step breakdown, the
runner end to end (--quick, 2 ranks: a check that it runs, not figures), and the saved
table the notebooks quote."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.pairs import all_pairs
from helpers.bench import quote
from helpers.bench.step_profile import MARK, breakdown, intersect, subtract, union
from helpers.bench.taught import definitions, taught

REPO = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ taught code

def test_definitions_keep_only_imports_defs_and_classes():
    body = definitions("16_zero_fsdp").body
    assert body and all(isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                       ast.ClassDef)) for n in body)
    names = [n.name for n in body if hasattr(n, "name")]
    assert len(names) == len(set(names))                 # each name once
    assert {"Zero3MLP", "ShardedLinear", "gather_rows", "scatter_grad"} <= set(names)


def test_a_pitfalls_redefinition_does_not_replace_the_taught_one():
    """16 redefines scatter_grad to skip a call (its pitfall): the bench keeps the first."""
    kept = next(n for n in definitions("16_zero_fsdp").body
                if getattr(n, "name", "") == "scatter_grad")
    source = ast.unparse(kept)
    assert "reduce_scatter_single" in source and "scatters" not in source


def test_taught_runs_the_definitions_over_the_given_globals(one_rank_group):
    import torch

    ns = taught("15_data_parallel", needs=["make_buckets", "train_overlapped"],
                device=torch.device("cpu"))
    assert ns["rank"] == 0 and ns["world_size"] == 1
    params = [torch.nn.Parameter(torch.zeros(n)) for n in (10, 20, 30)]
    buckets = ns["make_buckets"](params, 25 * 4)          # backward order, ≤ 100 B each
    assert [[p.numel() for p in b] for b in buckets] == [[30], [20], [10]]


def test_taught_names_a_missing_definition(one_rank_group):
    with pytest.raises(KeyError, match="15_data_parallel no longer defines .*'no_such'"):
        taught("15_data_parallel", needs=["no_such"])
    with pytest.raises(FileNotFoundError, match="no notebook 99_none"):
        taught("99_none")


# ------------------------------------------------------------------ the breakdown

def test_span_arithmetic():
    assert union([(5, 7), (0, 2), (1, 3), (7, 9)]) == [(0, 3), (5, 9)]
    assert subtract([(0, 10)], [(2, 3), (5, 12)]) == [(0, 2), (3, 5)]
    assert intersect([(0, 4), (6, 10)], [(3, 7)]) == [(3, 4), (6, 7)]


def test_breakdown_splits_a_step_into_parts_that_add_up():
    """Thread 1 computes 0–10 ms (a matmul with a child op), then an autograd node
    (12–14 ms) holds a matmul and a c10d launch, then a Python autograd Function
    (15–18 ms) blocks on a wait; gloo works on thread 2 from 5 to 20 ms; an isend's span
    on thread 1 lasts from 19 to 23 ms while it adds (20–21 ms); the step lasts 25 ms."""
    ms = 1e3
    events = [(MARK, 1, (0, 25 * ms)), ("aten::mm", 1, (0, 10 * ms)),
              ("aten::resolve_conj", 1, (1 * ms, 1.1 * ms)),   # inside the mm: counted once
              ("AddmmBackward0", 1, (12 * ms, 14 * ms)),       # a node: its aten ops count
              ("aten::mm", 1, (12 * ms, 12.8 * ms)), ("aten::mm", 1, (13.6 * ms, 14 * ms)),
              ("c10d::allreduce_", 1, (13 * ms, 13.5 * ms)),
              ("ShardedLinear", 1, (15 * ms, 18 * ms)),         # Python, blocked: not compute
              ("gloo:all_reduce", 2, (5 * ms, 20 * ms)),
              ("gloo:send", 1, (19 * ms, 23 * ms)),       # an isend, in flight on thread 1
              ("aten::add_", 1, (20 * ms, 21 * ms)),      # ... while it computes on
              ("aten::mm", 3, (21 * ms, 24 * ms))]        # another thread's op: not ours
    parts = breakdown(events)
    assert parts["compute"] == pytest.approx(12.2)        # 10 + 0.8 + 0.4 + 1
    assert parts["overlapped"] == pytest.approx(7.2)      # 5–10, 12–12.8, 13.6–14, 20–21
    assert parts["communication"] == pytest.approx(10.8)  # 10–12, 12.8–13.6, 14–20, 21–23
    assert parts["waiting"] == pytest.approx(2.0)
    assert sum(parts[p] for p in quote.PARTS) == pytest.approx(parts["step"])


# ------------------------------------------------------------------ agreement

def zero3_agreement(rank, world_size, scale):
    """ZeRO-3's agreement check at the bench's width, on the notebook's definitions; with
    scale != 1 the hand side's gradients are `scale` times the mean (a missing 1/n)."""
    import torch

    from benchmarks.pairs import Context
    from benchmarks.pairs import p16_zero3 as z
    from helpers.bench.taught import taught

    torch.set_num_threads(1)
    ctx = Context(rank, world_size, torch.device("cpu"))
    ns = taught("16_zero_fsdp", needs=z.NEEDS, device=ctx.device, zero_group=None)
    honest = ns["scatter_grad"]
    ns["scatter_grad"] = lambda full: honest(full) * scale   # backward looks it up in ns
    return z.agreement(ns, ctx)


def run_zero3_agreement(world_size: int, scale: float) -> list:
    from helpers.runtime.disposable import run_disposable

    ranks = run_disposable(zero3_agreement, world_size, {"scale": scale},
                           timeout_s=60, limit_s=240)
    assert all(r.error is None and r.returncode == 0 for r in ranks), [r.summary() for r in ranks]
    return [r.result for r in ranks]


@pytest.mark.parametrize("world_size", [2, 4])
def test_zero3_sides_agree_at_full_width(world_size):
    """make bench stopped on another machine: float32 Adam steps 1.8e-4 apart. The float64
    check passes at the bench's width, at two world sizes."""
    assert run_zero3_agreement(world_size, scale=1) == [""] * world_size


def test_zero3_agreement_catches_gradients_n_times_too_large():
    for found in run_zero3_agreement(2, scale=2):
        assert "0.weight.grad: max |by hand − FSDP2|" in found


# ------------------------------------------------------------------ the runner

@pytest.fixture(scope="module")
def quick_table(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "training_bench.py"),
                           "--quick", "--ranks", "2", "--out", str(out), "--timeout", "600"],
                          cwd=REPO, capture_output=True, text=True, timeout=660)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "training.json").read_text())["training"]


def test_every_pair_runs_and_both_sides_agree(quick_table):
    rows = {r["name"]: r for r in quick_table["pairs"]}
    assert list(rows) == [p.name for p in all_pairs()]
    assert quick_table["world_size"] == 2 and quick_table["quick"]
    for row in rows.values():
        assert row["agree"] == "same results"
        assert row["ratio"] > 0 and row["repeats"] >= 2 and row["step_ms_min"]["hand"] > 0
        for side in ("hand", "torch"):
            parts = row["breakdown"][side]
            assert sum(parts[p] for p in quote.PARTS) == pytest.approx(parts["step"],
                                                                        rel=1e-6), row


def test_the_runner_refuses_one_rank():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "training_bench.py"),
                           "--ranks", "1"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "--ranks must be at least 2" in done.stderr


# ------------------------------------------------------------------ what the notebooks quote

def test_the_saved_table_has_every_pair_at_full_size():
    table = json.loads(quote.SAVED.read_text())["training"]
    assert not table["quick"] and table["world_size"] == 4
    assert [r["name"] for r in table["pairs"]] == [p.name for p in all_pairs()]


@pytest.mark.docs
def test_each_pairs_notebook_quotes_its_row():
    for pair in all_pairs():
        cells = json.loads((REPO / "notebooks" / f"{pair.notebook}.ipynb").read_text())["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        assert any(f'show_training_pair("{pair.name}")' in c for c in code), pair.name


def test_show_training_pair_prints_the_saved_row(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TUTORIAL_BUILD_DIR", str(tmp_path))   # no run on this machine
    row = json.loads(quote.SAVED.read_text())["training"]["pairs"][0]
    quote.show_training_pair(row["name"])
    text = capsys.readouterr().out
    assert f"×{row['ratio']:.3f}" in text and "saved with the repository" in text
    quote.show_training_pair("no such pair")
    assert "not measured yet" in capsys.readouterr().out
