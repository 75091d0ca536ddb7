"""The runnable series' zip (tools.archive), which the site offers: what it holds, that
`make lab`'s recipe finds every file it needs in the unpacked folder, and that a notebook
runs from it with real engines, importing the helpers of the unpacked folder (not of this
checkout, which the environment has installed).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from conftest import NOTEBOOKS, REPO
from notebook_runner import run_bounded
from tools import archive
from tools.archive import NOT_RUN_FROM_IT
from tools.dependencies import dependencies

NOTEBOOK = "00_ranks_and_world"
RANKS = 2
RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    """The archive, written then unpacked in a fresh folder; the folder it makes."""
    tmp = tmp_path_factory.mktemp("archive")
    written = archive.write_archive(tmp / "site" / archive.NAME)
    with zipfile.ZipFile(written) as zipped:
        zipped.extractall(tmp / "fresh")
    return tmp / "fresh" / archive.FOLDER


def _names(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_the_archive_holds_the_series_and_nothing_of_the_build_or_the_tests(unpacked):
    names = _names(unpacked)
    notebooks = sorted(p.name for p in NOTEBOOKS.glob("[0-9]*.ipynb"))
    assert sorted(n.split("/")[1] for n in names if n.startswith("notebooks/")) == notebooks
    for name in ("Makefile", "README.md", "requirements.txt", "pyproject.toml",
                 "environment.yml", "tools/install.py", "tools/lab/jupyter_server_config.py",
                 "ARCHIVE.md", "helpers/__init__.py"):
        assert name in names, name
    helpers = {p.relative_to(REPO).as_posix() for p in (REPO / "helpers").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert helpers <= names, sorted(helpers - names)[:5]
    needed = {p.relative_to(REPO).as_posix() for nb in NOTEBOOKS.glob("[0-9]*.ipynb")
              for p in dependencies(nb, REPO)} - set(NOT_RUN_FROM_IT)
    assert needed <= names, sorted(needed - names)
    assert not [n for n in names if n.startswith(("tests/", "build/", "docs/"))
                or "__pycache__" in n or n.endswith((".pyc", ".tmp"))], sorted(names)[:20]
    for name in notebooks:      # as committed: the archive's copy is the checkout's, byte for byte
        assert (unpacked / "notebooks" / name).read_bytes() == (NOTEBOOKS / name).read_bytes()


def test_the_archive_is_written_whole_and_the_same_each_time(tmp_path):
    first = archive.write_archive(tmp_path / "a" / archive.NAME).read_bytes()
    second = archive.write_archive(tmp_path / "b" / archive.NAME).read_bytes()
    assert first == second
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [archive.NAME]   # no .tmp
    with zipfile.ZipFile(tmp_path / "a" / archive.NAME) as zipped:
        assert zipped.testzip() is None
        assert {n.split("/")[0] for n in zipped.namelist()} == {archive.FOLDER}


def _plain_env(folder: Path) -> dict[str, str]:
    """The environment of a user who unpacked the archive: no active environment."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH",
                        "MAKEFLAGS", "MFLAGS")}
    return {**env, "PWD": str(folder)}


def test_make_lab_finds_everything_its_recipe_needs_in_the_unpacked_folder(unpacked):
    """`make -n lab` (nothing is run): make stops at a prerequisite file that is missing."""
    done = subprocess.run(["make", "-n", "lab"], cwd=unpacked, env=_plain_env(unpacked),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    for step in ("python3 -m venv .venv",
                 ".venv/bin/python -m tools.install -r requirements.txt -e .",
                 "ipykernel install --sys-prefix --name nccl-notebooks", "-m jupyterlab"):
        assert step in done.stdout, (step, done.stdout)
    # tools.install, which that recipe runs, is the unpacked folder's and imports from it only
    found = subprocess.run([sys.executable, "-c", "import tools.install as t; print(t.__file__)"],
                           cwd=unpacked, env=_plain_env(unpacked), capture_output=True,
                           text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).resolve() == (unpacked / "tools" / "install.py").resolve()


def test_the_unpacked_folder_is_an_installable_project(unpacked, tmp_path):
    """pip builds the editable project's metadata from the unpacked folder (pyproject.toml,
    README.md, helpers/): --dry-run, offline, nothing is installed."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index",
         "--no-build-isolation", "--report", str(tmp_path / "report.json"), "-e", str(unpacked)],
        env=_plain_env(unpacked), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [item["metadata"]["name"] for item in report["install"]] == ["nccl-notebooks"]


KERNEL_CHECK = "import helpers\nprint('KERNEL-HELPERS', helpers.__file__)"
ENGINE_CHECK = "%%px\nimport helpers\nprint('ENGINE-HELPERS', helpers.__file__)"


@pytest.mark.notebook
@pytest.mark.cold
def test_a_notebook_runs_from_the_unpacked_archive_on_its_own_helpers(unpacked, tmp_path):
    """00 at 2 ranks, executed by papermill from the unpacked folder (first on PYTHONPATH
    and the working folder, as `pip install -e` of it would make it), new engines: the
    kernel and every engine import helpers/ from the unpacked folder."""
    source = unpacked / "notebooks" / f"{NOTEBOOK}.ipynb"
    nb = nbformat.read(source, as_version=4)
    start = next(i for i, c in enumerate(nb.cells) if "start_cluster(" in c.source)
    nb.cells[start + 1:start + 1] = [nbformat.v4.new_code_cell(KERNEL_CHECK),
                                     nbformat.v4.new_code_cell(ENGINE_CHECK)]
    checked = source.with_name(f"{NOTEBOOK}-checked.ipynb")
    nbformat.write(nb, checked)
    out = tmp_path / "out.ipynb"
    env = {**_plain_env(unpacked), "PYTHONPATH": str(unpacked), "TUTORIAL_RANKS": str(RANKS),
           "TUTORIAL_WARM_START": "0", "TUTORIAL_OFFLINE": "1",
           "TUTORIAL_RESULTS_DIR": str(tmp_path / "results")}
    cmd = [sys.executable, "-m", "papermill", str(checked), str(out), "--cwd",
           str(checked.parent), "-k", "python3", "--execution-timeout", "300"]
    returncode, printed = run_bounded(cmd, unpacked, env, RUN_TIMEOUT_S)
    assert returncode == 0, printed[-4000:]
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                   for c in nbformat.read(out, as_version=4).cells
                   if c.cell_type == "code" for o in c.get("outputs", []))
    kernel = re.findall(r"KERNEL-HELPERS (\S+)", text)
    engines = re.findall(r"ENGINE-HELPERS (\S+)", text)
    assert len(kernel) == 1 and len(engines) == RANKS, text[-3000:]
    for path in kernel + engines:
        assert Path(path).resolve() == (unpacked / "helpers" / "__init__.py").resolve(), path
    assert f"rank {RANKS - 1} of {RANKS}" in text, text[-3000:]
    assert (tmp_path / "results" / f"{NOTEBOOK}.json").is_file()
