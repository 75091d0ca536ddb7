"""A one-line summary with its details folded under it, for a notebook's output.

In HTML (JupyterLab, the built pages) the details sit in a closed <details> element under
the summary line; as text (a terminal, papermill, a log) both are shown, line then body.
"""
from __future__ import annotations

import html
from typing import Any


class Folded:
    """`summary` shown, `body` folded under it; `body_html` replaces the <pre> of `body`."""

    def __init__(self, summary: str, body: str, body_html: str | None = None):
        self.summary = summary
        self.body = body
        self.body_html = body_html

    def text(self) -> str:
        return f"{self.summary}\n{self.body}" if self.body else self.summary

    def html(self) -> str:
        inner = self.body_html if self.body_html is not None else (
            f"<pre>{html.escape(self.body, quote=False)}</pre>")
        return (f"<details><summary>{html.escape(self.summary, quote=False)}</summary>"
                f"{inner}</details>")

    def bundle(self) -> dict[str, str]:
        """The MIME bundle: text/plain and text/html."""
        return {"text/plain": self.text(), "text/html": self.html()}

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return self.bundle()

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__


class FoldedList(list):
    """Several Folded shown as one output: one summary line each, every body folded."""

    def text(self) -> str:
        return "\n\n".join(item.text() for item in self)

    def html(self) -> str:
        return "\n".join(item.html() for item in self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.text(), "text/html": self.html()}

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__
