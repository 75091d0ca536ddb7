"""docs/glossary-zh.md: one rendering per term, the terms issue 53 names, a clear error."""
from __future__ import annotations

import pytest

from tools import glossary

pytestmark = pytest.mark.docs

NAMED_BY_THE_ISSUE = {
    "rank", "world size", "process group", "bucket", "shard", "micro-batch", "bubble",
    "tensor parallelism", "sequence parallelism", "context parallelism",
    "expert parallelism", "pipeline parallelism", "activation recomputation",
    "gradient accumulation"}


def test_each_term_has_one_rendering_and_no_two_terms_share_one():
    terms = glossary.load()
    english = [t.english for t in terms]
    chinese = [t.chinese for t in terms]
    assert len(english) == len(set(english)) and len(chinese) == len(set(chinese))
    assert NAMED_BY_THE_ISSUE <= set(english)


def test_a_kept_english_term_says_so():
    kept = [t for t in glossary.load() if t.chinese == t.english]
    assert {t.english for t in kept} >= {"rank", "world size"}
    assert all("kept English" in t.note for t in kept)


@pytest.mark.parametrize("row, problem", [
    ("| rank | | blog | |", "not a term and its rendering"),
    ("| rank | rank | blogs | |", "unknown sources"),
    ("| rank | rank |", "not a term and its rendering"),
])
def test_a_bad_row_is_named(tmp_path, row, problem):
    path = tmp_path / "glossary.md"
    path.write_text("| English | 中文 | source | note |\n|---|---|---|---|\n" + row + "\n",
                    encoding="utf-8")
    with pytest.raises(glossary.GlossaryError, match=problem):
        glossary.load(path)
