"""The suite's kinds (tests/support/kinds.py): a test that reads committed prose is marked
`docs`, and `-m docs` and `-m timing` each select tests (pyproject.toml registers both)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO, TESTS
from kinds import committed_prose, needs_docs


def test_every_test_that_reads_committed_prose_is_marked_docs():
    prose = committed_prose(REPO)
    assert {"README.md", "docs/claims.md", "answers.md"} <= prose
    unmarked = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        name = str(path.relative_to(TESTS))
        if found := set(needs_docs(path.read_text(), prose)):
            unmarked[name] = found
    assert unmarked == {}, "mark these @pytest.mark.docs"


SOURCE = '''
import pytest
from conftest import NOTEBOOKS, REPO
KEY = REPO / "docs" / "kit" / "answers.md"

def _headings():
    return [c for c in read(NOTEBOOKS) if c.cell_type == "markdown"]

def test_a(): assert "make test" in (REPO / "README.md").read_text()
def test_b(): assert KEY.exists()
def test_c(): assert _headings()
def test_d(tmp_path): assert "README.md" not in (tmp_path / "x").read_text()
def test_e(): assert [c for c in new() if c.cell_type == "markdown"]
@pytest.mark.docs
def test_f(): assert (REPO / "README.md").read_text()
'''


def test_the_rule_finds_a_path_a_constant_a_helper_and_notebook_markdown():
    """Unmarked, a, b, c are named; a word looked for (d), a made-up notebook's markdown
    (e) and a marked test (f) are not; a module's `pytestmark` covers every test."""
    prose = {"README.md", "answers.md", "docs/kit/answers.md"}
    assert needs_docs(SOURCE, prose) == ["test_a", "test_b", "test_c"]
    marked = SOURCE.replace("KEY =", "pytestmark = pytest.mark.docs\nKEY =")
    assert needs_docs(marked, prose) == []
    other = SOURCE.replace("pytestmark", "").replace("@pytest.mark.docs", "@pytest.mark.cold")
    assert "test_f" in needs_docs(other, prose)


@pytest.mark.parametrize("kind", ["docs", "timing"])
def test_each_kind_is_registered_and_selects_tests(kind):
    """`pytest -m docs` / `-m timing` collect some tests and not every one, and pyproject
    registers the marker with its meaning (not added by a hook)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p",
         "no:cacheprovider", "--strict-markers", "-m", kind, "tests/helpers", "tests/tools",
         "tests/notebooks", "tests/claims/test_map_of_the_series.py"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    selected, _, rest = summary.partition("/")
    assert int(selected) > 0 and "deselected" in rest, summary
    assert f'"{kind}: ' in (REPO / "pyproject.toml").read_text()
