"""Notebook 26 (checkpoints and failures) executed on gloo: saved at n ranks, a rank killed,
reloaded at another world size, torchrun restarts; its record checked against references
computed here, in the test's process (one process, the whole batch, Adam)."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import torch
from notebook_runner import execute_with_results, output_text, png_count
from page_checks import residue
from reports import exercise, shown_reports

from helpers.paths import build_dir
from helpers.training.toy import make_data, make_mlp

STEPS, SAVE_AT, KILL_AT, LR, ROWS = 8, 3, 5, 0.05, 50
SHAPES = {"0.weight": (50, 8), "0.bias": (50,), "2.weight": (4, 50), "2.bias": (4,)}


def _adam_run(fresh_adam_at: int | None = None):
    """Losses of 8 Adam steps on the whole batch, and the model + Adam state after 3."""
    X, Y = make_data()
    model = make_mlp(d_hidden=ROWS)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    losses, at_save = [], None
    for step in range(STEPS):
        if step == SAVE_AT:
            names = [n for n, _ in model.named_parameters()]
            at_save = {f"model/{k}": v.clone() for k, v in model.state_dict().items()}
            for i, s in opt.state_dict()["state"].items():
                for key, value in s.items():
                    at_save[f"optim/{names[i]}/{key}"] = torch.as_tensor(value).clone()
        if step == fresh_adam_at:
            opt = torch.optim.Adam(model.parameters(), lr=LR)
        opt.zero_grad()
        loss = ((model(X) - Y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, at_save


def _rows(rank: int, n: int, rows: int) -> list[int]:
    size = -(-rows // n)
    return [min(rank * size, rows), min((rank + 1) * size, rows)]


CRASH = "cell-10b"          # the cell that runs the loop in which a rank dies


def _no_cross_outside_the_crash(nb) -> None:
    """A ✗ only where the engine died (the diagnosis of the cell that kills it)."""
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("id") != CRASH:
            assert "✗" not in output_text(cell), (cell.get("id"), output_text(cell)[:500])


@pytest.mark.notebook
@pytest.mark.parametrize("n_ranks", [2, 4])
def test_checkpoints_failures_notebook(n_ranks, tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_BUILD_DIR", str(tmp_path / "build"))  # its build/tmp alone:
    left_before = set((build_dir() / "tmp").glob("26_checkpoints-*"))   # [2] and [4] at once
    elastic_before = set(Path(tempfile.gettempdir()).glob("torchelastic_*"))
    nb, [record] = execute_with_results("26_checkpoints_failures", tmp_path, monkeypatch,
                                        n_ranks=n_ranks)
    # torchrun kept its logs in the notebook's folder (--log-dir), not in a new temp folder
    assert set(Path(tempfile.gettempdir()).glob("torchelastic_*")) <= elastic_before
    shown = output_text(nb.cells[[c.get("id") for c in nb.cells].index("cell-23b")])
    assert "torchrun: failed (exitcode: 1) local_rank" in shown, shown
    assert not re.search(r"/work/|/tmp/|\.venv|site-packages|^[WEIF]\d{4} ", shown, re.M), shown
    n, m = n_ranks, 4 if n_ranks == 2 else 2
    reports = shown_reports(nb)
    assert len(reports) >= 5 and all(all(ok is True for ok in s.oks) for s in reports), \
        [(s.title, s.lines()) for s in reports]
    graded = exercise(reports)
    assert all(ok is True for ok in graded.oks)
    assert [line.split("measured ")[1] for line in graded.lines()] == [
        str(got["shard_bytes"]) for got in record["ranks"]]
    _no_cross_outside_the_crash(nb)
    crash = nb.cells[[c.get("id") for c in nb.cells].index(CRASH)]
    # the line a reader reads when a rank dies: the message is the behaviour
    assert "✗ rank {}: its engine process died".format(n_ranks - 1) in output_text(crash)
    # issue 50: the death is told by rank, without ipyparallel's raw error (its task id),
    # and no output anywhere shows a deprecation warning, a machine path or a stderr block
    assert not any(o.get("output_type") == "error" for c in nb.cells
                   for o in c.get("outputs", [])), "a cell raised"
    assert not residue(nb, "26_checkpoints_failures"), residue(nb, "26_checkpoints_failures")
    assert record["kind"] == "26_checkpoints_failures" and record["backend"] == "gloo"
    assert record["saved_world_size"] == n and record["world_size"] == m
    assert [r["rank"] for r in record["ranks"]] == list(range(m))

    reference, at_save = _adam_run()
    assert record["reference"] == pytest.approx(reference, abs=1e-12)
    assert record["interrupted"] == pytest.approx(reference[:KILL_AT], abs=1e-12)
    # the steps the restart ran again: those both runs finished (run 1 before the death,
    # the restart after loading), checked here against the reference's own steps
    interrupted, resumed = record["interrupted"], record["ranks"][0]["resumed"]
    first_step = STEPS - len(resumed)
    assert first_step == SAVE_AT and len(interrupted) == KILL_AT
    redone = set(range(first_step, STEPS)) & set(range(len(interrupted)))
    assert all(abs(interrupted[i] - resumed[i - first_step]) < 1e-12 for i in redone)
    assert record["lost"] == {"with the checkpoint of step 3": len(redone),
                              "without a checkpoint": len(interrupted)}
    survivors = record["survivors"]
    assert [s["rank"] for s in survivors] == list(range(n - 1))    # the last rank died
    for s in survivors:
        assert s["losses"] == pytest.approx(reference[:KILL_AT], abs=1e-12)
        assert any(what in s["failure"] for what in ("Connection reset by peer",
                                                     "Connection closed by peer",
                                                     "Timed out")), s["failure"]
        assert 0 < s["failed_after"] < 5 + 10                        # timeout_s=5, margin 10 s
    assert record["left_after_stop"] == []
    for s in record["saved"]:
        r = s["rank"]
        assert s["losses"] == pytest.approx(reference[:SAVE_AT], abs=1e-12)
        assert s["rows_before"] == {k: _rows(r, n, v[0]) for k, v in SHAPES.items()}
        assert set(s["saved_state"]) == set(at_save)       # Adam keyed by parameter name
        for k, v in at_save.items():
            got = torch.tensor(s["saved_state"][k], dtype=torch.float64)
            assert (got - v.double()).abs().max().item() < 1e-12, k
        held = sum((b - a) * (v[1] if len(v) > 1 else 1) for (a, b), v in
                   ((s["rows_before"][k], v) for k, v in SHAPES.items()))
        assert s["shard_bytes"] == 3 * 8 * held
    files = {f["name"]: f["bytes"] for f in record["files"]}
    assert set(files) == {".metadata"} | {f"__{r}_0.distcp" for r in range(n)}
    # cell-07: "every file is more than 3 times the tensor bytes it holds, a few kB per rank"
    assert all(1_000 <= s["shard_bytes"] < 10_000 for s in record["saved"]), record["saved"]
    assert all(files[f"__{s['rank']}_0.distcp"] > 3 * s["shard_bytes"]
               for s in record["saved"]), (files, [s["shard_bytes"] for s in record["saved"]])
    shown = output_text(nb.cells[[c.get("id") for c in nb.cells].index("cell-08")])
    for s in record["saved"]:                              # the factor, printed per rank
        factor = files[f"__{s['rank']}_0.distcp"] / s["shard_bytes"]
        assert f"rank {s['rank']}: " in shown and f"{factor:.1f} × the tensors" in shown, shown

    for got in record["ranks"]:
        r = got["rank"]
        assert got["rows_after"] == {k: _rows(r, m, v[0]) for k, v in SHAPES.items()}
        # the exercise: the bytes of the new shards, parameters and Adam's two moments
        held = sum((b - a) * (v[1] if len(v) > 1 else 1) for (a, b), v in
                   ((got["rows_after"][k], v) for k, v in SHAPES.items()))
        assert got["shard_bytes"] == 3 * 8 * held
        saved = record["saved"][0]["saved_state"]
        assert set(got["loaded_state"]) == set(saved)
        assert all(torch.equal(torch.tensor(got["loaded_state"][k]), torch.tensor(saved[k]))
                   for k in saved)
        assert got["resumed"] == pytest.approx(reference[SAVE_AT:], abs=1e-12)
        assert set(got["times"]) == {"toy", "16 MB per rank"} and got["async_diff"] == 0
        assert got["times"]["16 MB per rank"]["pending_on_return"] is True
        for t in got["times"].values():
            assert 0 < t["async_blocked_s"] <= t["async_done_s"] and t["save_s"] > 0
        assert got["is_exception"] is False and len(got["shape_error"]) == m
        assert all("Size mismatch" in e and "torch.Size([50, 8])" in e and "torch.Size([40, 8])"
                   in e and "model.0.weight" in e for e in got["shape_error"])
    fresh, _ = _adam_run(fresh_adam_at=SAVE_AT)
    for got in record["ranks"]:
        assert got["no_optimizer"] == pytest.approx(fresh[SAVE_AT:], abs=1e-12)
        assert max(abs(a - b) for a, b in zip(got["no_optimizer"], reference[SAVE_AT:])) > 1e-3

    first, last = record["torchrun"]["attempts"]
    assert record["torchrun_returncode"] == 0 and record["torchrun_left"] is False
    assert set(first["pids"]) == set(last["pids"]) == {"0", "1"}
    assert all(first["pids"][r] != last["pids"][r] for r in ("0", "1"))
    assert set(last["starts_at"].values()) == {SAVE_AT}
    assert list(first["losses"].values()) == pytest.approx(reference[:KILL_AT], abs=1e-12)
    assert list(last["losses"].values()) == pytest.approx(reference[SAVE_AT:], abs=1e-12)
    assert png_count(nb) >= 4
    assert set((build_dir() / "tmp").glob("26_checkpoints-*")) == left_before   # removed
