"""`python -m tools.build`: execute every notebook and write build/html.

- one progress line per notebook (name, elapsed, ok / FAILED / up to date);
- a failed notebook: exit 1, naming the notebook and the cell; the pages already
  in build/html stay as they were (every page is written to a temporary file,
  then moved into place);
- incremental: a notebook whose source, helpers and settings did not change since
  its last good page is not executed again;
- warm by default: one set of engines per world size serves the whole build
  (helpers/runtime/warm.py; each notebook gets a fresh process group and an empty
  namespace, its summary line says "engines reused", its progress line "engines reused"),
  ended when the build is done. `--cold` starts new engines for every notebook.
"""
from __future__ import annotations

import argparse
import hashlib
import html
import os
import re
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from helpers.paths import REPO_ROOT, build_dir, results_dir
from helpers.runtime.files import atomic_write
from tools import site_nav
from tools.dependencies import dependencies

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
BUILD_DIR = build_dir()
HTML_DIR = BUILD_DIR / "html"
EXECUTED_DIR = BUILD_DIR / "executed"
STAMP_DIR = BUILD_DIR / ".stamps"
SETTINGS = ("TUTORIAL_RANKS", "TUTORIAL_BACKEND", "TUTORIAL_TIMEOUT", "TUTORIAL_OFFLINE",
            "TUTORIAL_DEBUG", "TUTORIAL_LAUNCHER", "TUTORIAL_WARM_START")
REUSED = "warm start: engines reused"    # what a start cell's summary says on warm engines


def fingerprint(notebook: Path, root: Path = REPO_ROOT) -> str:
    """What a page depends on (tools.dependencies: the notebook, the helpers it really
    imports, the images it shows, how it is run) and the settings."""
    digest = hashlib.sha256()
    for path in dependencies(notebook, root):
        digest.update(path.relative_to(root).as_posix().encode() if path.is_relative_to(root)
                      else path.name.encode())
        digest.update(path.read_bytes())
    for name in SETTINGS:
        digest.update(f"{name}={os.environ.get(name, '')}".encode())
    return digest.hexdigest()


def execute(notebook: Path, timeout_s: int) -> nbformat.NotebookNode:
    """Run the notebook with a real kernel; return the executed notebook."""
    from tools.execute import run_notebook

    return run_notebook(notebook, cell_timeout_s=timeout_s)


TEMPLATES = Path(__file__).resolve().parent / "templates"


def to_html(nb: nbformat.NotebookNode) -> str:
    """A self-contained page: images embedded, no script or style from a CDN."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="selfcontained",
                            extra_template_basedirs=[str(TEMPLATES)])
    body, _ = exporter.from_notebook_node(nb)
    return body


def notebook_summary(notebook: Path) -> tuple[str, str]:
    """(title, one-line summary): the '# ' heading and the first 'What you will learn' item."""
    nb = nbformat.read(notebook, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    title = re.search(r"^# (.+)$", text, flags=re.M)
    learn = re.search(r"What you will learn\**\s*\n- (.+?)(?:\n- |\n\n|$)", text, flags=re.S)
    clean = lambda s: " ".join(s.replace("`", "").replace("*", "").split()).rstrip(";.")
    summary = clean(learn.group(1)) if learn else ""
    return (clean(title.group(1)) if title else notebook.stem,
            summary[:1].upper() + summary[1:])


def result_plot(nb: nbformat.NotebookNode) -> bytes | None:
    """The first plot of the notebook's results (a cell that calls plot_*), as PNG bytes."""
    import base64

    for cell in nb.cells:
        if cell.cell_type == "code" and "plot_" in cell.source:
            for out in cell.get("outputs", []):
                if "image/png" in out.get("data", {}):
                    return base64.b64decode(out["data"]["image/png"])
    return None


def write_thumbnail(png: bytes, path: Path, width_px: int = 480) -> None:
    import io

    import matplotlib.image as mpimg
    from matplotlib.figure import Figure

    image = mpimg.imread(io.BytesIO(png), format="png")
    height, width = image.shape[:2]
    dpi = 100
    fig = Figure(figsize=(width_px / dpi, width_px * height / width / dpi), dpi=dpi)
    ax = fig.add_axes([0, 0, 1, 1])
    ax.imshow(image, interpolation="antialiased")
    ax.set_axis_off()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    atomic_write(path, buf.getvalue())


def write_card_picture(stem: str, nb: nbformat.NotebookNode) -> str:
    """The index card's picture: per-rank results when saved (tools.thumbnails), else the
    page's first result plot. Returns a note for the progress line ("" when all went well)."""
    from tools.thumbnails import thumbnail

    target = HTML_DIR / "thumbs" / f"{stem}.png"
    note = ""
    try:
        picture = thumbnail(stem, results_dir())
    except Exception as err:  # a card without its best picture is no reason to fail a page
        picture, note = None, f" (card picture from the page: {type(err).__name__}: {err})"
    if picture is not None:
        atomic_write(target, picture)
    elif (plot := result_plot(nb)) is not None:
        write_thumbnail(plot, target)
    return note[:200]


