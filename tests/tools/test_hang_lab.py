"""The kit's hang lab (docs/kit/hang_lab/, tools/hang_lab.py): each script's fault leaves the
evidence its entry in the answer key names, the key's fix makes the script complete, and
no process of a run outlives it.

The expected ranks come from the run itself (its log, or another tool's evidence), the
expected lines from the script's source.
"""
from __future__ import annotations

import pickle
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from conftest import REPO
from helpers.debugging import flight_recorder as fr
from tools import hang_lab

KEY = REPO / "docs" / "kit" / "answers.md"
TIMEOUT_S, QUIET_S = 4.0, 1.0   # short: every hanging run waits out the timeout


def line_of(script: str, text: str) -> int:
    """The number of the only line of a lab script that starts with `text`."""
    lines = (hang_lab.LAB_DIR / script).read_text().splitlines()
    found = [n for n, line in enumerate(lines, 1) if line.strip().startswith(text)]
    assert len(found) == 1, (script, text, found)
    return found[0]


@pytest.fixture
def out(tmp_path: Path):
    """A run's folder; afterwards, no process that ran there or ran a lab script is left."""
    yield tmp_path / "out"
    left = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        words = " ".join(proc.info["cmdline"] or [])
        if str(tmp_path) in (proc.info["cwd"] or "") + words or str(hang_lab.LAB_DIR) in words:
            left.append((proc.pid, words))
    assert not left, f"left running: {left}"


def run(lab: str, out: Path, ranks: int = 2, **settings) -> hang_lab.Result:
    result = hang_lab.run(lab, ranks, settings.pop("timeout_s", TIMEOUT_S), out,
                          quiet_s=QUIET_S, echo=False, **settings)
    assert not result.ended_by_runner, "the job did not end by itself"
    assert any((out / hang_lab.LOGS).iterdir()), "torchrun kept its logs in the run's folder"
    return result


def newest(out: Path) -> dict[int, fr.Entry]:
    """Each rank's newest collective in the files the runner wrote for the analyzer."""
    return {int(p.name[len(fr.PREFIX):]): fr.entries(pickle.loads(p.read_bytes()))[-1]
            for p in (out / "fr").glob(f"{fr.PREFIX}*")}


