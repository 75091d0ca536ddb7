"""What py-spy needs to read a rank's stack (notebook 28, section 5), run as a normal user:
its own processes, which are not its children (as the engines are not), readable unless
Yama's ptrace_scope forbids it; another user's, refused. And what `stacks` shows then."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from accounts import normal_user
from helpers.debugging import stacks

SLEEPER = "import time\nwhile True:\n    time.sleep(0.1)\n"
SCOPE = Path("/proc/sys/kernel/yama/ptrace_scope")
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _yama_scope() -> int:
    """Yama's ptrace_scope; 0 where Yama is absent (it then restricts nothing)."""
    return int(SCOPE.read_text()) if SCOPE.exists() else 0


def _sleeper(user: str | None) -> subprocess.Popen:
    prefix = ["runuser", "-u", user, "--"] if user else []
    return subprocess.Popen([*prefix, str(SYSTEM_PYTHON), "-c", SLEEPER],
                            start_new_session=True)


def _python_child(process: subprocess.Popen) -> int:
    """The Python process itself (runuser's child when run through runuser)."""
    import psutil

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for proc in [psutil.Process(process.pid), *psutil.Process(process.pid).children()]:
            if "-c" in proc.cmdline() and "python" in proc.cmdline()[0]:
                return proc.pid
        time.sleep(0.1)
    raise AssertionError("the sleeper did not start")


def _py_spy_for_everyone(folder: Path) -> str:
    """A copy of py-spy any user may run: this checkout's may sit in a private folder
    (a clone under `mktemp -d`, mode 0700)."""
    folder.chmod(0o755)
    copy = folder / "py-spy"
    shutil.copy2(stacks.py_spy(), copy)
    copy.chmod(0o755)
    return str(copy)


@pytest.mark.skipif(os.geteuid() != 0 or not SYSTEM_PYTHON.exists(),
                    reason="root makes the normal user; the sleeper runs on /usr/bin/python3")
def test_a_normal_users_py_spy_reads_its_own_processes_and_not_another_users():
    user = normal_user()
    program = _py_spy_for_everyone(Path(tempfile.mkdtemp(prefix="py-spy-")))
    own, roots = _sleeper(user), _sleeper(None)
    try:
        def dump(pid: int) -> subprocess.CompletedProcess:
            return subprocess.run(["runuser", "-u", user, "--", program, "dump",
                                   "--pid", str(pid)], capture_output=True, text=True,
                                  timeout=stacks.DUMP_TIMEOUT_S)
        mine = dump(_python_child(own))
        theirs = dump(_python_child(roots))
    finally:
        for process in (own, roots):
            os.killpg(process.pid, 9)
            process.wait(timeout=10)
        shutil.rmtree(Path(program).parent, ignore_errors=True)
    if _yama_scope() == 0:
        assert mine.returncode == 0 and "Thread" in mine.stdout, mine.stdout + mine.stderr
    else:                       # 1: only descendants; 2: admin only; 3: none
        assert mine.returncode != 0, mine.stdout
    assert theirs.returncode != 0 and "Permission Denied" in theirs.stdout + theirs.stderr


def test_a_rank_py_spy_cannot_read_shows_the_error_instead_of_a_stack():
    gone = subprocess.Popen([sys.executable, "-c", ""])
    gone.wait(timeout=30)
    said = stacks._dump(stacks.py_spy(), gone.pid)     # a pid no process has now
    assert isinstance(said, str) and said, said
    assert stacks.innermost(said) == f"no stack: {said}"
