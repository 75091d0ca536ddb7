"""The Reports (helpers.checks.Report) a run notebook displayed, read back from their HTML.

    reports = shown_reports(nb)                 # every one, in cell order
    reports = shown_reports(nb, "c17")          # those of one cell
    reports[0].oks == [True] * 4                # every verdict, hidden ones too
    reports[0].by_rank() == {0: True, ...}      # the verdicts that name a rank
    answers_shown_above(nb) == []               # the exercise's answer is not told above it
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field

_BLOCK = re.compile(r'<pre class="nccl-report" data-oks="([^"]*)">(.*?)</pre>', re.S)
_TITLE = re.compile(r"^<b>(.*?)</b>\n", re.S)
_VERDICT = re.compile(r'<span class="verdict" data-rank="([^"]*)" data-ok="([^"]*)"[^>]*>'
                      r"(.*?)\n</span>", re.S)
_NOTE = re.compile(r"<span>(.*?)\n</span>", re.S)


@dataclass
class Shown:
    cell: str
    title: str | None
    oks: list                      # True / False / None, one per verdict
    verdicts: list                 # (who, ok, line as printed): "0" or a label for who
    notes: list                    # the lines that are not verdicts

    def by_rank(self) -> dict[int, bool | None]:
        """rank → ok, for the verdicts labelled with a rank."""
        return {int(who): ok for who, ok, _ in self.verdicts if who.isdigit()}

    def lines(self) -> list[str]:
        return [line for _, _, line in self.verdicts]

    def texts(self) -> dict[int, str]:
        """rank → what its verdict says past "rank N ✓  " (the values it checked), for the
        verdicts labelled with a rank: a test asserts values, not a line's whole form."""
        return {int(who): line.split("  ", 1)[1] if "  " in line else ""
                for who, _, line in self.verdicts if who.isdigit()}


def _parse(cell_id: str, page: str) -> list[Shown]:
    found = []
    for oks, body in _BLOCK.findall(page):
        title = _TITLE.match(body)
        found.append(Shown(
            cell=cell_id, title=html.unescape(title.group(1)) if title else None,
            oks=json.loads(html.unescape(oks)),
            verdicts=[(html.unescape(who), json.loads(ok), html.unescape(text))
                      for who, ok, text in _VERDICT.findall(body)],
            notes=[html.unescape(text) for text in _NOTE.findall(body)]))
    return found


def shown_reports(nb, cell_id: str | None = None) -> list[Shown]:
    """Every Report the executed notebook displayed (or only cell `cell_id`'s), in order."""
    found = []
    for cell in nb.cells:
        if cell.cell_type != "code" or (cell_id is not None and cell.get("id") != cell_id):
            continue
        for out in cell.get("outputs", []):
            page = out.get("data", {}).get("text/html")
            if page:
                found += _parse(cell.get("id", ""), "".join(page))
    return found


def assert_all_pass(nb, n_ranks: int) -> list[Shown]:
    """Every Report the notebook showed is all ✓ (no ✗ anywhere on the page), and each
    rank has a ✓ verdict; the Reports, for the notebook's own checks."""
    from notebook_runner import crossed_lines

    crossed = crossed_lines(nb)
    assert not crossed, crossed
    reports = shown_reports(nb)
    assert reports, "the notebook showed no Report"
    for shown in reports:
        assert all(ok is True for ok in shown.oks), (shown.cell, shown.title, shown.lines())
    for rank in range(n_ranks):
        assert any(shown.by_rank().get(rank) is True for shown in reports), \
            f"no ✓ for rank {rank}"
    return reports


def exercise(reports: list[Shown]) -> Shown:
    """The exercise's grade: the one Report titled "Your prediction ..."."""
    [graded] = [s for s in reports if (s.title or "").startswith("Your prediction")]
    return graded


# --------------------------------------------------------------------------- answers above

