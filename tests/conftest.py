"""Test-wide settings: ipyparallel and Jupyter files go to a temporary folder, never ~."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

_SANDBOX = Path(tempfile.mkdtemp(prefix="nccl-notebooks-tests-"))
# Set at import time so every kernel and engine started by the tests inherits them.
for name, sub in [("IPYTHONDIR", "ipython"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                  ("JUPYTER_DATA_DIR", "data"), ("MPLCONFIGDIR", "mpl"),
                  ("TUTORIAL_CACHE_DIR", "cache"), ("TUTORIAL_RESULTS_DIR", "results")]:
    os.environ[name] = str(_SANDBOX / sub)
    (_SANDBOX / sub).mkdir(parents=True, exist_ok=True)
os.environ["TUTORIAL_OFFLINE"] = "1"   # no network fetch unless a test asks for one
os.environ.pop("TUTORIAL_RANKS", None)
os.environ.pop("TUTORIAL_BACKEND", None)

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:   # tools/ is not installed: it runs from the checkout
    sys.path.insert(0, str(REPO))
NOTEBOOKS = REPO / "notebooks"


@pytest.fixture(scope="session")
def sandbox() -> Path:
    return _SANDBOX


def pytest_sessionfinish(session, exitstatus):
    # Whatever a failed test left running: stop it, then drop the sandbox.
    subprocess.run([sys.executable, "-m", "ipyparallel.cluster", "stop", "--all"],
                   capture_output=True, timeout=60)
    shutil.rmtree(_SANDBOX, ignore_errors=True)
