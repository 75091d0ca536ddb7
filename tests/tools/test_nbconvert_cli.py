"""`jupyter nbconvert --to html --execute` on a notebook, typed as a reader would type it.

From the repository root and from notebooks/ alike, the command exits 0 and the
page shows every rank's ✓ line: the notebook needs nothing but the installed
environment (no `make`, no tools.build, no particular working directory).
"""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from conftest import NOTEBOOKS, REPO
from notebook_runner import run_bounded

JUPYTER = Path(sys.executable).parent / "jupyter"
NB = NOTEBOOKS / "01_scatter.ipynb"
TIMEOUT_S = 600

pytestmark = pytest.mark.notebook


@pytest.mark.parametrize("cwd", [REPO, NOTEBOOKS], ids=["from-repo-root", "from-notebooks"])
def test_nbconvert_execute_to_html(tmp_path, cwd):
    out_dir = tmp_path / "out"
    cmd = [str(JUPYTER), "nbconvert", "--to", "html", "--execute",
           os.path.relpath(NB, cwd), "--output-dir", str(out_dir)]
    env = dict(os.environ, TUTORIAL_RESULTS_DIR=str(tmp_path / "results"))
    returncode, out = run_bounded(cmd, cwd, env, TIMEOUT_S)
    assert returncode == 0, f"`{' '.join(cmd)}` in {cwd} exited {returncode}:\n{out[-4000:]}"
    page = out_dir / f"{NB.stem}.html"
    assert page.is_file(), f"no {page.name} in {out_dir}:\n{out[-2000:]}"
    text = page.read_text(encoding="utf-8")
    for rank in range(4):
        assert f"rank {rank} ✓" in text, f"{page.name}: no 'rank {rank} ✓' line"
    assert not re.search(r"rank \d+ ✗", text)
    assert "Traceback" not in text