_MEASURED = re.compile(r"   measured (.*?)(?:  \((.*)\))?$")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_TAGS = re.compile(r"<(script|style)\b.*?</\1>|<[^>]+>", re.S | re.I)
# An nccl-tests table's average busbw (helpers.bench.nccl_tests), and its folded summary's.
_TIMED_LINE = re.compile(r"^# Avg bus bandwidth[ \t]*:.*$|avg busbw \S+ GB/s", re.M)


def _distinctive(number: str) -> bool:
    """A number rarely printed by chance: an integer of 3 digits or more (100, 3072), or
    a fraction with 3 significant digits or more (0.125); not 2, 16.0 or 0.75."""
    value = float(number)
    if value.is_integer():
        return abs(value) >= 100
    return len(number.lstrip("-0.").replace(".", "").split("e")[0]) >= 3


def _squeezed(text: str) -> str:
    """No spaces around brackets and commas: `[4, 3, 2, 1]` and `[4,3,2,1]` read alike."""
    return re.sub(r"\s*([\[\],])\s*", r"\1", text)


def _telling(value: str) -> bool:
    """A value whose printed form is rarely there by chance: a list of 2 values or more,
    or a distinctive number (`_distinctive`); not `[16.0]`, 2, True or None."""
    if value.startswith("["):
        return value.count(",") >= 1
    return bool(_NUMBER.fullmatch(value)) and _distinctive(value)


@dataclass
class Answer:
    """The printed forms of an exercise's measured answer (`answer_of`)."""
    anywhere: list[str]            # forms that tell wherever they show
    by_rank: dict[int, str]        # rank → its value: tells when every rank shows with its own
    numbers: dict[int, str] = field(default_factory=dict)   # rank → value, every rank a number


def answer_of(graded: Shown) -> Answer:
    """The measured answer of an exercise, read from its grade's lines ("measured ...").

    Ranks the API leaves undefined (their answer is None) are left out; named values
    (a dict) are each an answer of their own. Forms that tell wherever they show: every
    rank's value as a list, `[4, 3, 2, 1]`, when they differ and every rank has one; the
    one value when every rank with a value has the same and it is `_telling` (3072,
    `[30.0, 31.0]`). When the ranks' values differ and each is `_telling`, `by_rank`:
    each rank's own, which tells only rank by rank (a line that names "rank r" and then
    its value, for every r): values that differ are often the inputs, printed above as
    what each rank starts with (notebook 09's send/recv).
    True/False/None, one-element lists and small numbers tell nothing alone: they are
    printed above every exercise for other reasons. Where every rank has a number,
    `numbers` keeps them for the forms read in context (`_told_in_context`), and a value
    of 2 digits or more that every rank has is also looked for as the per-rank list,
    `[25, 25]`."""
    values = {}
    for who, _, line in graded.verdicts:
        found = _MEASURED.search(line)
        if found and not (found.group(2) or "").startswith("not defined"):
            values[who] = found.group(1)
    ranks = graded.by_rank()
    distinct = list(dict.fromkeys(values.values()))
    anywhere, by_rank = [], {}
    if len(distinct) > 1 and ranks and len(values) == len(ranks):
        anywhere.append("[" + ", ".join(values[str(r)] for r in sorted(ranks)) + "]")
    if not ranks:                          # named values (a dict): each its own answer
        anywhere += [value for value in distinct if _telling(value)]
    elif len(distinct) == 1 and _telling(distinct[0]):
        anywhere.append(distinct[0])
    elif len(distinct) > 1 and all(map(_telling, distinct)) and ranks:
        by_rank = {int(who): v for who, v in values.items() if who.isdigit()}
    numbers = {}
    if len(ranks) > 1 and len(values) == len(ranks) and all(
            _NUMBER.fullmatch(v) for v in values.values()):
        numbers = {r: values[str(r)] for r in sorted(ranks)}
        if len(distinct) == 1 and _notable(distinct[0]):       # 25/25, [25, 25]
            anywhere.append("[" + ", ".join(numbers.values()) + "]")
    return Answer(anywhere, by_rank, numbers)


