"""The instructor's kit (docs/kit/README.md, tools.kit): its table and outcomes are the ones the
tool writes (from notebooks/series.toml and docs/kit/measured.json), its course paths fit their
time and their prerequisites, its outcomes cover every notebook, and it is on the site while
the answer key (docs/kit/answers.md) is neither there nor in the student copies."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nbformat
import pytest

from conftest import NOTEBOOKS, REPO
from tools import kit, series, site
from tools.classroom import make_student

SOURCES = kit.notebooks(NOTEBOOKS)
ENTRIES = series.load(NOTEBOOKS)          # notebooks/series.toml, checked against notebooks/
NEEDS = kit.prerequisites(ENTRIES)
PAGE = (REPO / "docs" / "kit" / "README.md").read_text()
ANSWER_KEY = REPO / "docs" / "kit" / "answers.md"
# An answer key entry's heading, "### 05.E1 ..." or "### 11.M3 ...", as text or as HTML.
KEY_ENTRY = re.compile(r"\b\d\d\.[EM]\d+\b")
# What a learner does, in words a test or a question can check.
VERBS = {"compute", "predict", "explain", "write", "say", "state", "name", "list", "size",
         "lay", "read", "choose", "fix", "recover", "build", "compare", "tell", "time",
         "fit", "save", "check", "count", "use"}


@pytest.mark.docs
def test_the_table_in_the_kit_is_the_one_the_tool_writes():
    wanted = kit.written(PAGE, SOURCES, kit.read_measured(), ENTRIES)
    assert wanted == PAGE, ("docs/kit/README.md's table or outcomes are out of date: after "
                            "`make html`, run `python -m tools.kit --write`")


def test_every_notebook_has_a_measured_run_time():
    measured = kit.read_measured()
    assert sorted(measured) == list(ENTRIES)
    assert all(entry["run_s"] > 0 for entry in measured.values()), measured


@pytest.mark.docs
def test_every_notebook_has_two_to_four_outcomes_a_teacher_can_assess():
    assert list(ENTRIES) == [p.stem for p in SOURCES]
    for stem, entry in ENTRIES.items():
        assert 2 <= len(entry.outcomes) <= 4, f"{stem}: {len(entry.outcomes)} outcomes"
        for item in entry.outcomes:
            assert item.split()[0] in VERBS, f"{stem}: not a checkable verb: {item!r}"
            assert not item.endswith((";", ".")), f"{stem}: the page adds the ; or .: {item!r}"
    section = PAGE.split("## Learning outcomes", 1)[1]
    assert [h[:2] for h in re.findall(r"^### (.+)$", section, flags=re.M)] == list(NEEDS)


def test_the_course_paths_fit_their_time_and_come_after_what_they_need():
    per_stem = kit.per_notebook(SOURCES, kit.read_measured())
    for name, (minutes, available) in kit.path_totals(per_stem).items():
        assert minutes <= available, f"{name}: {minutes} model minutes for {available}"
    week: list[str] = []
    for name, _, _, stems in kit.PATHS:
        done = week if name.startswith("week") else []
        for stem in stems:
            missing = set(NEEDS[stem]) - set(done)
            assert not missing, f"{name}: {stem} comes before {sorted(missing)}"
            done.append(stem)
    assert sorted(week) == sorted(per_stem) and len(week) == len(set(week)), (
        "the week does not take every notebook once")


@pytest.mark.docs
def test_prerequisites_point_back_and_the_difficulty_follows_the_stated_rule():
    assert list(NEEDS) == [p.stem[:2] for p in SOURCES]
    for stem, needs in NEEDS.items():
        assert all(need < stem for need in needs), f"{stem} needs a later notebook: {needs}"
    stated = (f"{kit.INTERMEDIATE_FROM - 1:02d} or earlier",
              f"{kit.INTERMEDIATE_FROM:02d} to {kit.ADVANCED_FROM - 1}",
              f"{kit.ADVANCED_FROM} or later")
    assert all(rule in " ".join(PAGE.split()) for rule in stated), stated
    assert [kit.difficulty(s) for s in ("00", "07", "08", "15", "16", "20")] == [
        "introductory", "introductory", "intermediate", "intermediate", "advanced", "advanced"]


@pytest.mark.docs
def test_the_page_states_the_rates_the_model_uses():
    text = " ".join(PAGE.split())
    for rate in (f"{kit.PROSE_WPM} words a minute", f"{kit.CODE_LINES_PER_MIN} lines a minute",
                 f"{kit.MINUTES_PER_EXERCISE} minutes a checked exercise",
                 "No walkthrough by a person was timed"):
        assert rate in text, rate


def _notebook(tmp_path: Path, duration: float | None = 30.0) -> Path:
    nb = nbformat.v4.new_notebook()
    solution = nbformat.v4.new_code_cell("prediction = [1, 2]\n\nprint(prediction)")
    solution.metadata["tags"] = ["solution"]
    nb.cells = [nbformat.v4.new_markdown_cell("# 01 · tiny\n\n" + "word " * 236),
                nbformat.v4.new_code_cell("x = 1\n\n\ny = 2\n" + "z = 3\n" * 5), solution,
                nbformat.v4.new_markdown_cell("**More exercises**\n1. one\n2. two\n\n## End")]
    if duration is not None:
        nb.metadata["papermill"] = {"duration": duration, "end_time": "2026-12-01T18:03:25+00"}
    path = tmp_path / "01_tiny.ipynb"
    nbformat.write(nb, path)
    return path


def test_counts_and_minutes_of_a_tiny_notebook(tmp_path):
    counts = kit.count(_notebook(tmp_path))
    assert (counts.words, counts.code_lines, counts.exercises, counts.more_exercises) == (
        236 + 4 + 8, 9, 1, 2)   # words split by white space, markup too; non-blank lines
    # 30 s run + 248 / 238 min prose + 9 / 10 min code = 2.44 min; + 5 min for the exercise
    assert kit.minutes(counts, 30.0) == {"walkthrough": 3, "lab": 8}


def test_run_times_and_slides_come_from_the_executed_copies_the_old_ones_kept(tmp_path):
    from tools.slide_layout import layout

    executed = tmp_path / "executed"
    executed.mkdir()
    source = _notebook(tmp_path)
    copy = _notebook(executed, duration=12.34)
    assert copy.name == source.name
    kept = {"01_tiny": {"run_s": 99.0, "ended": "old"}, "02_gone": {"run_s": 1.0}}
    deck = layout(nbformat.read(copy, as_version=4))
    slides = sum(c.metadata.get("slideshow", {}).get("slide_type") in ("slide", "subslide")
                 for c in deck.cells)
    assert slides >= 1
    assert kit.refresh_measured(executed, [source], kept) == {
        "01_tiny": {"run_s": 12.3, "ended": "2026-12-01T18:03", "slides": slides}}
    copy.unlink()
    assert kit.refresh_measured(executed, [source], kept) == {"01_tiny": kept["01_tiny"]}
    _notebook(executed, duration=None)
    with pytest.raises(ValueError, match="no papermill duration"):
        kit.refresh_measured(executed, [source], {})
    with pytest.raises(ValueError, match="no measured run time for \\['01_tiny'\\]"):
        kit.table([source], {})
    with pytest.raises(ValueError, match="lacks the markers"):
        kit.with_table("# a page without them", "| table |")


def test_an_executed_copy_is_current_only_with_the_stamp_of_the_notebook_as_it_is(
        tmp_path, monkeypatch):
    from tools import build

    notebook = SOURCES[0]
    for name in ("EXECUTED_DIR", "STAMP_DIR"):
        monkeypatch.setattr(build, name, tmp_path / name)
        (tmp_path / name).mkdir()
    assert not kit.executed_is_current(notebook)                     # no copy
    (tmp_path / "EXECUTED_DIR" / notebook.name).write_text("{}")
    stamp = tmp_path / "STAMP_DIR" / f"{notebook.stem}.sha256"
    stamp.write_text("an older run")
    assert not kit.executed_is_current(notebook)
    stamp.write_text(build.fingerprint(notebook))
    assert kit.executed_is_current(notebook)
    # make html stamps with the TUTORIAL_WARM_START it sets; the kit runs without it
    for warm in ("1", "0"):
        monkeypatch.setenv("TUTORIAL_WARM_START", warm)
        stamp.write_text(build.fingerprint(notebook))
        monkeypatch.delenv("TUTORIAL_WARM_START")
        assert kit.executed_is_current(notebook), warm
        assert "TUTORIAL_WARM_START" not in os.environ
    monkeypatch.setenv("TUTORIAL_WARM_START", "2")
    stamp.write_text(build.fingerprint(notebook))
    monkeypatch.setenv("TUTORIAL_WARM_START", "1")
    assert not kit.executed_is_current(notebook)
    assert os.environ["TUTORIAL_WARM_START"] == "1"


def test_measured_json_is_what_write_keeps():
    assert json.loads((REPO / "docs" / "kit" / "measured.json").read_text()) == \
        kit.read_measured()


def _key_headings() -> list[str]:
    """The answer key's entry headings, if the key exists."""
    if not ANSWER_KEY.is_file():
        return []
    return re.findall(r"^### (.+)$", ANSWER_KEY.read_text(), flags=re.M)


