"""Repository rules: clean notebooks, one dependency list, CI runs the README's command."""
from __future__ import annotations

import json
import re
from pathlib import Path

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


@pytest.mark.docs
def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in readme and "make html" in readme
    assert re.search(r"^\s*make test\b", ci, flags=re.M)


def _requirement_names(lines: list[str]) -> set[str]:
    """The package names of requirement lines (pins and comments off)."""
    names = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.split(r"[=<>!~\[; ]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return names


def _environment_yml() -> tuple[list[str], list[str], list[str]]:
    """environment.yml's channels, conda dependencies and pip entries, as written."""
    found: dict[str, list[str]] = {"channels": [], "dependencies": [], "pip": []}
    section, pip_indent = None, None
    for line in (REPO / "environment.yml").read_text().splitlines():
        line = line.split("#", 1)[0].rstrip()
        key = re.match(r"^(\w+):", line)
        entry = re.match(r"^(\s*)-\s*(.+)$", line)
        if key:
            section, pip_indent = key.group(1), None
        elif entry and section in ("channels", "dependencies"):
            indent, value = len(entry.group(1)), entry.group(2)
            if pip_indent is not None and indent > pip_indent:
                found["pip"].append(value)
            elif value == "pip:":
                pip_indent = indent
            else:
                pip_indent = None
                found[section].append(value)
    return found["channels"], found["dependencies"], found["pip"]


def test_environment_yml_installs_the_same_list_as_pip():
    """conda's environment reads requirements.txt itself and pins no package of its own:
    the two lists cannot disagree."""
    channels, conda, pip = _environment_yml()
    assert channels == ["conda-forge"], channels
    assert "pip" in conda, conda
    assert [entry for entry in pip if entry.startswith("-r ")] == ["-r requirements.txt"], pip
    assert not _requirement_names(pip), f"environment.yml installs packages of its own: {pip}"
    conda_packages = {re.split(r"[=<> ]", entry, maxsplit=1)[0] for entry in conda}
    # python, pip and make are the environment, not the project's packages
    assert conda_packages <= {"python", "pip", "make"}, conda_packages
    requirements = (REPO / "requirements.txt").read_text().splitlines()
    assert not conda_packages & _requirement_names(requirements)


def test_requirements_pin_the_versions_the_series_was_checked_with():
    """torch: what the notebooks' measured claims and field notes describe; ipyparallel:
    what helpers/runtime/ipp_compat.py's workarounds were checked against."""
    from helpers.runtime.ipp_compat import CHECKED_AGAINST

    requirements = (REPO / "requirements.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", requirements, flags=re.M)
    assert re.search(rf"^ipyparallel=={re.escape(CHECKED_AGAINST)}$", requirements, flags=re.M)


def test_the_package_holds_every_folder_of_helpers(tmp_path):
    """A non-editable install (a wheel) ships every helpers package, so a new folder is
    never left out of it."""
    import subprocess
    import sys
    import zipfile

    import shutil

    source = tmp_path / "source"          # a copy: setuptools builds in the tree it is given
    shutil.copytree(REPO / "helpers", source / "helpers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(source)], check=True, timeout=300)
    [wheel] = tmp_path.glob("nccl_notebooks-*.whl")
    shipped = {name.rsplit("/", 1)[0].replace("/", ".") for name in
               zipfile.ZipFile(wheel).namelist() if name.endswith("/__init__.py")}
    folders = {str(p.parent.relative_to(REPO)).replace("/", ".")
               for p in (REPO / "helpers").rglob("__init__.py")}
    assert folders and shipped == folders, (sorted(folders - shipped), sorted(shipped - folders))


IRI_FORMAT = re.compile(r"""["']?format["']?\s*:\s*["']?iri(?:-reference)?\b""")


def test_nbformat_imports_without_rfc3987_syntax():
    """make install removes rfc3987-syntax (the Makefile says why): jsonschema imports it
    when it is there, and it builds its parsers at import, 1.4 s in every process that
    imports nbformat (the builds, Sphinx, Jupyter, pytest)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", "import sys, nbformat, jupyter_events; "
                          "print('rfc3987_syntax' in sys.modules)"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False", \
        "rfc3987-syntax is installed: `make install` removes it (see the Makefile)"


def test_no_schema_we_load_checks_an_iri_format():
    """What rfc3987-syntax would check: the "iri" and "iri-reference" formats. No schema
    of the packages that validate with a format checker here uses them, so removing it
    changes no validation; an upgrade that adds one fails here."""
    import importlib.util
    import sys

    folders = [Path(sys.prefix) / "share" / "jupyter"]
    for package in ("jupyter_events", "jupyter_server", "jupyterlab_server", "jupyterlab",
                    "nbformat", "nbclient", "notebook_shim"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            folders += [Path(p) for p in spec.submodule_search_locations]
    schemas = [path for folder in folders if folder.is_dir()
               for pattern in ("*.json", "*.yaml", "*.yml") for path in folder.rglob(pattern)]
    assert len(schemas) > 50, folders        # nbformat's and the event schemas at least
    using = [str(path) for path in schemas
             if IRI_FORMAT.search(path.read_text(encoding="utf-8", errors="replace"))]
    assert not using, f"schemas with an iri format (rfc3987-syntax checks it): {using}"