def _number_pattern(number: str) -> re.Pattern:
    """`number` as a whole token: an integer also with thousands commas or a `.0`
    (3072, 3,072, 3072.0), not inside another number or word (13072, 3072.5, x3072)."""
    value = float(number)
    if value.is_integer():
        digits = str(abs(int(value)))
        cut = len(digits) % 3 or 3
        groups = "".join(f",?{digits[i:i + 3]}" for i in range(cut, len(digits), 3))
        body = ("-" if value < 0 else "") + digits[:cut] + groups + r"(?:\.0+)?"
    else:
        body = re.escape(number)
    return re.compile(rf"(?<![\w.,]){body}(?![\w]|[.,]\d)")


def _cell_text(cell) -> str:
    """What a reader sees of a cell: a markdown cell's text; a code cell's printed and
    displayed text (text/plain, or text/html without its tags where there is no plain)."""
    if cell.cell_type == "markdown":
        return cell.source
    if cell.cell_type != "code":
        return ""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        data = out.get("data", {})
        if "text/plain" in data:
            parts.append(str(data["text/plain"]))
        elif "text/html" in data:
            parts.append(html.unescape(_TAGS.sub(" ", str(data["text/html"]))))
    return "".join(parts)


def answers_shown_above(nb) -> list[str]:
    """Where an exercise's measured answer shows above its question: "cell <id>: <form>"
    for each form (`answer_of`) found in a markdown cell or in a code cell's output
    (`_cell_text`, less its nccl-tests times: `_untimed`) before the question: the section
    heading ("## ...") over the solution; the text of the heading's own cell above the
    heading counts as above. Also the forms read in context (`_told_in_context`, issue 50):
    per-step lists that sum to the answer, the parts that sum to a total, a printed model
    value. Nothing when the notebook has no exercise or its grade shows no measured value
    (a student copy)."""
    cells = nb.cells
    solutions = [i for i, c in enumerate(cells) if "solution" in c.metadata.get("tags", [])]
    graded = [s for s in shown_reports(nb) if (s.title or "").startswith("Your prediction")]
    if not solutions or len(graded) != 1:
        return []
    answer = answer_of(graded[0])
    question = next(i for i in range(solutions[0], -1, -1) if cells[i].cell_type == "markdown"
                    and re.search(r"^## ", cells[i].source, re.M))
    above = [(c.get("id", str(i)), _untimed(_cell_text(c)))
             for i, c in enumerate(cells[:question])]
    heading = re.search(r"^## ", cells[question].source, re.M)
    above.append((cells[question].get("id", str(question)),
                  cells[question].source[:heading.start()]))
    found = []
    for cell_id, text in above:
        found += [f"cell {cell_id}: {form}" for form in answer.anywhere if _shows(form, text)]
        found += [f"cell {cell_id}: {form}" for form in _told_in_context(answer, text)]
        lines = text.splitlines()
        if answer.by_rank and all(
                any(_shows(value, line[m.end():])
                    for line in lines for m in re.finditer(rf"\brank {r}\b", line))
                for r, value in answer.by_rank.items()):
            found.append(f"cell {cell_id}: rank by rank, "
                         + ", ".join(f"rank {r} {v}" for r, v in answer.by_rank.items()))
    return found


_LIST = re.compile(r"\[([^\[\]]*)\]")
_FIGURE = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_RANK = re.compile(r"\brank (\d+)\b")


def _notable(number: str) -> bool:
    """A number that tells in its context (beside "model", in brackets, as a sum): an
    integer of 2 digits or more (25, 81), or a fraction with 3 significant digits or more;
    not 2 or 1.5."""
    value = float(number)
    return abs(value) >= 10 if value.is_integer() else _distinctive(number)


