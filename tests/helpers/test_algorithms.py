"""helpers.scale.algorithms: the shapes, the model and the crossover table (no engines)."""
from __future__ import annotations

import pytest

from helpers.scale import algorithms as alg


def test_tree_nodes_form_one_tree_and_the_mirror_swaps_leaves():
    for n in range(1, 9):
        for mirrored in (False, True):
            nodes = [alg.tree_node(r, n, mirrored) for r in range(n)]
            roots = [r for r, node in enumerate(nodes) if node.parent is None]
            assert roots == [n - 1 if mirrored else 0]
            for r, node in enumerate(nodes):       # parent and children agree
                assert all(nodes[c].parent == r for c in node.children)
                assert node.depth <= node.height
    # at 4 ranks: 0 → {1, 2}, 1 → {3}; mirrored 3 → {2, 1}, 2 → {0}
    assert alg.tree_node(0, 4).children == (1, 2) and alg.tree_node(1, 4).children == (3,)
    assert alg.tree_node(3, 4, mirrored=True).children == (2, 1)
    with pytest.raises(ValueError, match="not in a group of 4"):
        alg.tree_node(4, 4)


def test_halving_doubling_needs_a_power_of_two():
    assert alg.partners(0, 4) == [2, 1] and alg.partners(3, 8) == [7, 1, 2]
    with pytest.raises(ValueError, match="power-of-two number of ranks, not 3.*1 extra"):
        alg.partners(0, 3)
    assert [alg.fold_size(n) for n in (1, 2, 3, 4, 5, 8)] == [1, 2, 2, 4, 4, 8]


def test_binomial_children_and_unit():
    assert [alg.binomial_children(r, 4) for r in range(4)] == [[1, 2], [3], [], []]
    assert [alg.binomial_children(r, 3) for r in range(3)] == [[1, 2], [], []]
    assert [alg.unit(n) for n in (2, 3, 4)] == [2, 6, 12]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_model_bytes(n):
    S = 1200.0
    sent = {a: [alg.model_sent(a, S, n, r) for r in range(n)] for a in alg.HAND_BUILT}
    assert sent["ring"] == [2 * (n - 1) / n * S] * n
    # every tree edge carries S up and S down; the double tree, half of that on each tree
    assert sum(sent["tree"]) == 2 * (n - 1) * S
    assert sum(sent["double_tree"]) == pytest.approx(2 * (n - 1) * S)
    if n in (2, 4, 8):
        assert sent["halving_doubling"] == sent["ring"]
    assert sum(alg.model_sent("binomial", S, n, r) for r in range(n)) == (n - 1) * S
    with pytest.raises(ValueError, match="unknown algorithm"):
        alg.model_sent("butterfly", S, n, 0)


def test_model_terms_are_alpha_beta_terms_and_crossovers():
    from helpers.bench.alpha_beta import terms
    steps = {a: [alg.model_terms(a, n)[0] for n in (2, 3, 4, 8)] for a in alg.HAND_BUILT}
    assert steps["ring"] == [2, 4, 6, 14]
    assert steps["halving_doubling"] == [2, 4, 4, 6]
    assert steps["tree"] == [2, 2, 4, 6] and steps["double_tree"] == [4, 4, 8, 12]
    assert alg.model_terms("tree", 4)[1] == 5          # depth 2 up, then 2 + 1 down
    assert alg.model_terms("halving_doubling", 3)[1] == 1 + 2     # the fold: 2 S more
    assert alg.model_terms("ring", 5) == terms("all_reduce", 5, "ring")
    with pytest.raises(ValueError, match="no α-β model for 'library'"):
        alg.model_terms("library", 4)
    # ring vs tree at 4 ranks: tree ahead by 2 steps, behind by 3.5 S: S* = 2 α β / 3.5
    assert alg.predicted_crossover("ring", "tree", 4, 10.0, 1.0) == pytest.approx(
        10.0 * 1e3 * 2 / 3.5)
    assert alg.predicted_crossover("ring", "halving_doubling", 4, 10.0, 1.0) is None
    assert alg.measured_crossover([1, 2, 3], [5, 1, 1], [2, 2, 2]) == (1, 2)
    assert alg.measured_crossover([1, 2, 3], [1, 1, 1], [2, 2, 2]) is None


def test_crossover_table_rows():
    timings = {4: {"sizes": [8, 64, 512], "ring": [30, 40, 50], "tree": [10, 45, 200],
                   "double_tree": [15, 50, 210], "halving_doubling": [20, 30, 45]}}
    rows = alg.crossover_table(timings, {4: (5.0, 1.0)})
    assert [r["pair"] for r in rows] == [
        "ring / tree", "ring / double_tree", "ring / halving_doubling",
        "tree / double_tree", "tree / halving_doubling", "double_tree / halving_doubling"]
    assert rows[0]["measured"] == [8, 64] and rows[0]["faster"] == ["tree", "ring", "ring"]
    assert rows[2]["measured"] is None
    assert rows[0]["fitted"] and rows[0]["predicted"] == pytest.approx(
        alg.predicted_crossover("ring", "tree", 4, 5.0, 1.0))
    text = alg.crossover_text(rows, {})
    assert "none in the sweep" in text and "T R R" in text
    unfitted = alg.crossover_table(timings, {2: (5.0, 1.0)})      # a fit of another size only
    assert all(r["predicted"] is None and not r["fitted"] for r in unfitted)
    assert "too poor" in alg.crossover_text(unfitted, {4: "too poor"})


def test_interleaved_us_times_every_call_in_every_round():
    order = []
    times = alg.interleaved_us({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                               lambda: order.append("|"), batches=3, iters=2)
    assert order == ["a", "b"] + ["|", "a", "a", "|", "b", "b"] * 3
    assert all(0 < fastest <= slowest for fastest, slowest in times.values())
    assert [alg.iters_for(s) for s in (64, 32 << 10, 33 << 10, 4 << 20)] == [2, 2, 1, 1]
    with pytest.raises(ValueError, match="batches >= 1"):
        alg.interleaved_us({}, lambda: None, batches=0)