def analyzer(out: Path) -> str:
    """torch's analyzer on the runner's fr/ folder, as the kit tells the learner to run it."""
    done = subprocess.run([sys.executable, "-m", fr.ANALYZER, str(out / "fr"), "-p", fr.PREFIX],
                          capture_output=True, text=True, timeout=fr.ANALYZER_TIMEOUT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def stacks(out: Path, ranks: int) -> dict[int, str]:
    return {r: (out / "stacks" / f"rank_{r}.txt").read_text() for r in range(ranks)}


def test_lab1_the_ranks_with_fewer_batches_leave_and_rank_0_fails_in_their_absence(out):
    result = run("1", out)
    log = (out / "job.log").read_text()
    batches = {int(r): int(n) for r, n in re.findall(r"^rank (\d+): \d+ samples, (\d+) batches",
                                                     log, re.M)}
    short = {r for r, n in batches.items() if n < max(batches.values())}
    assert short and 0 not in short and result.returncode != 0
    assert all(f"rank {r}: done" in log for r in short)            # they ended normally
    assert "Connection closed by peer" in log and "Timed out" not in log   # no rank waited
    blamed = re.search(r"Root Cause.*?\n +rank +: (\d+)", log, re.S)    # torchrun's summary
    assert blamed and int(blamed[1]) not in short
    last = {rank: entry.seq for rank, entry in newest(out).items()}
    assert {r for r in last if last[r] == max(last.values()) - 1} == short
    found = analyzer(out)
    assert f"missing ranks: {short}" in found
    assert f"lab1.py:{line_of('lab1.py', 'loss.backward()')}" in found


def test_lab2_the_analyzer_names_the_mismatch_and_gloo_wrote_no_file_of_its_own(
        out, tmp_path, monkeypatch, capsys):
    """Through the command line, with NCCL's dump-on-timeout settings in the environment:
    gloo writes nothing of its own, the runner prints where the evidence is, not a verdict."""
    monkeypatch.setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    monkeypatch.setenv("TORCH_FR_DUMP_TEMP_FILE", str(tmp_path / "torch_trace_"))
    code = hang_lab.main(["2", "--out", str(out), "--timeout", f"{TIMEOUT_S:g}",
                          "--quiet", f"{QUIET_S:g}"])
    printed = capsys.readouterr().out
    assert code == 1 and "Timed out" in printed
    assert "Culprit" not in printed and "MISMATCH" not in printed
    assert not list(tmp_path.glob("torch_trace_*")) and len(list((out / "raw").iterdir())) == 2
    ends = newest(out)
    assert ends[0].seq == ends[1].seq
    assert (ends[0].collective, ends[1].collective) == ("broadcast", "all_reduce")
    found = analyzer(out)
    assert "COLLECTIVE_TYPE_MISMATCH" in found and "Culprit rank" in found
    spied = stacks(out, 2)
    assert f"validation_loss (lab2.py:{line_of('lab2.py', 'dist.broadcast(')})" in spied[0]
    assert f"average_gradients (lab2.py:{line_of('lab2.py', 'dist.all_reduce(')})" in spied[1]


def test_lab2_with_detail_checks_every_rank_raises_the_mismatch_before_the_timeout(out):
    result = run("2", out, detail=True)
    log = (out / "job.log").read_text()
    assert result.returncode != 0 and "Timed out" not in log
    assert "Detected mismatch between collectives" in log
    assert "OpType=BROADCAST" in log and "OpType=ALLREDUCE" in log


def test_with_detail_checks_ddp_s_constructor_crashes_every_rank_in_this_torch(out):
    """Why the key sends --detail to lab 2 only: labs 1 and 3 build a DDP model."""
    result = run("1", out, detail=True)
    log = (out / "job.log").read_text()
    assert result.returncode != 0
    assert len(re.findall(r"exitcode +: -11 .*\(SIGSEGV\)", log)) == 2     # both ranks
    assert not re.search(r"^rank \d+: ", log, re.M) and result.dumped == []


def test_lab3_py_spy_shows_where_the_ranks_the_analyzer_finds_missing_wait(out):
    """At 2 and 3 ranks at once: each run mostly waits out its timeout."""
    def lab3(ranks: int) -> tuple[hang_lab.Result, str]:
        result = run("3", out / str(ranks), ranks)
        return result, analyzer(out / str(ranks))

    with ThreadPoolExecutor(2) as pool:
        runs = {ranks: pool.submit(lab3, ranks) for ranks in (2, 3)}
    waits = f"wait_for (lab3.py:{line_of('lab3.py', 'time.sleep')})"
    backward = f"train (lab3.py:{line_of('lab3.py', 'loss.backward()')})"
    for ranks, done in runs.items():
        (result, found), folder = done.result(), out / str(ranks)
        assert result.returncode != 0 and result.stacks_at is not None
        spied = stacks(folder, ranks)
        waiting = {r for r, text in spied.items() if waits in text}
        assert waiting and 0 not in waiting, spied
        assert all(backward in spied[r] for r in set(spied) - waiting), spied
        assert f"missing ranks: {waiting}" in found
        log = (folder / "job.log").read_text()    # torchrun's SIGTERM, dist_utils' exit code
        assert len(re.findall(r"exitcode +: 143 ", log)) == len(waiting)
        last = {rank: entry.seq for rank, entry in newest(folder).items()}
        assert {r for r in last if last[r] < max(last.values())} == waiting


def fix(lab: str) -> tuple[str, str]:
    """The answer key's fix of a lab: the lines it replaces, and what replaces them."""
    entry = KEY.read_text().split(f"### Hang lab {lab} ", 1)[1].split("\n#", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", entry.split("**Fix**", 1)[1], re.S)
    assert len(blocks) >= 2, f"Hang lab {lab}: no **Fix** with the old and the new lines"
    return blocks[0], blocks[1]


def fixed_copy(lab: str, folder: Path) -> Path:
    """The lab's script with the key's fix applied, beside a copy of dist_utils.py."""
    folder.mkdir()
    shutil.copy(hang_lab.LAB_DIR / "dist_utils.py", folder)
    source, (old, new) = (hang_lab.LAB_DIR / f"lab{lab}.py").read_text(), fix(lab)
    assert source.count(old) == 1, f"the key's lines of lab {lab} are not in the script"
    (folder / f"lab{lab}.py").write_text(source.replace(old, new))
    return folder / f"lab{lab}.py"


@pytest.mark.docs
def test_the_answer_keys_fixes_make_the_scripts_complete(out, tmp_path):
    """The three at once (mostly start-up: torch's import in every process)."""
    scripts = {lab: fixed_copy(lab, tmp_path / f"fixed{lab}") for lab in hang_lab.LABS}
    with ThreadPoolExecutor(len(scripts)) as pool:
        runs = {lab: pool.submit(run, str(script), out / lab, timeout_s=30)
                for lab, script in scripts.items()}
    for lab, done in runs.items():
        result = done.result()
        assert result.returncode == 0, (out / lab / "job.log").read_text()[-3000:]
        assert result.dumped == [0, 1] and len({e.seq for e in newest(out / lab).values()}) == 1


def test_a_job_past_its_deadline_is_ended_with_all_its_processes(out, tmp_path):
    script = tmp_path / "sleeps.py"
    script.write_text("import time\ntime.sleep(600)\n")
    result = hang_lab.run(str(script), 2, 1.0, out, echo=False, deadline_s=3)
    assert result.ended_by_runner and result.returncode != 0 and result.dumped == []


def test_a_lab_that_does_not_exist_is_refused_with_the_ones_that_do(capsys):
    with pytest.raises(SystemExit):
        hang_lab.main(["9"])
    assert "no lab '9': give 1, 2, 3" in capsys.readouterr().err
