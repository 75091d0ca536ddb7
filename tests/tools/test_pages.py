"""tools.pages: an executed notebook as the book shows it (no engines, no browser)."""
from __future__ import annotations

import nbformat

from tools.exercises import PREDICTION_STUB
from tools.pages import as_page, cpp_log, one_line_per_rank

CPP = ("[stderr:0] \n"
       "[rank0]:[E1201 16:42:58.405618545 ProcessGroupGloo.cpp:2901] [Rank 0]: Rank 3 failed\n"
       "[stderr:3] \n"
       "[rank3]:[E1201 16:43:26.400572166 ProcessGroupGloo.cpp:67] Gloo connectFullMesh failed\n")


def _stream(text: str, name: str = "stdout"):
    return nbformat.v4.new_output("stream", name=name, text=text)


def test_headers_go_where_every_line_names_its_own_rank():
    assert one_line_per_rank("[stdout:0] \nrank 0: [1.0]\n[stdout:1] \nrank 1: [2.0]\n") == \
        "rank 0: [1.0]\nrank 1: [2.0]\n"
    # several lines per rank, or an indented continuation: still its own
    assert one_line_per_rank("[stdout:0] \nrank 0: a\n  b\nrank 0: c\n[stdout:1] \nrank 1: d\n") \
        == "rank 0: a\n  b\nrank 0: c\nrank 1: d\n"


def test_headers_stay_where_they_say_who_printed_a_line():
    for text in ["[stdout:0] \nhello\n[stdout:1] \nhello\n",          # a line without its rank
                 "[stdout:0] \nrank 1: x\n[stdout:1] \nrank 0: y\n",     # the wrong rank
                 "[stdout:0] \nrank 0: a\nb\n",                         # a line of its own
                 "rank 0: no headers at all\n"]:
        assert one_line_per_rank(text) is None, text


def test_only_cpp_log_lines_are_folded_and_the_page_copy_is_a_copy():
    assert cpp_log(CPP)
    assert not cpp_log("[stderr:0] \nTraceback (most recent call last):\n" + CPP)
    assert not cpp_log("[stderr:0] \n")
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%%px\nwork()")
    cell.outputs = [_stream(CPP, "stderr"), _stream("[stdout:0] \nrank 0: ok\n")]
    nb.cells = [cell]
    page = as_page(nb)
    folded, quiet = page.cells[0].outputs
    assert folded["output_type"] == "display_data"
    assert folded["data"]["text/html"].startswith(
        "<details><summary>torch's C++ log on the engines: 2 lines</summary>")
    # every line names its rank: the engine headers are dropped, every log line kept
    assert folded["data"]["text/plain"] == "".join(
        line + "\n" for line in CPP.splitlines() if not line.startswith("[stderr:"))
    assert quiet["text"] == "rank 0: ok\n"
    assert nb.cells[0].outputs[0]["output_type"] == "stream"      # the executed copy as it ran