def environment_stamp() -> str:
    """What the pages were computed on: torch, backend, world size, GPUs or CPU, date."""
    import torch

    from helpers.runtime.config import resolve_config, visible_gpu_count

    try:
        world_size, backend = resolve_config()
    except ValueError as err:
        world_size, backend = "?", f"invalid settings ({err})"
    gpus = visible_gpu_count()
    parts = [f"torch {torch.__version__}", f"backend {backend}", f"world size {world_size}"]
    if backend == "nccl":
        parts.append("NCCL " + ".".join(map(str, torch.cuda.nccl.version())))
    parts.append(", ".join(torch.cuda.get_device_name(i) for i in range(gpus)) if gpus
                 else "CPU")
    parts.append(f"built {datetime.now(timezone.utc):%Y-%m-%d %H:%M UTC}")
    return " · ".join(parts)


INDEX_STYLE = """
body{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem;
     line-height:1.45;color:#1f2328}
h1{margin-bottom:.2rem} .lead{color:#57606a;margin-top:0}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(20rem,1fr));gap:1rem}
.card{border:1px solid #d0d7de;border-radius:8px;padding:.8rem;text-decoration:none;
      color:inherit;display:flex;flex-direction:column;gap:.4rem}
.card:hover{border-color:#c2410c;box-shadow:0 1px 6px rgba(0,0,0,.12)}
.card h2{font-size:1.1rem;margin:0} .card p{margin:0;color:#57606a;font-size:.92rem}
.card img{width:100%;border:1px solid #eee;border-radius:4px;background:#fff}
.nothumb{height:6rem;display:flex;align-items:center;justify-content:center;color:#8c959f;
         border:1px dashed #d0d7de;border-radius:4px}
footer{margin-top:2rem;color:#57606a;font-size:.85rem}
h2.group{font-size:1.25rem;margin:1.6rem 0 .6rem;border-bottom:1px solid #d0d7de}
"""


def series_entries(notebooks: list[Path]) -> list[site_nav.Entry]:
    """The notebooks that have a page, in series order: what the navigation links."""
    return [site_nav.Entry(nb.stem, notebook_summary(nb)[0]) for nb in sorted(notebooks)
            if (HTML_DIR / f"{nb.stem}.html").exists()]


def write_index(notebooks: list[Path]) -> None:
    by_stem = {nb.stem: nb for nb in notebooks}
    sections = []
    for group, members in site_nav.grouped(series_entries(notebooks)):
        cards = []
        for entry in members:
            title, summary = notebook_summary(by_stem[entry.stem])
            thumb = HTML_DIR / "thumbs" / f"{entry.stem}.png"
            picture = (f'<img src="thumbs/{entry.stem}.png" '
                       f'alt="result plot of {html.escape(title)}">'
                       if thumb.exists() else '<div class="nothumb">no plot</div>')
            cards.append(f'<a class="card" href="{entry.stem}.html">{picture}'
                         f"<h2>{html.escape(title)}</h2><p>{html.escape(summary)}</p></a>")
        sections.append(f'<h2 class="group">{html.escape(group)}</h2>\n'
                        f'<div class="cards">\n{chr(10).join(cards)}\n</div>')
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>NCCL collectives, rank by rank</title><style>{INDEX_STYLE}</style></head>
<body><h1>NCCL collectives, rank by rank</h1>
<p class="lead">One notebook per collective: the upstream diagram beside what every rank
really held, checked against a NumPy model.</p>
{chr(10).join(sections)}
<footer>Computed with {html.escape(environment_stamp())}</footer>
</body></html>
"""
    atomic_write(HTML_DIR / "index.html", page)


def engines_note(nb: nbformat.NotebookNode) -> str:
    """' · engines reused' when the notebook's start cell took over warm engines."""
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            # the summary is a display (text/plain) in a kernel, a stream elsewhere
            if REUSED in out.get("text", "") + str(out.get("data", {}).get("text/plain", "")):
                return " · engines reused"
    return ""


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
        atomic_write(EXECUTED_DIR / notebook.name, nbformat.writes(nb))
        atomic_write(page, to_html(nb))
        note = write_card_picture(notebook.stem, nb)
        atomic_write(stamp, key)
        print(f"{notebook.name:<32} {time.monotonic() - t0:6.1f} s  ok{engines_note(nb)}{note}",
              flush=True)
    site_nav.renavigate(HTML_DIR, series_entries(notebooks))
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
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--cold", action="store_true",
                      help="start new engines for every notebook (default: warm start, one "
                           "set of engines per world size for the whole build)")
    mode.add_argument("--warm", action="store_true",
                      help="the default (accepted for commands written when it was not)")
    args = parser.parse_args(argv)
    notebooks = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))
    # The notebooks' kernels inherit it (and it is one of the SETTINGS of a page).
    os.environ["TUTORIAL_WARM_START"] = "0" if args.cold else "1"
    if args.cold:
        return build(notebooks, args.timeout, args.force)
    from helpers.runtime.warm import stop_warm_clusters

    try:
        return build(notebooks, args.timeout, args.force)
    finally:
        stop_warm_clusters()


if __name__ == "__main__":
    sys.exit(main())
