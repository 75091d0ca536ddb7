"""Notebook 22 (expert parallelism: a mixture of experts over all_to_all) executed on gloo,
its results checked against a mixture of experts routed and run here, in the test's
process, with its own routing code (only the layer's weights come from the helpers)."""
from __future__ import annotations

import math

import pytest
import torch
from animation_checks import only_animation
from notebook_runner import notebook_text, png_count
from training_notebooks import diff, run_training_notebook

from helpers.bench.wire import agrees
from helpers.transformer.block import make_tokens
from helpers.transformer.experts import make_moe

TOL = 1e-12
ROW_BYTES = 48 * 8


def _route(logits: torch.Tensor, E: int, cf: float, k: int):
    """Top-k of the softmax, gates renormalised; capacity ceil(cf·T·k/E) per expert, first
    choices before second ones, each in token order. (experts, gates, kept)"""
    probs = torch.softmax(logits, dim=-1)
    top, experts = probs.topk(k, dim=-1)
    gates = top / top.sum(-1, keepdim=True)
    cap = math.ceil(round(cf * len(logits) * k / E, 9))
    kept, used = torch.zeros_like(experts, dtype=torch.bool), [0] * E
    for slot in range(k):
        for t in range(len(logits)):
            e = int(experts[t, slot])
            if used[e] < cap:
                used[e] += 1
                kept[t, slot] = True
    return experts, gates, kept, cap


def _independent(n: int, cf: float, k: int, per_rank: int) -> dict:
    """Route each rank's 48/n tokens, apply every expert token by token, take the MSE over
    all tokens, and backward: what every rank must match."""
    E = n * per_rank
    moe = make_moe(E)
    X, Y = (t.reshape(-1, 48) for t in make_tokens())
    X = X.clone().requires_grad_(True)
    share = 48 // n
    outs, routes = [], []
    for r in range(n):
        x = X[r * share:(r + 1) * share]
        experts, gates, kept, cap = _route(moe.router(x), E, cf, k)
        routes.append((experts, kept, cap))
        rows = []
        for t in range(share):
            y = x[t]
            for slot in range(k):
                if kept[t, slot]:
                    y = y + gates[t, slot] * moe.experts[int(experts[t, slot])](x[t])
            rows.append(y)
        outs.append(torch.stack(rows))
    out = torch.cat(outs)
    loss = ((out - Y) ** 2).mean()
    loss.backward()
    return {"moe": moe, "output": out.detach(), "input_grad": X.grad, "routes": routes,
            "loss": loss.item(),
            "grads": {name: p.grad for name, p in moe.named_parameters()}}


def _counts(route, E: int) -> list[int]:
    experts, kept, _ = route
    return [int(((experts == e) & kept).sum()) for e in range(E)]


def _dropped(route) -> list[list[int]]:
    return [[t, s] for t, s in (~route[1]).nonzero().tolist()]


def _gap(got, expected: torch.Tensor) -> float:
    """diff(), or for a tensor saved as its summary (records.py: a large one), the largest
    gap of its norm, its sum and its first values."""
    if not isinstance(got, dict):
        return diff(got, expected)
    assert got["shape"] == list(expected.shape)
    flat = expected.flatten()
    head = torch.tensor(got["head"], dtype=expected.dtype)
    return max(abs(got["norm"] - expected.norm().item()), abs(got["sum"] - flat.sum().item()),
               (head - flat[:len(head)]).abs().max().item())


