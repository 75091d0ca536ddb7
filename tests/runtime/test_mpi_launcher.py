"""Scale-out on existing engines: a notebook, unchanged, on engines started by mpiexec.

`.ci/run` installs Open MPI and mpi4py (`make install-mpi`), so this runs in CI; on a
machine without them it is skipped and says why.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest

from conftest import NOTEBOOKS
from notebook_runner import assert_records_match_model, execute, notebook_text

pytestmark = pytest.mark.cold   # start-up, lifecycle, timeouts: never the session's warm engines

MPI_MISSING = shutil.which("mpiexec") is None or importlib.util.find_spec("mpi4py") is None
# CI sets TUTORIAL_REQUIRE_MPI=1: there a missing MPI is a failure, not a skip.
needs_mpi = pytest.mark.skipif(
    MPI_MISSING and not os.environ.get("TUTORIAL_REQUIRE_MPI"),
    reason="Open MPI and mpi4py are not installed (make install-mpi)")


@needs_mpi
@pytest.mark.notebook
def test_all_reduce_notebook_runs_unchanged_on_mpi_engines(tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(results))
    monkeypatch.setenv("TUTORIAL_LAUNCHER", "mpi")
    nb = execute(NOTEBOOKS / "05_all_reduce.ipynb", tmp_path, n_ranks=4)
    text = notebook_text(nb)
    assert "4 rank(s) · backend gloo" in text and "· new engines (mpi launcher)" in text
    records = json.loads((results / "05_all_reduce.json").read_text())
    assert_records_match_model(records, 4)
    assert "✗" not in text
    for r in range(4):
        assert f"rank {r} ✓" in text
