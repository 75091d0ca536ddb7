"""A summary line with its details folded: <details> in HTML, both lines as text."""
from __future__ import annotations

from helpers.runtime.folded import Folded, FoldedList


def test_folded_shows_one_line_in_html_and_everything_as_text():
    shown = Folded("4 rank(s) · backend gloo's", "rank <0>  pid 12\nrank 1  pid 13")
    bundle = shown._repr_mimebundle_()
    assert bundle["text/plain"] == "4 rank(s) · backend gloo's\nrank <0>  pid 12\nrank 1  pid 13"
    assert bundle["text/html"] == ("<details><summary>4 rank(s) · backend gloo's</summary>"
                                   "<pre>rank &lt;0&gt;  pid 12\nrank 1  pid 13</pre></details>")
    assert str(shown) == repr(shown) == bundle["text/plain"]
    custom = Folded("a & b", "x", body_html="<table></table>")
    assert custom.html() == "<details><summary>a &amp; b</summary><table></table></details>"


def test_a_folded_list_is_one_output_of_several_folds():
    both = FoldedList([Folded("one", "1"), Folded("two", "2")])
    bundle = both._repr_mimebundle_()
    assert bundle["text/plain"] == "one\n1\n\ntwo\n2"
    assert bundle["text/html"].count("<details>") == 2
    assert bundle["text/html"].index("one") < bundle["text/html"].index("two")
