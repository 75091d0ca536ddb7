"""What no page of the book may show: the executed notebook as tools.pages makes it a page,
read output by output (issue 50: every page, not only the four the browser test builds).

    residue(nb) == []          # "cell <id>: <what> in <excerpt>" for each find

- an ipyparallel `[stdout:N]` / `[stderr:N]` header (tools.pages drops them where every
  line names its rank; elsewhere the cell should print "rank r …" or pull and print once);
- a build-machine path (/work/, /tmp/, /root/, /home/, .venv/, site-packages, a
  PosixPath, the repo), also what tests/tools/test_browser.py looks for on the built pages;
- a deprecation warning (DeprecationWarning, FutureWarning, PendingDeprecationWarning);
- a raw ipyparallel error (EngineError, CompositeError, RemoteError, ipyparallel.error,
  a task's UUID): a page presents an engine's failure through helpers.runtime's summary.
Folded outputs (the C++ log, exercises' checks) are read too: unfolding must not show them.
"""
from __future__ import annotations

import html
import re

import nbformat

from conftest import REPO

ENGINE_HEADER = re.compile(r"^\[std(?:out|err):\d+\]", flags=re.M)
MACHINE_PATH = re.compile(r"(?:/work/|/tmp/|/root/|/home/|\.venv/|site-packages|"
                          r"PosixPath\(|" + re.escape(str(REPO)) + ")")
DEPRECATION = re.compile(r"\b(?:Pending)?DeprecationWarning\b|\bFutureWarning\b")
RAW_ENGINE_ERROR = re.compile(r"\b(?:EngineError|CompositeError|RemoteError)\b|"
                              r"ipyparallel\.error|"
                              r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
# (notebook, cell id, rule): shown on purpose, the lesson of the cell, with why.
ON_PURPOSE = {
    ("20_tensor_sequence_parallel", "c20b", "deprecation warning"):
        "the cell prints the FutureWarning torch gives for all_gather_into_tensor: the "
        "markdown above teaches that these names are deprecated (claim "
        "20-tensor-forms-deprecated)",
}
RULES = [("engine header", ENGINE_HEADER), ("build-machine path", MACHINE_PATH),
         ("deprecation warning", DEPRECATION), ("raw ipyparallel error", RAW_ENGINE_ERROR)]
_TAGS = re.compile(r"<[^>]+>")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def output_texts(cell: nbformat.NotebookNode) -> list[str]:
    """Everything a reader can see of a code cell's outputs, as text: streams, plain text,
    HTML without its tags, and errors (name, value, traceback without colours)."""
    texts = []
    for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
        kind = out.get("output_type")
        if kind == "stream":
            texts.append(out.get("text", ""))
        elif kind == "error":       # Jupyter shows the traceback, not ename/evalue
            texts.append(_ANSI.sub("", "\n".join(out.get("traceback", []))))
        else:
            data = out.get("data", {})
            texts += [str(data[k]) for k in ("text/plain", "text/markdown") if k in data]
            if "text/html" in data:
                texts.append(html.unescape(_TAGS.sub(" ", str(data["text/html"]))))
    return texts


def residue(nb: nbformat.NotebookNode, name: str = "") -> list[str]:
    """The finds of RULES in the outputs of `nb` (the notebook `name`) as its page shows
    them (tools.pages), less what ON_PURPOSE allows."""
    from tools.pages import as_page

    found = []
    for i, cell in enumerate(as_page(nb).cells):
        for text in output_texts(cell):
            for what, pattern in RULES:
                if (name, cell.get("id"), what) in ON_PURPOSE:
                    continue
                for match in pattern.finditer(text):
                    start = max(0, match.start() - 40)
                    excerpt = text[start:match.end() + 40].replace("\n", "⏎")
                    found.append(f"cell {cell.get('id', i)}: {what} in …{excerpt}…")
                    break
    return found


def assert_clean_page(nb: nbformat.NotebookNode, name: str) -> None:
    """Fail when the page of the executed notebook `name` shows any residue (`residue`)."""
    found = residue(nb, name)
    assert not found, f"{name}'s page shows:\n  " + "\n  ".join(found[:20])


def assert_proportions(nb: nbformat.NotebookNode, name: str) -> None:
    """Build the page of the executed notebook `name` (tools.site, as make html does),
    measure it in Chromium at 1280×800 (tools.page_metrics) and fail when code + output
    exceed CODE_OUTPUT_MAX of its height or figures fall under FIGURES_MIN."""
    import tempfile
    from pathlib import Path

    import browser
    from tools import page_metrics

    browser.require_chromium()
    with tempfile.TemporaryDirectory(prefix="page-") as tmp:
        path = Path(tmp) / f"{name}.ipynb"
        nbformat.write(nb, path)
        m = page_metrics.measure_pages([path])[name]
    missed = page_metrics.misses({name: m})
    assert not missed, f"{name}'s page at 1280 px ({m['page_px']:,.0f} px): " + "; ".join(
        line.split(": ", 1)[1] for line in missed)
