"""The instructor's answer key (docs/kit/answers.md) answers every exercise, and stays out of
the student copies.

An exercise, as read from the notebooks:
- a checked one: a cell tagged `solution`; its key is `NN.E1`, `NN.E2`, ... in cell order;
- each numbered item of a "More exercises" list (the bold line `**More exercises**` or a
  heading `## Exercises` / `## More exercises`): `NN.M1`, `NN.M2`, ...

The key has one `### NN.E1 ...` / `### NN.M3 ...` heading per exercise, each with an
**Answer** and a **Check**; a checked exercise's entry quotes its solution cell verbatim, so a
changed solution makes its entry stale here until the key is re-checked. An exercise
without an entry fails, and so does an entry of an exercise that no longer exists, or a
heading that says "exercise" where neither a solution cell nor a list follows.
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from conftest import NOTEBOOKS, REPO
from tools.classroom import make_student
from tools.exercises import is_solution, student_stub

KEY = REPO / "docs" / "kit" / "answers.md"
MASTERS = sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))
LIST_START = re.compile(r"^(\*\*More exercises\*\*|#+ (More e|E)xercises)\s*$", re.I)
ITEM = re.compile(r"^(\d+)\. ")
ENTRY = re.compile(r"^### (\d\d)\.([EM]\d+)\b", re.M)


def exercises(nb: nbformat.NotebookNode) -> dict[str, str]:
    """Every exercise of a notebook: key (`E1`, `M2`, ...) → its text (the solution's
    source for a checked one, the item's first line for a listed one)."""
    found: dict[str, str] = {}
    checked = [c for c in nb.cells if is_solution(c)]
    for k, cell in enumerate(checked, 1):
        found[f"E{k}"] = cell.source
    listed = 0
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        in_list = False
        for line in cell.source.splitlines():
            if LIST_START.match(line.strip()):
                in_list = True
            elif in_list and line.startswith("#"):
                in_list = False
            elif in_list and ITEM.match(line):
                listed += 1
                found[f"M{listed}"] = line
    return found


def unparsed_headings(nb: nbformat.NotebookNode) -> list[str]:
    """Headings that announce an exercise with neither a solution cell nor a list under
    them, up to the next heading of the same level: an exercise this test cannot see."""
    cells = nb.cells
    lost = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if not (line.startswith("#") and "exercise" in line.lower()):
                continue
            if LIST_START.match(line.strip()):
                continue
            following = cells[i + 1:]
            stop = next((j for j, c in enumerate(following)
                         if c.cell_type == "markdown" and c.source.startswith("## ")),
                        len(following))
            if not any(is_solution(c) for c in following[:stop]):
                lost.append(line)
    return lost


def key_entries(text: str) -> dict[tuple[str, str], str]:
    """(notebook number, exercise key) → the entry's text, up to the next heading."""
    marks = list(ENTRY.finditer(text))
    entries = {}
    for m, nxt in zip(marks, marks[1:] + [None]):
        end = nxt.start() if nxt else len(text)
        body = text[m.end():end]
        body = re.split(r"^## ", body, flags=re.M)[0]
        entries[(m.group(1), m.group(2))] = body
    return entries


def _norm(code: str) -> list[str]:
    return [line.strip() for line in code.splitlines() if line.strip()]


def contains_code(body: str, code: str) -> bool:
    """Whether `code`'s lines appear in `body` in order, as consecutive non-blank lines."""
    want, have = _norm(code), _norm(body)
    return any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


def problems(notebooks: dict[str, nbformat.NotebookNode], key: str) -> list[str]:
    """Everything wrong between the notebooks and the key (empty: the key is complete)."""
    entries = key_entries(key)
    found = []
    expected = set()
    for stem, nb in notebooks.items():
        number = stem[:2]
        for heading in unparsed_headings(nb):
            found.append(f"{stem}: exercise heading with nothing to answer: {heading!r}")
        for ex, text in exercises(nb).items():
            expected.add((number, ex))
            body = entries.get((number, ex))
            if body is None:
                found.append(f"{stem} {ex}: no entry `### {number}.{ex}` in the key "
                             f"({text.splitlines()[0][:60]!r})")
                continue
            if "**Answer**" not in body or "**Check**" not in body:
                found.append(f"{number}.{ex}: the entry needs an **Answer** and a **Check**")
            if ex.startswith("E") and not contains_code(body, text):
                found.append(f"{number}.{ex}: the entry does not quote the solution cell as "
                             "it is now: re-check the answer against the notebook")
    for number, ex in sorted(set(entries) - expected):
        found.append(f"{number}.{ex}: an entry for an exercise no notebook has")
    return found


def _masters() -> dict[str, nbformat.NotebookNode]:
    return {p.stem: nbformat.read(p, as_version=4) for p in MASTERS}


@pytest.mark.docs
def test_every_exercise_has_an_answer():
    assert KEY.exists(), f"{KEY} is missing"
    assert problems(_masters(), KEY.read_text()) == []


def test_an_exercise_added_without_an_answer_fails():
    nb = nbformat.v4.new_notebook()
    solution = nbformat.v4.new_code_cell("prediction = [1] * world_size")
    solution.metadata["tags"] = ["solution"]
    nb.cells = [nbformat.v4.new_markdown_cell("## Exercise: predict, then check\n\nWhat?"),
                solution,
                nbformat.v4.new_markdown_cell("## What to remember\n\n**More exercises**\n"
                                              "1. One.\n2. Two.\n\n## Save")]
    complete = ("### 99.E1 x\n**Answer** a\n```python\nprediction = [1] * world_size\n```\n"
                "**Check** c\n### 99.M1\n**Answer** a **Check** c\n"
                "### 99.M2\n**Answer** a **Check** c\n")
    assert problems({"99_x": nb}, complete) == []
    nb.cells[-1].source = nb.cells[-1].source.replace("2. Two.", "2. Two.\n3. Three.")
    assert problems({"99_x": nb}, complete) == ["99_x M3: no entry `### 99.M3` in the key "
                                                "('3. Three.')"]
    nb.cells[1].source = "prediction = [2] * world_size"
    assert any("99.E1: the entry does not quote" in p for p in problems({"99_x": nb},
                                                                        complete))
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("## Exercise: a new one\n\nWhy?"))
    assert any("exercise heading with nothing" in p for p in problems({"99_x": nb}, complete))
    assert any("an entry for an exercise no notebook has" in p
               for p in problems({}, complete))


