"""What the tests of notebooks 14-19 share: executing a training notebook with its one
saved record (helpers.records.save_run), every rank's verdicts, and the references the
results are held against (computed here, independently of the notebooks' helpers)."""
from __future__ import annotations

import numpy as np
import torch
from notebook_runner import execute_with_results
from reports import assert_all_pass, exercise

from helpers.training.toy import make_data

RANKS = [2, 3, 4]


def assert_every_rank_checked(nb, n: int) -> None:
    """Every Report the notebook showed is all ✓, each rank has a ✓ verdict, and the
    exercise's grade (a prediction filled in by the test's runner) is ✓ on every rank."""
    graded = exercise(assert_all_pass(nb, n))
    assert graded.oks and all(ok is True for ok in graded.oks), graded.lines()


def the_run(record: dict, stem: str, n: int) -> None:
    """A training run's record: its kind, cluster and ranks."""
    assert record["kind"] == stem
    assert record["backend"] == "gloo" and record["world_size"] == n
    assert [r["rank"] for r in record["ranks"]] == list(range(n))
    assert all(r["device"] == "cpu" for r in record["ranks"])


def run_training_notebook(stem: str, n_ranks: int, tmp_path, monkeypatch) -> tuple:
    """Execute the notebook; (the executed notebook, its one record), both checked."""
    nb, [record] = execute_with_results(stem, tmp_path, monkeypatch, n_ranks=n_ranks)
    assert_every_rank_checked(nb, n_ranks)
    the_run(record, stem, n_ranks)
    return nb, record


def diff(got, expected: torch.Tensor) -> float:
    """The largest gap between saved values and a reference tensor of the same shape."""
    got = torch.tensor(got, dtype=expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    return (got - expected).abs().max().item()


def max_diff(state: dict, reference: dict) -> float:
    """The largest gap between saved parameters and reference ones, over every tensor."""
    assert set(state) == set(reference)
    return max(float(np.max(np.abs(np.asarray(state[k], dtype=float) - reference[k].numpy())))
               if reference[k].numel() else 0.0 for k in state)


def train_full_batch(model, steps, lr, optimizer):
    """One process, the whole batch: what every parallel version must end with."""
    X, Y = make_data()
    opt = (torch.optim.SGD if optimizer == "sgd" else torch.optim.Adam)(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        ((model(X) - Y) ** 2).mean().backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.named_parameters()}
