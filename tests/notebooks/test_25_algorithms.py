"""Notebook 25 (all_reduce by hand: ring, binary and double binary tree, halving-doubling;
broadcast by hand; what gloo runs; a timing sweep) executed on gloo, its saved record held
against references computed here, independently of helpers.scale.algorithms; and, without
engines, the introduction's step counts against helpers.scale.algorithms.model_terms."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from page_checks import residue
from training_notebooks import run_training_notebook

from helpers.bench.alpha_beta import fit_joint
from helpers.bench.wire import agrees
from helpers.scale.algorithms import model_terms

HAND_BUILT = ("ring", "tree", "double_tree", "halving_doubling")
NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "25_algorithms.ipynb"


def _cell(cell_id: str) -> str:
    """The source of one cell of notebook 25, its lines joined (no engines)."""
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]}
    return " ".join(cells[cell_id].split())


# The introduction's step counts, as written, and what each says for n ranks (p: the largest
# power of two <= n; a fold when n is not one).
INTRO_STEPS = {
    "ring": ("2(*n* − 1) for the ring", lambda n: 2 * (n - 1)),
    "tree": ("2⌊log₂ *n*⌋ for our binary tree", lambda n: 2 * math.floor(math.log2(n))),
    "double_tree": ("4⌊log₂ *n*⌋ for our double tree", lambda n: 4 * math.floor(math.log2(n))),
    "halving_doubling": ("2 log₂ *p* for halving-doubling on the largest power of two *p* ≤ "
                         "*n*, plus 2 when it folds",
                         lambda n: 2 * math.floor(math.log2(n)) + 2 * (n & (n - 1) != 0)),
}


@pytest.mark.docs
def test_the_introductions_step_counts_are_the_models():
    """The introduction (In detail) states each algorithm's latency steps; they must be
    model_terms' at every n."""
    intro = _cell("in-detail")
    for algorithm, (words, steps) in INTRO_STEPS.items():
        assert words in intro, f"In detail no longer says {words!r}"
        for n in range(2, 17):
            assert model_terms(algorithm, n)[0] == steps(n), (algorithm, n)


@pytest.mark.docs
def test_nccl_algo_and_proto_restrict_everywhere():
    """NCCL's docs: NCCL_ALGO / NCCL_PROTO define the algorithms / protocols NCCL may use,
    a list it still chooses from; the notebook says "restrict", never that they force."""
    for cell_id in ("c42", "c50"):
        text = _cell(cell_id)
        assert "restrict the choice" in text, cell_id
        assert not re.search(r"\bforc(e|es|ing)\b", text, re.IGNORECASE), cell_id