def _bytes(row: dict, calls: int, model: float, n: int) -> None:
    assert row["calls"] == calls, row
    assert row["model"] == pytest.approx(model), row
    assert row["measured"] is not None and agrees(row["measured"], model, max(calls, 1), n), row


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 4])
def test_expert_parallel_notebook(n_ranks, tmp_path, monkeypatch):
    nb, record = run_training_notebook("22_expert_parallel", n_ranks, tmp_path, monkeypatch)
    n, k, per_rank = n_ranks, record["top_k"], record["experts_per_rank"]
    cf_run, cf_tight = record["capacity_factors"]
    assert (k, per_rank, cf_run, cf_tight) == (2, 2, 1.25, 0.75)
    E, share = n * per_rank, 48 // n
    ref = _independent(n, cf_run, k, per_rank)
    tight = _independent(n, cf_tight, k, per_rank)
    counts = [_counts(route, E) for route in ref["routes"]]
    to_rank = [[sum(c[s * per_rank:(s + 1) * per_rank]) for s in range(n)] for c in counts]
    ranks = record["ranks"]
    for r, got in enumerate(ranks):
        mine = slice(r * share, (r + 1) * share)
        experts, kept, cap = ref["routes"][r]
        assert got["cap"] == cap
        assert got["send_counts"] == counts[r]
        assert got["dropped"] == _dropped(ref["routes"][r])
        # the rows leave sorted by expert, each (token, slot) a kept assignment of this rank
        sent = list(zip(got["sent_token"], got["sent_slot"]))
        assert sorted(sent) == sorted(map(tuple, kept.nonzero().tolist()))
        assert got["sent_expert"] == [int(experts[t, s]) for t, s in sent]
        assert got["sent_expert"] == sorted(got["sent_expert"])
        # counts exchanged: from each rank, its rows for each of my experts
        assert got["recv_counts"] == [counts[s][e] for s in range(n)
                                      for e in range(r * per_rank, (r + 1) * per_rank)]
        assert got["input_splits"] == to_rank[r]
        assert got["output_splits"] == [to_rank[s][r] for s in range(n)]
        assert diff(got["y"], ref["output"][mine]) < TOL
        # backward: by hand and torch's all_to_all_single_autograd
        for name in ("by hand", "torch"):
            g = got["grads"][name]
            assert diff(g["output"], ref["output"][mine]) < TOL
            assert diff(g["input_grad"], ref["input_grad"][mine]) < TOL
            assert diff(g["router_grad"], ref["grads"]["router.weight"]) < TOL
            own = [key for key in g if key.startswith("experts.")]
            assert sorted({int(key.split(".")[1]) for key in own}) == \
                list(range(r * per_rank, (r + 1) * per_rank))
            assert len(own) == 4 * per_rank
            for key in own:
                assert _gap(g[key], ref["grads"][key]) < TOL, (name, key)
        # the two capacity factors: counts, drops and the rows' bytes
        runs = got["load_runs"]
        assert [run["cf"] for run in runs] == [cf_run, cf_tight]
        for run, routes in zip(runs, (ref["routes"], tight["routes"])):
            assert run["capacity"] == routes[r][2]
            assert run["send_counts"] == _counts(routes[r], E)
            assert run["dropped"] == _dropped(routes[r])
            mine_sent = run["input_splits"]
            model = sum(mine_sent[s] for s in range(n) if s != r) * ROW_BYTES
            assert agrees(run["measured"], model, 1, n), (run, model)
        assert runs[1]["capacity"] < runs[0]["capacity"]
        assert len(runs[1]["dropped"]) >= len(runs[0]["dropped"])
        # bytes: the model for uneven splits = rows for the other ranks; gloo's headers on top
        rows_out = sum(to_rank[r][s] for s in range(n) if s != r) * ROW_BYTES
        rows_back = sum(to_rank[s][r] for s in range(n) if s != r) * ROW_BYTES
        count_model = (n - 1) * per_rank * 8
        wire = {row["call"]: row for row in got["wire_rows"] + got["step_rows"]
                + got["torch_rows"]}
        _bytes(wire["counts"], 1, count_model, n)
        assert wire["counts"]["size"] == E * 8
        _bytes(wire["rows to experts"], 1, rows_out, n)
        _bytes(wire["results back"], 1, rows_back, n)
        assert wire["rows to experts"]["size"] == sum(to_rank[r]) * ROW_BYTES
        assert wire["rows to experts"]["even_model"] == pytest.approx(
            (n - 1) / n * sum(to_rank[r]) * ROW_BYTES)
        _bytes(wire["step forward"], 3, count_model + rows_out + rows_back, n)
        _bytes(wire["step backward"], 2, rows_out + rows_back, n)
        # torch's functional collectives pass by the counter: only the counts' call is seen
        _bytes(wire["torch forward"], 1, count_model + rows_out + rows_back, n)
        assert wire["torch backward"]["calls"] == 0
        assert agrees(wire["torch backward"]["measured"], rows_out + rows_back, 2, n)
        for phase in ("forward", "backward"):   # torch's function writes what ours writes
            assert wire[f"torch {phase}"]["measured"] == wire[f"step {phase}"]["measured"]
        # the even model, (n − 1)/n · S, is not what an uneven exchange sends
        assert any(wire[c]["even_model"] != pytest.approx(wire[c]["model"])
                   for c in ("rows to experts", "results back"))
    # each rank's loss share (the loss figure): they add up to the single-process loss
    for name in ("by hand", "torch"):
        shares = [got["grads"][name]["loss"] for got in record["ranks"]]
        assert sum(shares) == pytest.approx(ref["loss"], rel=1e-12), name
    text = notebook_text(nb)
    assert "killed by SIGABRT" in text
    assert "1.0, nan" in text        # the row nobody wrote keeps its NaN
    anim = only_animation(nb, "at_experts")
    last = anim["last"]
    assert last["home"] == sum(map(sum, counts)) and last["at_experts"] == [0] * E
    assert last["dropped"] == sum(len(_dropped(route)) for route in ref["routes"])
    assert last["labels"] == [f"E{e} · {sum(c[e] for c in counts)} rows" for e in range(E)]
    assert anim["frames"] == 9
    assert png_count(nb) >= 6           # the scheme and the five figures of this run
