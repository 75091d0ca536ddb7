"""Repository rules: clean notebooks, one dependency list, CI runs the README's command."""
from __future__ import annotations

import json
import re

import pytest

from conftest import NOTEBOOKS, REPO

NOTEBOOK_FILES = sorted(NOTEBOOKS.glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOK_FILES


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.name)
def test_committed_notebooks_carry_no_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path.name}: a cell has outputs"
            assert cell["execution_count"] is None, f"{path.name}: execution count"


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=lambda p: p.name)
def test_every_notebook_has_a_parameters_cell_and_a_teardown(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    params = [c for c in code if "parameters" in c["metadata"].get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged 'parameters'"
    assert "n_ranks" in "".join(params[0]["source"])
    assert "cluster.stop()" in "".join(code[-1]["source"]), "last code cell tears down"


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in readme and "make html" in readme
    assert re.search(r"^\s*make test\b", ci, flags=re.M)


def test_environment_yml_installs_the_same_list_as_pip():
    env = (REPO / "environment.yml").read_text()
    assert "conda-forge" in env and re.search(r"^\s*-\s*pip\s*$", env, flags=re.M)
    assert "-r ../requirements.txt" in env or "-r requirements.txt" in env
    requirements = (REPO / "requirements.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", requirements, flags=re.M)
