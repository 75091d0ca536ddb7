"""The ledger's quotes in the Chinese edition: the sentence a Chinese reader sees of each claim
is a translation of the claimed one and keeps its checkable facts.

For each claim of CLAIMS (tests/claims/test_claims.py), in its notebook's catalog
(locales/zh_CN/LC_MESSAGES/<stem>.po) and in the Chinese notebook that tools.i18n.cells
makes from it:

1. the quote lies in catalog entries, each translated and none fuzzy. The entries are the
   blocks (tools.i18n.cells.units: paragraph, heading, list item, table cell) of the claim's
   cell whose source overlaps the quote, whitespace flattened: one block almost always; a
   quote of a table row overlaps each cell it holds, and every one of them counts;
2. the Chinese cell of that id holds each entry's msgstr (what the reader sees is that
   translation);
3. every fact of the quote is in those msgstrs: each inline code span (a span the quote cuts
   counts for the part it holds), each number as the English writes it (48, 8,192, 2.13,
   1/4), each name (NCCL_DEBUG, ProcessGroupGloo, SIGABRT, FSDP2, arxiv.org) and each number
   word. Chinese writes some of these otherwise: a number word as its numeral (NUMBER_WORDS:
   two -> 两, 二 or 2), "2-D" as 二维, and a name the English inflects (GPUs, all_gathers,
   reduce_scattered) as the name itself (`spellings`): Chinese has no plural. "one" and
   "once" are left out: mostly a pronoun ("the one that") and "at once".

A claim quoting a code cell needs none of these: its quote stands while the Chinese notebook's
code cell is the English one, byte for byte (comments are never translated).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import nbformat
import pytest
from babel.messages.catalog import Catalog

from test_claims import CLAIMS, NOTEBOOKS, Claim, _flat
from tools.i18n import catalogs
from tools.i18n.cells import translate_notebook, units

pytestmark = pytest.mark.docs

_CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")   # a code span, as CommonMark pairs
_TOKEN = re.compile(r"\w+(?:[.,/^]\w+)*")
_NUMBER = re.compile(r"\d+(?:[.,/^]\d+)*")
_DIMENSIONS = re.compile(r"\b(\d)-D\b")
_NUMERALS = "零一二三四五六七八九十"
# An English number word -> how the Chinese may write it.
NUMBER_WORDS = {"two": ("两", "二", "2"), "three": ("三", "3"), "four": ("四", "4"),
                "five": ("五", "5"), "six": ("六", "6"), "seven": ("七", "7"),
                "eight": ("八", "8"), "nine": ("九", "9"), "ten": ("十", "10"),
                "twice": ("两", "二", "2"), "half": ("半",)}
_WORDS = re.compile(r"\b(" + "|".join(NUMBER_WORDS) + r")\b", re.IGNORECASE)
_INFLECTIONS = ("es", "ed", "s", "d")        # GPUs, all_reduces, reduce_scattered


@dataclass(frozen=True)
class Fact:
    """A checkable piece of a quote: as the English writes it, and what stands for it."""
    english: str
    spellings: tuple[str, ...]


def is_name(token: str) -> bool:
    """NCCL_DEBUG, ProcessGroupGloo, SIGABRT, FSDP2, 1F1B, torch.distributed: a name, not a
    word to translate (a word with an underscore, two capitals, a letter and a digit, or a
    dotted path; e.g. is no path)."""
    if not re.search(r"[A-Za-z]", token):
        return False
    dotted = "." in token and all(len(part) > 1 for part in token.split("."))
    return bool("_" in token or dotted or re.search(r"[a-z][A-Z]|[A-Z].*[A-Z]", token)
                or re.search(r"\d", token))


def spellings(token: str) -> tuple[str, ...]:
    """A name and, where the English inflects it (GPUs, reduce_scattered), its stem too."""
    stems = [token[:-len(end)] for end in _INFLECTIONS
             if token.endswith(end) and len(token) > len(end) + 1]
    return (token, *stems)


def facts(text: str, code: list[str]) -> list[Fact]:
    """The facts of `text` (a quote with its code spans cut out) and of its code spans."""
    found = [Fact(span, (span,)) for span in code]
    text = _DIMENSIONS.sub(lambda m: found.append(
        Fact(m.group(0), (m.group(0), _NUMERALS[int(m.group(1))] + "维"))) or " ", text)
    for word in _WORDS.findall(text):
        found.append(Fact(word, NUMBER_WORDS[word.lower()]))
    for token in _TOKEN.findall(text):
        if _NUMBER.fullmatch(token):
            found.append(Fact(token, (token,)))
        elif is_name(token):
            found.append(Fact(token, spellings(token)))
    return found


def quote_parts(source: str, quote: str) -> tuple[str, list[str]] | None:
    """The quote's text outside code and its code (a whole span with its backticks, a cut
    span's inside): the spans are found in the cell, so a quote that starts or ends inside a
    span still knows which of its text is code. None if the cell does not hold the quote."""
    flat, quote = _flat(source), _flat(quote)
    a = flat.find(quote)
    if a < 0:
        return None
    b, prose, code, at = a + len(quote), [], [], a
    for m in _CODE.finditer(flat):
        s, e = m.span()
        if e <= a or s >= b:
            continue
        prose.append(flat[at:max(s, a)])
        whole = a <= s and e <= b
        code.append(m.group(0) if whole else flat[max(s, a):min(e, b)].strip("`"))
        at = min(e, b)
    prose.append(flat[at:b])
    return " ".join(prose), [c for c in code if c.strip()]


def entries_of(source: str, quote: str) -> list[tuple[str, str]]:
    """(msgid, kind) of each block of the cell whose source overlaps the quote."""
    flat, quote = _flat(source), _flat(quote)
    a = flat.find(quote)
    if a < 0:
        return []
    b, cursor, found = a + len(quote), 0, []
    for unit in units(source):
        raw = _flat(unit.raw)
        s = flat.find(raw, cursor)
        if s < 0:
            continue
        cursor = s + len(raw)
        if s < b and a < cursor:
            found.append((unit.msgid, unit.kind))
    return found


@dataclass(frozen=True)
class Edition:
    """A notebook in English and in Chinese, and the catalog between them."""
    english: dict[str, nbformat.NotebookNode]      # cell id -> cell
    chinese: dict[str, nbformat.NotebookNode]
    catalog: Catalog


def edition(nb: nbformat.NotebookNode, catalog: Catalog) -> Edition:
    chinese, _, _ = translate_notebook(nb, catalog)
    return Edition({c.get("id"): c for c in nb.cells},
                   {c.get("id"): c for c in chinese.cells}, catalog)


@lru_cache(maxsize=None)
def page(stem: str) -> Edition:
    """The notebook's edition, read and translated once per session."""
    catalog = catalogs.page_catalog(stem)
    if catalog is None:
        raise AssertionError(f"{stem}: no catalog in {catalogs.catalog_dir()}")
    return edition(nbformat.read(NOTEBOOKS / f"{stem}.ipynb", as_version=4), catalog)