def _same(a: float, b: str) -> bool:
    return abs(a - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


def _list_sums(text: str) -> list[float]:
    """The sum of every bracketed list of 2 numbers or more in `text` ([27, 18, 18, 18])."""
    sums = []
    for body in _LIST.findall(text):
        items = [item.strip() for item in body.split(",")]
        if len(items) >= 2 and all(_NUMBER.fullmatch(item) for item in items):
            sums.append(sum(map(float, items)))
    return sums


def _segments(text: str) -> dict[int, list[str]]:
    """rank → what follows each "rank r" up to the next "rank s" or the end of its line."""
    found: dict[int, list[str]] = {}
    for line in text.splitlines():
        marks = list(_RANK.finditer(line))
        for mark, after in zip(marks, marks[1:] + [None]):
            found.setdefault(int(mark.group(1)), []).append(
                line[mark.end():after.start() if after else len(line)])
    return found


def _in_context(value: str, segment: str) -> str | None:
    """How `segment` tells `value`: "model v", "(v)", or a list that sums to v."""
    number = _number_pattern(value).pattern
    if re.search(rf"\bmodel\W{{0,3}}{number}", segment):
        return "model"
    if re.search(rf"\({number}\)", segment):
        return "(v)"
    if any(_same(total, value) for total in _list_sums(segment)):
        return "a list that sums to it"
    return None


def _told_in_context(answer: Answer, text: str) -> list[str]:
    """The forms of `answer.numbers` that `_notable` values take in context: the per-rank
    values joined by "/" (25/25), "model v" for the value every rank has, a list of
    `_distinctive` sum; rank by rank, "model v", "(v)" or a list summing to v after each
    "rank r"; for a value every rank has (a total), one column of the ranks' lines that
    sums to it."""
    values = answer.numbers
    if not values:
        return []
    distinct = set(values.values())
    found = []
    slashed = "/".join(values.values())
    if (len(distinct) > 1 or all(map(_notable, distinct))) and re.search(
            rf"(?<![\w./]){re.escape(slashed)}(?![\w/]|\.\d)", text):
        found.append(slashed)
    (one,) = distinct if len(distinct) == 1 else (None,)
    if one is not None and _notable(one):
        if re.search(rf"\bmodel\W{{0,3}}{_number_pattern(one).pattern}", text):
            found.append(f"model {one}")
        if _distinctive(one) and any(_same(t, one) for t in _list_sums(text)):
            found.append(f"a list that sums to {one}")
    segments = _segments(text)
    if all(_notable(v) for v in distinct) and all(r in segments for r in values):
        how = {r: next(filter(None, (_in_context(v, seg) for seg in segments[r])), None)
               for r, v in values.items()}
        if all(how.values()):
            found.append("rank by rank, " + ", ".join(f"rank {r} {values[r]} ({how[r]})"
                                                     for r in values))
        if one is not None and _distinctive(one) and _column_sums_to(
                one, [segments[r] for r in values]):
            found.append(f"the ranks' values, summing to {one}")
    return found


def _column_sums_to(total: str, per_rank: list[list[str]]) -> bool:
    """Does the k-th number of every rank's i-th segment add up to `total`, for some i, k?"""
    for lines in zip(*per_rank):
        figures = [[float(f.replace(",", "")) for f in _FIGURE.findall(line)] for line in lines]
        if any(all(column) and _same(sum(column), total) for column in zip(*figures)):
            return True
    return False


def _untimed(text: str) -> str:
    """`text` less the times and bandwidths of its nccl-tests tables. An exercise's answer
    is a count the run fixes (graded exactly), never a time: a time that prints as the
    answer (960.0 µs at 960 B) is chance, while a size or count column still counts."""
    from helpers.bench.nccl_tests import ROW

    return _TIMED_LINE.sub("avg busbw", ROW.sub(r"\g<sweep>", text))


def _shows(form: str, text: str) -> bool:
    """Does `text` show `form`: a list whatever its spacing, a number as a whole token."""
    if form.startswith("["):
        return _squeezed(form) in _squeezed(text)
    return bool(_number_pattern(form).search(text))


def assert_no_answer_above(nb, name: str) -> None:
    """Fail when the executed notebook `name` shows its exercise's measured answer above
    the question (`answers_shown_above`); a notebook without an exercise passes. The answer
    is read from the grade's "measured ..." lines, whatever the prediction's value."""
    found = answers_shown_above(nb)
    assert not found, (f"{name}: the exercise is answered above its question, in "
                       + "; ".join(found) + " (issue 28: move it below the check, or ask "
                       "another question)")
