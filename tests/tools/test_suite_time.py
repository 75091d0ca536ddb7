"""benchmarks/suite_time.py: a fresh clone's .ci/run, timed, with the CPU by kind of process."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import suite_time
from child import wait_until
from helpers.runtime.disposable_rank import PRELOAD
from helpers.runtime.processes import running
from tools.kernel_provisioner import KERNELS_PRELOAD

pytestmark = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="Linux only (/proc)")

# A stand-in for .ci/run: it burns CPU in a child whose command line names a kind, then
# prints pytest's last line. The child then sleeps: the sampler reads each process every
# half second, so the CPU a process burns after its last reading is not counted.
CI_RUN = """#!/usr/bin/env bash
python3 -c 'import time
t = time.process_time()
while time.process_time() - t < 1.0: pass
time.sleep(1.5)' exec\\(eval\\(sys.stdin
echo "====== 3 passed, 1 skipped in 1.25s ======"
test -d .git && test -z "$(git status --porcelain)" && test "$CI" = true
test -z "$VIRTUAL_ENV" && ! echo ":$PATH:" | grep -q ":$ACTIVE_BIN:" && test -n "$UV_CACHE_DIR"
"""


# A forkserver's command line as multiprocessing.forkserver.ForkServer.ensure_running
# writes it ("main(%d, %d, %r, **%r)"); its children, forked, keep it.
FORKSERVER = "/v/bin/python -B -c from multiprocessing.forkserver import main; main(4, 6, {}, " \
             "**{{'sys_path': ['/r'], 'main_path': '/r/s.py'}})"
ENGINES = "engines, disposable ranks and their fork servers"


@pytest.mark.parametrize("command, kind", [
    (FORKSERVER.format(list(PRELOAD)), ENGINES),
    (FORKSERVER.format(list(KERNELS_PRELOAD)), "kernels (forked) and their fork server"),
    ("/v/bin/python -m ipyparallel.engine --profile-dir=/t/p --cluster-id=c", ENGINES),
    ("mpiexec -n 2 /v/bin/python -m ipyparallel.engine --mpi", "Open MPI"),
    ("/v/bin/python -c import sys;exec(eval(sys.stdin.readline()))", "pytest workers"),
    ("/usr/lib/chromium/chromium --headless --remote-debugging-pipe", "Chromium"),
    ("/v/bin/python -m ipyparallel.controller --ip=127.0.0.1 --usethreads", "ipyparallel "
     "controllers"),
    ("/usr/sbin/slurmd -D", "Slurm"), ("/v/bin/python -m helpers.bench", "other Python"),
    ("/usr/bin/git status", "other")])
def test_kinds(command, kind):
    assert suite_time.kind_of(command) == kind


# In a child: start this process's forkserver as the engines' launcher does, fork one
# process from it, and print both command lines as /proc has them.
FORKED = """
import json, time, psutil
from helpers.runtime.forked_engines import context, start_forkserver
start_forkserver()
child = context().Process(target=time.sleep, args=(30,))
child.start()
server = psutil.Process(child.pid).ppid()
lines = [open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
         for pid in (server, child.pid)]
child.kill()
child.join()
print(json.dumps({"server": server, "lines": lines}))
"""


def test_a_forked_engine_counts_as_an_engine():
    """...by the command line it really has: its forkserver's (a fork keeps it)."""
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True,
                          timeout=120, cwd=suite_time.REPO)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    # The server ends once its caller is gone and its preload (torch) is imported.
    assert wait_until(lambda: not running(found["server"]), 60), "the forkserver outlived us"
    server, engine = found["lines"]
    assert "from multiprocessing.forkserver import main" in engine and engine == server
    assert suite_time.kind_of(engine) == suite_time.kind_of(server) == ENGINES


def _repository(tmp_path: Path, ci_run: str) -> Path:
    """A git repository with one commit: a .ci/run of the given text."""
    source = tmp_path / "source"
    (source / ".ci").mkdir(parents=True)
    (source / ".ci" / "run").write_text(ci_run)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(source)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=source, check=True)
    subprocess.run([*git, "commit", "-qm", "ci"], cwd=source, check=True)
    return source


def test_a_fresh_clone_is_run_timed_and_removed(tmp_path):
    """...outside the caller's active environment (the clone's make would install there)."""
    source = _repository(tmp_path, CI_RUN)
    out, temporary = tmp_path / "out", tmp_path / "tmp"
    temporary.mkdir()
    done = subprocess.run([sys.executable, str(Path(suite_time.__file__)), "--source",
                           str(source), "--label", "t", "--out", str(out)],
                          env={**os.environ, "TMPDIR": str(temporary),
                               "VIRTUAL_ENV": str(tmp_path / "active"),
                               "ACTIVE_BIN": str(tmp_path / "active" / "bin"),
                               "PATH": f"{tmp_path / 'active' / 'bin'}:{os.environ['PATH']}"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads((out / "suite-t.json").read_text())
    assert result["exit_code"] == 0 and result["pytest_s"] == 1.25
    assert result["pytest_result"] == "3 passed, 1 skipped"
    assert result["wall_s"] >= 1.0 and result["busy_core_s"] >= 0.9
    assert result["cpu_by_kind"]["pytest workers"] >= 0.9, result["cpu_by_kind"]
    assert result["speed_probe_cpu_s"] > 0
    assert "pytest 0:01.2" in done.stdout and "3 passed" in (out / "suite-t.log").read_text()
    assert not list(temporary.iterdir()), "the clone is removed"


def test_interrupted_it_ends_the_run_and_removes_the_clone(tmp_path):
    source = _repository(tmp_path, "#!/usr/bin/env bash\necho $$ > \"$PIDFILE\"\nsleep 60\n")
    temporary, pidfile = tmp_path / "tmp", tmp_path / "run.pid"
    temporary.mkdir()
    measuring = subprocess.Popen(
        [sys.executable, str(Path(suite_time.__file__)), "--source", str(source), "--out",
         str(tmp_path / "out")], env={**os.environ, "TMPDIR": str(temporary),
                                      "PIDFILE": str(pidfile)})
    assert wait_until(lambda: pidfile.exists() and pidfile.read_text().strip(), 30)
    run_pid = int(pidfile.read_text())
    measuring.send_signal(signal.SIGTERM)
    assert measuring.wait(30) == 143
    assert not running(run_pid), "the .ci/run outlived the measurement"
    assert not list(temporary.iterdir()), "the clone is removed"
