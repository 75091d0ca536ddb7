"""A notebook is added in one place (issue 51, item 6): notebooks/series.toml, read by
tools.series, holds each notebook's group, needs, card figure and outcomes; the site, the kit
and the tests derive their counts from it.

The reader's errors name the stem and the field. Then docs/ARCHITECTURE.md's "Add a notebook"
is followed in a copy of the tree (what the checks read: helpers/, tools/, notebooks/, docs/,
book/ and the tests that run there): a minimal 29_example with its one entry, the map and
the kit rewritten by their tools, and the architecture, kit and site checks run there pass;
without the entry they fail, naming the notebook and the table. No notebook is executed
(its executed copy is written as tools.build leaves one) and no Sphinx build is run: the
"site check" is the index staged by tools.site (its group heading, its card, its toctree)
and tests/tools/test_site.py's checks that need no browser.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import REPO
from tools import series, site

STEM = "29_example"
TITLE = "29 · An example"
ENTRY = f"""
[{STEM}]
group = "Choosing, surviving, planning"
needs = ["00"]
thumbnail = "c02"
outcomes = [
  "explain how a notebook joins the series",
  "name the files a new notebook's entry replaces",
]
"""
MISSING = f"notebooks/{STEM}.ipynb: no entry in notebooks/series.toml"
# The checks run in the copy (tests/tools/*.py, by name): none needs a browser or a kernel.
CHECKS = ["test_the_map_in_architecture_md_is_the_one_the_code_gives",
          "test_every_helpers_module_is_used_by_a_notebook_or_named_as_used_by_none",
          "test_the_table_in_the_kit_is_the_one_the_tool_writes",
          "test_every_notebook_has_a_measured_run_time",
          "test_every_notebook_has_two_to_four_outcomes_a_teacher_can_assess",
          "test_the_course_paths_fit_their_time_and_come_after_what_they_need",
          "test_prerequisites_point_back_and_the_difficulty_follows_the_stated_rule",
          "test_card_summaries_are_first_sentences_ended_by_a_stop",
          "test_start_here_reads_the_kits_course_paths_as_the_kit_counts_them"]
CHECK_FILES = ["tests/tools/test_architecture.py", "tests/tools/test_kit.py",
               "tests/tools/test_site.py"]
TIMEOUT_S = 240


# ----------------------------------------------------------------- the reader's errors
def _notebook(folder: Path, stem: str) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {stem}")]
    nbformat.write(nb, folder / f"{stem}.ipynb")


def _entry(stem: str, **fields: str) -> str:
    values = {"group": '"A"', "needs": "[]", "thumbnail": '"c01"',
              "outcomes": '["explain it"]', **fields}
    return f"[{stem}]\n" + "".join(f"{k} = {v}\n" for k, v in values.items() if v != "")


@pytest.fixture
def tiny(tmp_path) -> Path:
    for stem in ("00_a", "01_b"):
        _notebook(tmp_path, stem)
    return tmp_path


def test_the_reader_gives_each_entry_in_series_order(tiny):
    (tiny / "series.toml").write_text(_entry("01_b", needs='["00"]', group='"B"')
                                      + _entry("00_a"))
    entries = series.load(tiny)
    assert list(entries) == ["00_a", "01_b"]
    assert entries["01_b"] == series.Notebook("01_b", "B", ("00",), "c01", ("explain it",))
    assert series.groups(entries) == ["A", "B"]
    assert site.group_name("01_tiny", entries) == "B"       # a page goes by its number
    assert site.group_name("07_other", entries) == site.OTHER_GROUP


@pytest.mark.parametrize("text, said", [
    (_entry("00_a"), "notebooks/01_b.ipynb: no entry in notebooks/series.toml"),
    (_entry("00_a") + _entry("01_b") + _entry("02_c"),
     "[02_c] names notebooks/02_c.ipynb, which does not exist"),
    (_entry("00_a") + _entry("01_b", group=""), "[01_b] has no group"),
    (_entry("00_a") + _entry("01_b", minutes="5"), "[01_b] has unknown fields minutes"),
    (_entry("00_a") + _entry("01_b", needs='"00"'), "[01_b].needs: a list"),
    (_entry("00_a") + _entry("01_b", needs="[0]"), "[01_b].needs: 0 is not a notebook number"),
    (_entry("00_a") + _entry("01_b", outcomes="[]"), "[01_b].outcomes: a list of one item"),
    (_entry("00_a") + _entry("01_b", thumbnail="3"), "[01_b].thumbnail: a non-empty string"),
    (_entry("00_a", needs='["01"]') + _entry("01_b"),
     "[00_a].needs: 01 is not an earlier notebook"),
    (_entry("00_a") + _entry("01_b", needs='["05"]'),
     "[01_b].needs: 05 is not an earlier notebook"),
    (_entry("00_a") + "[01_b]\ngroup = \n", "not valid TOML"),
], ids=["no-entry", "no-notebook", "no-field", "unknown-field", "needs-not-list",
        "needs-not-number", "no-outcomes", "thumbnail-not-text", "needs-later",
        "needs-unknown", "bad-toml"])
def test_the_reader_names_the_stem_and_the_field(tiny, text, said):
    (tiny / "series.toml").write_text(text)
    with pytest.raises(series.SeriesError) as err:
        series.load(tiny)
    assert said in str(err.value).replace(tiny.name, "notebooks")


def test_a_group_split_in_two_and_a_missing_table_are_named(tiny):
    _notebook(tiny, "02_c")
    (tiny / "series.toml").write_text(_entry("00_a") + _entry("01_b", group='"B"')
                                      + _entry("02_c"))
    with pytest.raises(series.SeriesError, match=r"\[02_c\]\.group: 'A' again after 'B'"):
        series.load(tiny)
    (tiny / "series.toml").unlink()
    with pytest.raises(series.SeriesError, match="series.toml: missing"):
        series.load(tiny)


def test_the_series_is_the_notebooks():
    entries = series.load(REPO / "notebooks")
    assert list(entries) == sorted(p.stem for p in (REPO / "notebooks").glob("[0-9]*.ipynb"))
    assert len(series.groups(entries)) >= 2


def _copy(tmp: Path) -> Path:
    root = tmp / "tree"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "screenshots")
    for folder in ("helpers", "tools", "notebooks", "docs", "book", "tests/support"):
        shutil.copytree(REPO / folder, root / folder, ignore=skip)
    (root / "tests" / "tools").mkdir()
    for name in ("pyproject.toml", "README.md", "tests/conftest.py", *CHECK_FILES):
        shutil.copy2(REPO / name, root / name)
    return root


def _minimal_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(
                    f"# {TITLE}\n\n**What you will learn**\n- how a notebook joins the "
                    "series: one entry in notebooks/series.toml."),
                nbformat.v4.new_code_cell("from helpers import Report", id="c02")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    return nb


def _run(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True,
                          timeout=TIMEOUT_S, env={**clean, **(env or {})})


def _add(root: Path, entry: bool) -> dict:
    """The checklist's steps in the copy: the notebook, its entry, its executed copy (what
    `python -m tools.build` leaves), its place in the week, then the tools that write."""
    notebook = _minimal_notebook()
    nbformat.write(notebook, root / "notebooks" / f"{STEM}.ipynb")
    if entry:
        with (root / "notebooks" / "series.toml").open("a") as table:
            table.write(ENTRY)
    build = root / "build"
    (build / "executed").mkdir(parents=True)
    notebook.metadata["papermill"] = {"duration": 3.2, "end_time": "2026-12-04T10:00:00+00"}
    nbformat.write(notebook, build / "executed" / f"{STEM}.ipynb")
    kit_py, kit_md = root / "tools" / "kit.py", root / "docs" / "kit" / "README.md"
    day5 = '("week, day 5", 240, "lab", ("23", "24", "26", "28", "27")),'
    said = "then 27 (last: its planner covers every parallelism of 14 to 24)"
    assert day5 in kit_py.read_text() and f"{said}." in kit_md.read_text(), (
        "the kit's day 5 moved: update this test")
    kit_py.write_text(kit_py.read_text().replace(day5, day5.replace('"27")', '"27", "29")')))
    kit_md.write_text(kit_md.read_text().replace(f"{said}.", f"{said}, then 29."))
    return {"TUTORIAL_BUILD_DIR": str(build)}


def _staged_index(root: Path) -> subprocess.CompletedProcess:
    script = ("import sys; from pathlib import Path; from tools import site\n"
              "src = Path(sys.argv[1])\n"
              f"site.stage([Path('notebooks/00_ranks_and_world.ipynb'), "
              f"Path('notebooks/{STEM}.ipynb')], src, src.parent / 'thumbs', 'stamp')\n"
              "print(site.__file__); print((src / 'index.md').read_text())")
    return _run(root, "-c", script, str(root.parent / "src"))


def _checks(root: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return _run(root, "-m", "pytest", "-n", "0", "-q", "-rA", "-p", "no:cacheprovider",
                *CHECK_FILES, "-k", " or ".join(CHECKS), env=env)


def _passed(done: subprocess.CompletedProcess) -> set[str]:
    return {line.split("::")[-1] for line in done.stdout.splitlines()
            if line.startswith("PASSED ")}


@pytest.mark.docs
def test_a_notebook_added_with_its_entry_passes_the_checks(tmp_path):
    root = _copy(tmp_path)
    # What passes before: the others' work in progress can leave an architecture check red
    # in the checkout itself; adding a notebook must turn none red, the kit's and the
    # site's must all pass.
    before = _passed(_checks(root))
    env = _add(root, entry=True)
    wrote = _run(root, "-m", "tools.dependencies", "--write-map")
    assert wrote.returncode == 0 and "map rewritten" in wrote.stdout, wrote.stderr
    kit = _run(root, "-m", "tools.kit", "--write", env=env)
    assert kit.returncode == 0, kit.stdout + kit.stderr
    assert "30 notebooks" in kit.stdout, kit.stdout            # the copy's, counted
    measured = json.loads((root / "docs" / "kit" / "measured.json").read_text())
    assert measured[STEM]["run_s"] == 3.2
    page = (root / "docs" / "kit" / "README.md").read_text()
    assert f"### {TITLE}\n\n- explain how a notebook joins the series;" in page
    assert f"| {STEM.replace('_', ' ')} | introductory: 00 |" in page
    assert _run(root, "-m", "tools.kit", "--check").returncode == 0
    staged = _staged_index(root)
    assert staged.returncode == 0, staged.stderr
    assert staged.stdout.startswith(str(root)), staged.stdout[:200]     # the copy's tools
    index = staged.stdout.split("## Choosing, surviving, planning", 1)[1]
    assert f'href="{STEM}.html"' in index and f":caption: Choosing, surviving, planning\n\n" \
        f"{STEM}\n```" in index
    after = _passed(_checks(root, env))
    assert before <= after and set(CHECKS[2:]) <= after, (sorted(before), sorted(after))


@pytest.mark.docs
def test_without_its_entry_the_checks_fail_naming_it(tmp_path):
    root = _copy(tmp_path)
    env = _add(root, entry=False)
    assert _run(root, "-m", "tools.dependencies", "--write-map").returncode == 0
    for args in (["-m", "tools.kit", "--check"], ["-m", "tools.kit", "--write"],
                 ["-m", "tools.series"]):
        failed = _run(root, *args, env=env)
        assert failed.returncode == 1 and MISSING in failed.stderr, (args, failed.stderr)
    staged = _staged_index(root)
    assert staged.returncode == 1 and MISSING in staged.stderr, staged.stderr[-1000:]
    done = _checks(root, env)
    assert done.returncode != 0 and MISSING in done.stdout, done.stdout[-3000:]