def test_an_exercise_shows_the_readers_cell_and_folds_the_answer_and_its_checks():
    nb = nbformat.v4.new_notebook()
    solution = nbformat.v4.new_code_cell("prediction = [42]")
    solution.metadata["tags"] = ["solution"]
    run = nbformat.v4.new_code_cell("%%px\nvariant()")
    check = nbformat.v4.new_code_cell("grade(prediction, variant)")
    check.outputs = [_stream("rank 0 ✓ you said 42\n")]
    later = nbformat.v4.new_code_cell("print('after the exercise')")
    later.outputs = [_stream("after the exercise\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("## Exercise"), solution, run, check,
                nbformat.v4.new_markdown_cell("## What to remember"), later]
    cells = as_page(nb).cells
    reader, answer = cells[1], cells[2]
    assert reader.source == PREDICTION_STUB and reader.metadata["tags"] == ["exercise"]
    assert reader.id != answer.id
    assert "hide-cell" in answer.metadata["tags"]
    assert answer.metadata["mystnb"]["code_prompt_show"] == "Show answer"
    assert "hide-output" in cells[4].metadata["tags"]              # the check's verdict
    assert "hide-output" not in cells[3].metadata.get("tags", [])  # no output to fold
    assert "hide-output" not in cells[6].metadata.get("tags", [])  # past the exercise


def test_a_text_output_over_twelve_lines_folds_under_its_first_line_and_a_table_keeps_its_rows():
    from tools.pages import LONG_LINES

    long = "bytes table\n" + "".join(f"row {i}\n" for i in range(LONG_LINES))
    short = "".join(f"rank {i}: ok\n" for i in range(LONG_LINES))
    plain = nbformat.v4.new_output("execute_result", data={"text/plain": long},
                                   execution_count=1)
    html = nbformat.v4.new_output("display_data", data={"text/plain": long,
                                                        "text/html": "<table></table>"})
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(table)")
    cell.outputs = [_stream(long), _stream(short), plain, html]
    nb.cells = [cell]
    folded, kept, folded_plain, kept_html = as_page(nb).cells[0].outputs
    for out in (folded, folded_plain):
        assert out["data"]["text/html"].startswith(
            f"<details><summary>bytes table … ({LONG_LINES + 1} lines)</summary>")
        assert out["data"]["text/plain"] == long            # nothing lost
    assert kept["text"] == short and kept_html == html      # 12 lines, or HTML: as they were
    table = ("collective   S (B)   rank 0: sent\n" "scatter        256   480\n"
             "gather         256   144\n")
    nb.cells[0].outputs = [_stream(table), _stream("rank 0:  a  b\nrank 1: c\n")]
    shown, prose = as_page(nb).cells[0].outputs
    assert shown["data"]["text/html"] == f'<pre class="series-text-table">{table}</pre>'
    assert prose["output_type"] == "stream"       # one row alone is no table
    from tools.pages import is_text_table

    assert is_text_table(table) and not is_text_table("a  b  c\n\nd  e  f\ng  h  i\n")


def test_plumbing_folds_its_code_under_what_it_calls_and_keeps_its_output():
    nb = nbformat.v4.new_notebook()
    pulled = nbformat.v4.new_code_cell("pulled = cluster.pull('x')\nplot_per_rank(pulled)\n"
                                       "plot_per_rank(pulled, 'again')")
    pulled.metadata["tags"] = ["plumbing"]
    pulled.outputs = [_stream("rank 0: 1\n")]
    named = nbformat.v4.new_code_cell("# Start the ranks\ncluster = start_cluster(4)")
    named.metadata["tags"] = ["plumbing"]
    taught = nbformat.v4.new_code_cell("%%px\ndist.all_reduce(t)")
    nb.cells = [pulled, named, taught]
    page = as_page(nb)
    assert page.cells[0].metadata["tags"] == ["plumbing", "hide-input"]
    assert page.cells[0].metadata["mystnb"]["code_prompt_show"] == \
        "Show code: pull, plot_per_rank"                       # each name once, in order
    assert page.cells[0].outputs == pulled.outputs            # the output stays in view
    assert page.cells[1].metadata["mystnb"]["code_prompt_show"] == "Show code: Start the ranks"
    assert "tags" not in page.cells[2].metadata               # untagged: shown as it is
    assert "hide-input" not in pulled.metadata["tags"]        # the notebook is not changed


def test_an_exercise_check_tagged_plumbing_keeps_the_exercises_fold():
    nb = nbformat.v4.new_notebook()
    solution = nbformat.v4.new_code_cell(f"{PREDICTION_STUB}\nprediction = [3]")
    solution.metadata["tags"] = ["solution"]
    check = nbformat.v4.new_code_cell("grade(prediction, pulled)")
    check.metadata["tags"] = ["plumbing"]
    check.outputs = [_stream("✓\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("## Exercise\n\nPredict."), solution, check]
    page = as_page(nb)
    folded = page.cells[-1]
    assert "hide-input" not in folded.metadata["tags"]
    assert folded.metadata["mystnb"]["code_prompt_show"] == "Show the check"


def test_in_detail_folds_under_its_heading_and_other_markdown_stays():
    nb = nbformat.v4.new_notebook()
    body = "- a long bullet\n\n:::{note}\ninside\n:::"
    nb.cells = [nbformat.v4.new_markdown_cell(f"## In detail\n\n{body}"),
                nbformat.v4.new_markdown_cell("## In detail, says the text\n\nkept")]
    page = as_page(nb)
    assert page.cells[0].source == ("::::{dropdown} In detail\n:class-container: "
                                    f"series-in-detail\n\n{body}\n::::\n")
    assert page.cells[1].source == nb.cells[1].source