def problems(claim: Claim, ed: Edition) -> list[str]:
    """What keeps the Chinese reader from seeing the claim's sentence; empty when nothing."""
    where = f"{claim.key} ({claim.notebook} cell {claim.cell})"
    english, chinese = ed.english.get(claim.cell), ed.chinese.get(claim.cell)
    if english is None or chinese is None:
        return [f"{where}: no cell {claim.cell} in both editions"]
    if english.cell_type != "markdown":
        return [] if chinese.source == english.source else \
            [f"{where}: the Chinese code cell differs from the English one"]
    parts = quote_parts(english.source, claim.quote)
    if parts is None:
        return [f"{where}: the English cell no longer says {claim.quote!r}"]
    blocks = entries_of(english.source, claim.quote)
    if not blocks:
        return [f"{where}: {claim.quote!r} lies in no catalog entry (no block of the cell)"]
    left, msgstrs = [], []
    for msgid, kind in blocks:
        message = ed.catalog.get(msgid)          # the block's entry (no msgctxt)
        if message is None:
            left.append(f"{where}: {claim.quote!r} lies in no catalog entry; its block: "
                        f"{msgid!r}")
            continue
        bad = catalogs.problems([message])
        if bad:
            left.append(f"{where}: the entry holding {claim.quote!r} is {bad[0][0]}: "
                        f"{msgid!r}")
            continue
        shown = re.sub(r"(?<!\\)\|", r"\\|", message.string) if kind == "cell" else \
            message.string
        if _flat(shown) not in _flat(chinese.source):
            left.append(f"{where}: the Chinese cell does not hold the translation of "
                        f"{msgid!r}: {message.string!r}")
        msgstrs.append(message.string)
    if left:
        return left
    text = " ".join(msgstrs)
    lost = [f.english for f in facts(*parts) if not any(s in text for s in f.spellings)]
    return [f"{where}: the Chinese {text!r} lacks {lost} of {claim.quote!r}"] if lost else []


@pytest.mark.parametrize("claim", CLAIMS, ids=[c.key for c in CLAIMS])
def test_the_quote_is_translated_with_its_facts(claim):
    found = problems(claim, page(claim.notebook))
    assert not found, "\n".join(found)


# ---------------------------------------------------------------- each failure, for real

def _synthetic(markdown: str, entries: dict[str, str], fuzzy: tuple[str, ...] = (),
               code: str = "x = 1  # a comment") -> Edition:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(markdown, id="m1"),
                nbformat.v4.new_code_cell(code, id="c1")]
    catalog = Catalog(locale="zh_CN")
    for msgid, msgstr in entries.items():
        catalog.add(msgid, msgstr, flags=("fuzzy",) if msgid in fuzzy else ())
    return edition(nb, catalog)


