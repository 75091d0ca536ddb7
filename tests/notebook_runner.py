"""Execute a notebook with a real kernel (papermill) and read what it printed."""
from __future__ import annotations

from pathlib import Path

import nbformat
import papermill


def execute(notebook: Path, out_dir: Path, timeout_s: int = 600, **parameters) -> nbformat.NotebookNode:
    out = out_dir / f"{notebook.stem}-{'-'.join(f'{k}{v}' for k, v in parameters.items()) or 'default'}.ipynb"
    papermill.execute_notebook(
        str(notebook), str(out), parameters=parameters, cwd=str(notebook.parent),
        progress_bar=False, execution_timeout=timeout_s, kernel_name="python3")
    return nbformat.read(out, as_version=4)


def output_text(cell) -> str:
    """All text a code cell produced: streams, text/plain and text/html."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        data = out.get("data", {})
        parts.extend(str(data[m]) for m in ("text/plain", "text/html") if m in data)
    return "".join(parts)