def _texts(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text(errors="replace")
            for p in folder.rglob("*") if p.is_file() and p.suffix in
            {".md", ".html", ".txt", ".js", ".ipynb", ".json"}}


@pytest.mark.docs
def test_the_staged_book_has_the_kit_page_and_nothing_of_the_answer_key(tmp_path):
    kit_dir = tmp_path / "kit"
    kit_dir.mkdir()
    (kit_dir / "README.md").write_text(PAGE)
    (kit_dir / "answers.md").write_text("### 05.E1 all_reduce\n\nSENTINEL-ANSWER\n")
    src = tmp_path / "src"
    site.stage([], src, tmp_path / "thumbs", "stamp", kit_source=kit_dir / "README.md")
    assert (src / "kit.md").read_text().endswith(PAGE)
    assert "](kit.md)" in (src / "index.md").read_text()
    texts = _texts(src)
    assert not [name for name in texts if "answer" in name.lower()], sorted(texts)
    assert not [name for name, text in texts.items() if "SENTINEL-ANSWER" in text]


def test_without_a_kit_page_the_index_has_no_link(tmp_path):
    site.stage([], tmp_path / "src", tmp_path / "thumbs", "stamp",
                kit_source=tmp_path / "absent.md")
    assert "kit" not in (tmp_path / "src" / "index.md").read_text()


@pytest.mark.docs
def test_the_built_site_links_the_kit_from_the_index_and_has_no_answer_key(tmp_path):
    html = tmp_path / "html"
    site.render([], html, tmp_path / "thumbs", "stamp")
    assert 'href="kit.html"' in (html / "index.html").read_text()
    page = (html / "kit.html").read_text()
    assert "Learning outcomes" in page and "90-minute lecture" in page
    texts = _texts(html)
    assert not [name for name in texts if "answers" in name.lower()], sorted(texts)
    leaked = [(name, heading) for heading in _key_headings() for name, text in texts.items()
              if heading in text]
    assert not leaked, leaked
    assert not [name for name, text in texts.items()
                if name.endswith(".html") and KEY_ENTRY.search(text)]


@pytest.mark.docs
def test_the_student_copies_are_the_notebooks_only(tmp_path):
    written = make_student(tmp_path / "student")
    assert sorted(p.name for p in (tmp_path / "student").iterdir()) == \
        sorted(p.name for p in SOURCES) == sorted(p.name for p in written)
    headings = _key_headings()
    leaked = [(p.name, h) for p in written for h in headings if h in p.read_text()]
    assert not leaked, leaked