SENTENCE = "gloo sends 48 bytes of `header` with NCCL_DEBUG=INFO on two ranks."
GOOD = "gloo 在两个 rank 上发送 48 字节的 `header`，NCCL_DEBUG=INFO。"


def _claim(quote: str, cell: str = "m1") -> Claim:
    return Claim("xx-synthetic", "xx_synthetic", cell, quote, "source", "a synthetic claim")


def test_a_faithful_translation_passes():
    assert problems(_claim("sends 48 bytes of `header` with NCCL_DEBUG"),
                    _synthetic(SENTENCE, {SENTENCE: GOOD})) == []


def test_a_quote_in_no_catalog_entry_fails_naming_it():
    found = problems(_claim("48 bytes"), _synthetic(SENTENCE, {"another": "另一个"}))
    assert len(found) == 1 and "no catalog entry" in found[0]
    assert "xx-synthetic" in found[0] and "xx_synthetic cell m1" in found[0] \
        and "48 bytes" in found[0]


def test_a_fuzzy_or_untranslated_entry_fails():
    fuzzy = problems(_claim("48 bytes"), _synthetic(SENTENCE, {SENTENCE: GOOD}, (SENTENCE,)))
    assert len(fuzzy) == 1 and "is fuzzy" in fuzzy[0]
    empty = problems(_claim("48 bytes"), _synthetic(SENTENCE, {SENTENCE: SENTENCE}))
    assert len(empty) == 1 and "is untranslated" in empty[0]


@pytest.mark.parametrize("lost, msgstr", [
    ("48", GOOD.replace("48", "四十八")),
    ("`header`", GOOD.replace("`header`", "header")),
    ("NCCL_DEBUG", GOOD.replace("NCCL_DEBUG", "NCCL 调试")),
    ("two", GOOD.replace("两个", "多个")),
])
def test_a_msgstr_missing_a_fact_fails_naming_it(lost, msgstr):
    found = problems(_claim(SENTENCE), _synthetic(SENTENCE, {SENTENCE: msgstr}))
    assert len(found) == 1 and f"[{lost!r}]" in found[0], found


def test_a_chinese_cell_without_the_msgstr_fails():
    ed = _synthetic(SENTENCE, {SENTENCE: GOOD})
    ed.chinese["m1"].source = "something else"
    found = problems(_claim("48 bytes"), ed)
    assert len(found) == 1 and "does not hold the translation" in found[0]


def test_a_code_cell_claim_stands_while_the_code_is_the_same():
    ed = _synthetic(SENTENCE, {SENTENCE: GOOD})
    assert problems(_claim("# a comment", "c1"), ed) == []
    ed.chinese["c1"].source = "x = 1  # 注释"
    assert "code cell differs" in problems(_claim("# a comment", "c1"), ed)[0]


def test_a_quote_of_a_table_row_needs_every_cell_it_holds():
    table = "| op | factor |\n|---|---|\n| all_reduce | 2(*n* − 1)/*n* |\n"
    cells = {"op": "操作", "factor": "系数", "all_reduce": "`all_reduce`",
             "2(*n* − 1)/*n*": "2(*n* − 1)/*n*"}
    quote = "| all_reduce | 2(*n* − 1)/*n* |"
    assert problems(_claim(quote), _synthetic(table, cells)) == []
    assert [m for m, _ in entries_of(table, quote)] == ["all_reduce", "2(*n* − 1)/*n*"]
    cut = dict(cells, **{"2(*n* − 1)/*n*": "2/*n*"})
    assert "['1']" in problems(_claim(quote), _synthetic(table, cut))[0]


def test_a_quote_cut_inside_a_code_span_knows_its_code():
    text = "With `new_group(ranks, flag=True)` only the members wait"
    prose, code = quote_parts(text, "flag=True)` only the members")
    assert code == ["flag=True)"] and "flag" not in prose


@pytest.mark.parametrize("english, chinese", [
    ("the tensors are 2-D", "张量是二维的"), ("runs on GPUs", "在 GPU 上运行"),
    ("two all_gathers", "两次 `all_gather`"),
    ("it reduce_scattered the rows", "它对各行做了 reduce_scatter"),
    ("half the bytes", "一半的字节"),
])
def test_chinese_spellings_stand_for_the_english(english, chinese):
    found = facts(english, [])
    assert found and all(f.english not in chinese for f in found)     # not as written, but
    assert all(any(s in chinese for s in f.spellings) for f in found)  # as Chinese writes it


def test_a_word_is_no_name():
    assert [t for t in ("NCCL_DEBUG", "ProcessGroupGloo", "SIGABRT", "FSDP2", "arxiv.org",
                        "The", "e.g", "gloo") if is_name(t)] == \
        ["NCCL_DEBUG", "ProcessGroupGloo", "SIGABRT", "FSDP2", "arxiv.org"]