def _key_code_lines(key: str) -> set[str]:
    """The code lines of the key's fenced blocks that carry an answer."""
    lines = set()
    for block in re.findall(r"```[a-z]*\n(.*?)```", key, flags=re.S):
        for line in _norm(block):
            line = line.split("  #")[0].strip()
            if len(line) > 12 and not line.startswith("#"):
                lines.add(line)
    return lines


@pytest.mark.docs
def test_the_key_stays_out_of_the_student_copies(tmp_path: Path):
    written = make_student(tmp_path)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == \
        sorted(p.name for p in MASTERS), "the student folder holds more than the notebooks"
    key = KEY.read_text()
    answer_lines = _key_code_lines(key)
    assert answer_lines, "the key has no code to look for"
    for path in written:
        student = nbformat.read(path, as_version=4)
        text = "\n".join(c.source for c in student.cells)
        assert "kit/answers" not in text and "answers.md" not in text, path.name
        master = nbformat.read(NOTEBOOKS / path.name, as_version=4)
        # What the master shows outside its answers, and the scaffolding its author gives
        # students in place of an answer (the cell's `student` text), is no leak.
        given = [c.source if not is_solution(c) else student_stub(c) for c in master.cells]
        shown = {line.split("  #")[0].strip() for source in given
                 for line in source.splitlines()}
        leaked = {line for line in answer_lines - shown
                  if line in {x.split("  #")[0].strip() for x in text.splitlines()}}
        assert not leaked, f"{path.name} shows the key's answer lines: {sorted(leaked)[:3]}"


@pytest.mark.docs
@pytest.mark.parametrize("stem", [p.stem for p in MASTERS])
def test_the_key_names_each_notebook(stem: str):
    """Each notebook with exercises has a section `## NN_name` in the key."""
    nb = nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4)
    if exercises(nb):
        assert re.search(rf"^## {re.escape(stem)}\s*$", KEY.read_text(), re.M), stem