def _heap(r: int, n: int, mirrored: bool = False) -> tuple[int | None, list[int]]:
    """(parent, children) of rank r in the heap-ordered binary tree (mirrored: n − 1 − r)."""
    f = (lambda v: n - 1 - v) if mirrored else (lambda v: v)
    v = f(r)
    return (None if v == 0 else f((v - 1) // 2)), [f(c) for c in (2 * v + 1, 2 * v + 2) if c < n]


def _payload(name: str, size: float, n: int, r: int) -> float:
    """What rank r must send in one call, from each algorithm's definition."""
    p = 2 ** int(math.log2(n))
    if name in ("ring", "library"):
        return 2 * (n - 1) / n * size
    if name in ("tree", "double_tree"):
        trees = [False] if name == "tree" else [False, True]
        share = size / len(trees)
        return sum(share * ((_heap(r, n, m)[0] is not None) + len(_heap(r, n, m)[1]))
                   for m in trees)
    if r >= p:                        # halving-doubling: an extra rank hands its tensor over
        return size
    return 2 * (p - 1) / p * size + size * (r + p < n)


def _binomial(r: int, n: int) -> list[int]:
    return [r + 2 ** i for i in range(n.bit_length()) if r < 2 ** i and r + 2 ** i < n]


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 4])
def test_algorithms_notebook(n_ranks, tmp_path, monkeypatch):
    nb, record = run_training_notebook("25_algorithms", n_ranks, tmp_path, monkeypatch)
    # issue 50: no engine's stderr block, deprecation warning or machine path on the page
    assert not residue(nb, "25_algorithms"), residue(nb, "25_algorithms")
    n, numel, S = n_ranks, record["numel"], record["S"]
    assert numel % n == 0 and numel % 2 == 0
    reference = sum(torch.arange(numel, dtype=torch.float64) + 100 * r for r in range(n))
    p = 2 ** int(math.log2(n))
    for r, got in enumerate(record["ranks"]):
        # every hand-built all_reduce gave the sum on every rank
        assert sorted(got["results"]) == sorted(HAND_BUILT)
        for name in HAND_BUILT:
            assert torch.equal(torch.tensor(got["results"][name], dtype=torch.float64),
                               reference), (name, r)
        # each rank's log: its own sends, of the sizes the algorithm prescribes
        logs = got["logs"]
        assert all(e[1] == r for name in HAND_BUILT for e in logs[name])
        ring = logs["ring"]
        assert len(ring) == 2 * (n - 1)
        assert all(e[2] == (r + 1) % n and e[4] - e[3] == numel // n for e in ring)
        parent, children = _heap(r, n)
        assert sorted(e[2] for e in logs["tree"]) == sorted(
            ([parent] if parent is not None else []) + children)
        assert all(e[4] - e[3] == numel for e in logs["tree"])
        hd = logs["halving_doubling"]
        if p == n:              # no fold: partners r XOR p/2, …, r XOR 1, then back again
            partners = [r ^ (p >> (k + 1)) for k in range(int(math.log2(p)))]
            halves = [numel >> (k + 1) for k in range(len(partners))]
            assert [e[2] for e in hd] == partners + partners[::-1]
            assert [e[4] - e[3] for e in hd] == halves + halves[::-1]
        for name in HAND_BUILT:
            assert sum(e[4] - e[3] for e in logs[name]) == _payload(name, numel, n, r), name
        # measured bytes: the payload plus gloo's headers, never less
        for name, sent in got["wire"].items():
            model = _payload(name, S, n, r)
            assert sent >= model and agrees(sent, model, 2 * n, n), (name, r, sent, model)
        # broadcast: every rank got rank 0's tensor; our binomial tree writes what gloo's does
        assert all(got["bcast_ok"].values())
        w = got["bcast_wire"]
        assert w["binomial"] >= S * len(_binomial(r, n)) and w["chain"] >= S * (r < n - 1)
        assert abs(w["library"] - w["binomial"]) <= 48 * n, w

    # gloo's broadcast is the binomial tree: S + headers to each child, headers only else
    bmap = record["broadcast_map"]
    for r in range(n):
        for q in range(n):
            assert (bmap[r][q] >= S) == (q in _binomial(r, n)), (r, q, bmap)
    if n == 4:
        assert [sum(row) // S for row in bmap] == [2, 1, 0, 0]
    # gloo's all_reduce is a ring to rank r - 1; all_gather to rank r + 1
    for r in range(n):
        row = record["gloo_maps"]["all_reduce"][r]
        assert row[(r - 1) % n] >= 2 * (n - 1) / n * S
        assert sum(row) - row[(r - 1) % n] < 0.01 * S
        assert record["gloo_maps"]["all_gather"][r][(r + 1) % n] >= (n - 1) / n * S

    # the sweep: both world sizes where there are 4 ranks, positive times for every point
    timings = record["timings"]
    assert sorted(map(int, timings)) == ([2, n] if n >= 4 else [n])
    for t in timings.values():
        assert len(t["sizes"]) == 5 and t["sizes"] == sorted(t["sizes"])
        assert all(s % (4 * n) == 0 for s in t["sizes"]) and 64 <= t["sizes"][0] < 128
        assert 4 << 20 <= t["sizes"][-1] < 5 << 20
        for name in HAND_BUILT + ("library",):
            assert len(t[name]) == 5 and all(x > 0 for x in t[name])
    # the fits: one per world size, its error the ring's fit on the record's own points of
    # that size; predictions (α, β) only where that error is within the notebook's bound
    bound = record["fit_bound"]
    assert bound == 0.5
    printed = "".join(o.get("text", "") for c in nb.cells if c.get("id") == "c39"
                      for o in c.get("outputs", []))
    predicting = {}
    for m, t in timings.items():
        ring_rows = [{"collective": "all_reduce", "world_size": int(m), "bytes": size,
                      "time_min_us": x} for size, x in zip(t["sizes"], t["ring"])]
        try:
            expected = fit_joint(ring_rows)
        except ValueError:
            assert m not in record["fits"] and f"{m} ranks: no α-β fit" in printed
            continue
        fit = record["fits"][m]
        assert fit["error"] == pytest.approx(expected.error)
        assert fit["alpha_us"] == pytest.approx(expected.alpha_us) and fit["beta_gbps"] > 0
        if fit["error"] <= bound:
            predicting[int(m)] = (fit["alpha_us"], fit["beta_gbps"])
    assert printed.count("too poor on this run to predict") == len(record["fits"]) - len(
        predicting)
    # the crossover table: six pairs per world size; predictions from α, β and the terms
    rows = record["crossovers"]
    assert len(rows) == 6 * len(timings)
    for row in rows:
        m = row["world_size"]
        depth = m.bit_length() - 1
        pm = 2 ** int(math.log2(m))
        down = {2: 1, 3: 2, 4: 3}[m]         # Σ over levels of the most children of a node
        terms = {"ring": (2 * (m - 1), 2 * (m - 1) / m), "tree": (2 * depth, depth + down),
                 "double_tree": (4 * depth, depth + down),
                 "halving_doubling": (2 * int(math.log2(pm)) + 2 * (pm < m),
                                      2 * (pm - 1) / pm + 2 * (pm < m))}
        a, b = row["pair"].split(" / ")
        da, db = terms[a][0] - terms[b][0], terms[a][1] - terms[b][1]
        assert row["fitted"] == (m in predicting)
        if m in predicting and da * db < 0:
            alpha, beta = predicting[m]
            assert row["predicted"] == pytest.approx(-alpha * beta * 1e3 * da / db)
        else:
            assert row["predicted"] is None
        t = timings[str(m)]
        faster = [a if x < y else b for x, y in zip(t[a], t[b])]
        assert row["faster"] == faster
        change = next((i for i in range(1, 5) if faster[i] != faster[0]), None)
        assert row["measured"] == (None if change is None
                                   else [t["sizes"][change - 1], t["sizes"][change]])
    assert "power-of-two" in record["odd_error"]
    ex = record["exercise"]
    assert ex["measured"] == ex["prediction"] == [_payload("halving_doubling", numel, n, r)
                                                  for r in range(n)]
