"""helpers.scale.checkpoints: the splits, the references and the parsing, without engines."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers.scale import checkpoints as ck


def test_planned_rows_is_torch_chunk():
    for n in (2, 3, 4):
        plan, shapes = ck.planned_rows(n)
        for name, shape in shapes.items():
            chunks = torch.arange(shape[0]).chunk(n)
            expected = [(int(c[0]), int(c[-1]) + 1) for c in chunks]
            assert [r[name] for r in plan if r[name][1] > r[name][0]] == expected, (n, name)


def test_other_world_size():
    assert [ck.other_world_size(n) for n in (2, 3, 4)] == [4, 2, 2]
    with pytest.raises(ValueError, match="2\\+ ranks"):
        ck.other_world_size(1)


def test_reference_losses_restart_with_the_optimizer_is_the_same_run():
    whole = ck.reference_losses()
    assert len(whole) == ck.TOTAL_STEPS and whole[0] > whole[-1]
    assert ck.reference_losses(restart_at=ck.SAVE_AT) == whole
    fresh = ck.reference_losses(restart_at=ck.SAVE_AT, keep_optimizer=False)
    assert fresh[:ck.SAVE_AT] == whole[:ck.SAVE_AT]
    assert abs(fresh[ck.SAVE_AT + 1] - whole[ck.SAVE_AT + 1]) > 1e-3


def test_state_diff_names_the_missing_tensors():
    a = {"model/w": torch.ones(2), "optim/w/step": torch.tensor(3.0)}
    assert ck.state_diff(a, {k: v.clone() for k, v in a.items()}) == 0
    assert ck.state_diff(a, {**a, "model/w": torch.tensor([1.0, 1.5])}) == 0.5
    with pytest.raises(ValueError, match="optim/w/step"):
        ck.state_diff(a, {"model/w": torch.ones(2)})


def test_torchrun_events_two_ranks_on_one_line():
    out = ('@@{"attempt": 0, "rank": 0, "pid": 10, "starts_at": 0}'
           '@@{"attempt": 0, "rank": 1, "pid": 11, "starts_at": 0}\nnoise\n'
           '@@{"attempt": 0, "rank": 0, "step": 0, "loss": 0.5}\n'
           '@@{"attempt": 0, "rank": 0, "step": 1, "error": "[/x/y/pair.cc:5] Connection reset '
           'by peer", "seconds": 0.1}\n@@{"attempt": 1, "rank": 0, "pid": 12, "starts_at": 3}\n')
    summary = ck.torchrun_summary(ck.torchrun_events(out))
    first, second = summary["attempts"]
    assert first["pids"] == {0: 10, 1: 11} and first["losses"] == {0: 0.5}
    assert first["errors"][0]["error"] == "[pair.cc:5] Connection reset by peer"
    assert second["starts_at"] == {0: 3}


def test_files_of_and_checkpoint_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_BUILD_DIR", str(tmp_path))
    folder = ck.checkpoint_dir()
    assert folder.parent == tmp_path / "tmp" and not any(folder.iterdir())
    (folder / "b").write_bytes(b"xyz")
    (folder / "a").write_bytes(b"x")
    assert ck.files_of(folder) == [{"name": "a", "bytes": 1}, {"name": "b", "bytes": 3}]
    assert ck.files_text(ck.files_of(folder)).splitlines()[-1].split()[-2] == "4"


def test_checkpoint_dir_is_removed_at_exit(tmp_path):
    code = ("import os; os.environ['TUTORIAL_BUILD_DIR'] = os.environ['DIR']\n"
            "from helpers.scale import checkpoints as ck\n"
            "d = ck.checkpoint_dir(); (d / 'f').write_text('x'); print(d)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "DIR": str(tmp_path)}, check=True)
    folder = Path(done.stdout.strip())
    assert folder.parent == tmp_path / "tmp" and not folder.exists()


@pytest.mark.timing
def test_run_in_session_kills_the_whole_group_on_timeout():
    # the leader starts a child that outlives it unless the group is killed
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(p.pid, flush=True); time.sleep(60)")
    start = time.monotonic()
    returncode, output, left = ck.run_in_session([sys.executable, "-c", code], timeout_s=2)
    assert returncode is None and left is False and time.monotonic() - start < 15
    child = int(output.split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert ck.run_in_session([sys.executable, "-c", "print('ok')"], timeout_s=30)[:2] == \
        (0, "ok\n")


def test_planned_rows_at_4_and_2():
    at4, shapes = ck.planned_rows(4)
    assert shapes == {"0.weight": (50, 8), "0.bias": (50,), "2.weight": (4, 50), "2.bias": (4,)}
    assert [r["0.weight"] for r in at4] == [(0, 13), (13, 26), (26, 39), (39, 50)]
    assert [r["2.weight"] for r in ck.planned_rows(2)[0]] == [(0, 2), (2, 4)]
