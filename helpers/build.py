"""`python -m helpers.build`: execute every notebook and write build/html.

- one progress line per notebook (name, elapsed, ok / FAILED / up to date);
- a failed notebook: exit 1, naming the notebook and the cell; the pages already
  in build/html stay as they were (every page is written to a temporary file,
  then moved into place);
- incremental: a notebook whose source, helpers and settings did not change since
  its last good page is not executed again.
"""
from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from helpers.results import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
BUILD_DIR = REPO_ROOT / "build"
HTML_DIR = BUILD_DIR / "html"
EXECUTED_DIR = BUILD_DIR / "executed"
STAMP_DIR = BUILD_DIR / ".stamps"
SETTINGS = ("TUTORIAL_RANKS", "TUTORIAL_BACKEND", "TUTORIAL_TIMEOUT", "TUTORIAL_OFFLINE")


def fingerprint(notebook: Path) -> str:
    """What a page depends on: the notebook, the helpers, the images and the settings."""
    digest = hashlib.sha256()
    inputs = [notebook, *sorted((REPO_ROOT / "helpers").glob("*.py")),
              *sorted((REPO_ROOT / "images").glob("*.png")), REPO_ROOT / "requirements.txt"]
    for path in inputs:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    for name in SETTINGS:
        digest.update(f"{name}={os.environ.get(name, '')}".encode())
    return digest.hexdigest()


def _atomic_write(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def execute(notebook: Path, timeout_s: int) -> nbformat.NotebookNode:
    """Run the notebook with a real kernel; return the executed notebook."""
    import papermill

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / notebook.name
        papermill.execute_notebook(str(notebook), str(out), cwd=str(notebook.parent),
                                   progress_bar=False, execution_timeout=timeout_s,
                                   kernel_name="python3")
        return nbformat.read(out, as_version=4)


def to_html(nb: nbformat.NotebookNode) -> str:
    """A self-contained page: nbconvert embeds every image output as base64."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    return body


def title_of(notebook: Path) -> str:
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return notebook.stem


def environment_stamp() -> str:
    import torch

    return (f"torch {torch.__version__} · Python {platform.python_version()} · "
            f"{os.environ.get('TUTORIAL_BACKEND') or 'auto'} backend · "
            f"built {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}")


def write_index(notebooks: list[Path]) -> None:
    items = "\n".join(
        f'<li><a href="{nb.stem}.html">{html.escape(title_of(nb))}</a></li>'
        for nb in notebooks if (HTML_DIR / f"{nb.stem}.html").exists())
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>NCCL collectives, rank by rank</title>
<style>body{{font-family:sans-serif;max-width:48rem;margin:2rem auto;line-height:1.5}}</style>
</head><body><h1>NCCL collectives, rank by rank</h1>
<ol start="0">
{items}
</ol>
<p><small>{html.escape(environment_stamp())}</small></p>
</body></html>
"""
    _atomic_write(HTML_DIR / "index.html", page)


def build(notebooks: list[Path], timeout_s: int = 600, force: bool = False) -> int:
    failed = []
    for notebook in notebooks:
        stamp = STAMP_DIR / f"{notebook.stem}.sha256"
        page = HTML_DIR / f"{notebook.stem}.html"
        key = fingerprint(notebook)
        if not force and page.exists() and stamp.exists() and stamp.read_text() == key:
            print(f"{notebook.name:<32} up to date", flush=True)
            continue
        t0 = time.monotonic()
        try:
            nb = execute(notebook, timeout_s)
        except Exception as err:  # papermill names the cell; keep the old page
            cell = getattr(err, "exec_count", None)
            where = f"cell [{cell}]" if cell else "a cell"
            summary = f"{getattr(err, 'ename', type(err).__name__)}: " \
                      f"{getattr(err, 'evalue', err)}".splitlines()[0][:300]
            print(f"{notebook.name:<32} {time.monotonic() - t0:6.1f} s  FAILED in {where}: "
                  f"{summary}", flush=True)
            failed.append(notebook.name)
            continue
        _atomic_write(EXECUTED_DIR / notebook.name, nbformat.writes(nb))
        _atomic_write(page, to_html(nb))
        _atomic_write(stamp, key)
        print(f"{notebook.name:<32} {time.monotonic() - t0:6.1f} s  ok", flush=True)
    write_index(notebooks)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)}; "
              "the pages they had before are unchanged", file=sys.stderr)
        return 1
    print(f"open {HTML_DIR / 'index.html'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to build (default: all in notebooks/)")
    parser.add_argument("--force", action="store_true", help="execute even if up to date")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    args = parser.parse_args(argv)
    notebooks = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))
    return build(notebooks, args.timeout, args.force)


if __name__ == "__main__":
    sys.exit(main())
