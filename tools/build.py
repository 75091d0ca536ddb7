"""`python -m tools.build`: execute every notebook, then render the book into build/html.

- one progress line per notebook (name, elapsed, ok / FAILED / up to date), one for the site;
- executed copies go to build/executed (each written to a temporary file, then moved into
  place); the site is rendered from them by Sphinx + MyST-NB (tools.site) into a temporary
  folder that replaces build/html only when it is complete;
- a failed notebook: exit 1, naming the notebook and the cell; its executed copy (and so
  its page) stays as it was;
- incremental: a notebook whose source, helpers and settings did not change since its last
  good run is not executed again (tools.dependencies knows which helpers it imports, which a
  content-hash cache of the notebook alone would not);
- warm by default: one set of engines per world size serves the whole build
  (helpers/runtime/warm.py; each notebook gets a fresh process group and an empty
  namespace, its summary line says "engines reused", its progress line "engines reused"),
  ended when the build is done. `--cold` starts new engines for every notebook;
- two notebooks at once where there are two cores (`--jobs`; tools.lanes): a notebook
  mostly waits on its ranks, so one alone leaves the cores two-thirds idle. Each lane has
  engines of its own; the longest notebooks (by their last run) go first.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat

from helpers.paths import REPO_ROOT, build_dir
from helpers.runtime.files import atomic_write
from tools import site
from tools.dependencies import dependencies
from tools.i18n.strings import N_, translated
from tools.thumbnails import CardError

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
BUILD_DIR = build_dir()
HTML_DIR = BUILD_DIR / "html"
EXECUTED_DIR = BUILD_DIR / "executed"
STAMP_DIR = BUILD_DIR / ".stamps"
THUMBS_DIR = BUILD_DIR / "thumbs"
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


def result_plot(nb: nbformat.NotebookNode, stem: str) -> bytes:
    """The page's own figure: the first PNG of its cell tagged `thumbnail` (tools.thumbnails;
    CardError, naming the notebook, where there is none)."""
    from tools.thumbnails import tagged_png

    return tagged_png(nb, stem)


def write_thumbnail(png: bytes, path: Path) -> None:
    """The page's plot as a card picture: letterboxed to the cards' one size, never stretched."""
    from tools.thumbnails import letterbox

    atomic_write(path, letterbox(png))


def write_card_picture(stem: str, executed: Path) -> str:
    """The index card's picture: the executed page's figure tagged `thumbnail` (written by
    tools.slide_marks), letterboxed. A page without one fails with tools.thumbnails.CardError
    naming the notebook. Returns a note for the progress line ("": nothing to say)."""
    write_thumbnail(result_plot(nbformat.read(executed, as_version=4), stem),
                    THUMBS_DIR / f"{stem}.png")
    return ""


BACKEND, WORLD_SIZE, BUILT = N_("backend {backend}"), N_("world size {n}"), N_("built {when}")
INVALID = N_("invalid settings ({error})")


def environment_stamp(language: str | None = None, built: datetime | None = None) -> str:
    """What the pages were computed on, in `language`: torch, backend, world size, GPUs or
    CPU, date (`built`, default now: one build's sites give one time).

    torch is imported only to ask about GPUs (1.5 CPU-s): its version is the installed
    distribution's, which is what torch.__version__ reports."""
    from importlib.metadata import version

    from helpers.runtime.config import resolve_config, visible_gpu_count

    def said(text: str, **values: object) -> str:
        return translated(text, language).format(**values)

    try:
        world_size, backend = resolve_config()
    except ValueError as err:
        world_size, backend = "?", said(INVALID, error=err)
    gpus = visible_gpu_count()
    parts = [f"torch {version('torch')}", said(BACKEND, backend=backend),
             said(WORLD_SIZE, n=world_size)]
    if backend == "nccl" or gpus:
        import torch
    if backend == "nccl":
        parts.append("NCCL " + ".".join(map(str, torch.cuda.nccl.version())))
    parts.append(", ".join(torch.cuda.get_device_name(i) for i in range(gpus)) if gpus
                 else "CPU")
    built = built or datetime.now(timezone.utc)
    parts.append(said(BUILT, when=f"{built:%Y-%m-%d %H:%M UTC}"))
    return " · ".join(parts)


def site_pages(notebooks: list[Path]) -> list[Path]:
    """The executed copies the site shows, in series order: of the notebooks built now and
    of those in notebooks/ built before (a build of one notebook keeps the others' pages)."""
    names = {nb.name for nb in notebooks} | {nb.name for nb in NOTEBOOK_DIR.glob("[0-9]*.ipynb")}
    return [EXECUTED_DIR / name for name in sorted(names) if (EXECUTED_DIR / name).is_file()]


def engines_note(nb: nbformat.NotebookNode) -> str:
    """' · engines reused' when the notebook's first start took over warm engines (a later
    start, as notebook 13's restarts, may reuse the engines its own first start made)."""
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            # the summary is a display (text/plain) in a kernel, a stream elsewhere
            text = out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
            if "warm start: " in text:
                return " · engines reused" if REUSED in text else ""
    return ""


def build_one(notebook: Path, timeout_s: int, card: bool = False) -> bool:
    """Execute one notebook; write its executed copy and stamp (and, with `card`, its card
    picture: drawn here, in the lanes, not at the end); print its progress line."""
    key = fingerprint(notebook)
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
        return False
    seconds = time.monotonic() - t0
    atomic_write(EXECUTED_DIR / notebook.name, nbformat.writes(nb))
    try:      # before the stamp: a page without its picture is built again next time
        note = write_card_picture(notebook.stem, EXECUTED_DIR / notebook.name) if card else ""
    except CardError as err:
        print(f"{notebook.name:<32} {seconds:6.1f} s  FAILED: {err}", flush=True)
        return False
    atomic_write(STAMP_DIR / f"{notebook.stem}.sha256", key)
    atomic_write(STAMP_DIR / f"{notebook.stem}.seconds", f"{seconds:.1f}")
    print(f"{notebook.name:<32} {seconds:6.1f} s  ok{engines_note(nb)}{note}", flush=True)
    return True


def stale(notebooks: list[Path], force: bool = False) -> list[Path]:
    """The notebooks to execute; a progress line ("up to date") for each of the others."""
    todo = []
    for notebook in notebooks:
        stamp = STAMP_DIR / f"{notebook.stem}.sha256"
        executed = EXECUTED_DIR / notebook.name
        if not force and executed.exists() and stamp.exists() \
                and stamp.read_text() == fingerprint(notebook):
            print(f"{notebook.name:<32} up to date", flush=True)
        else:
            todo.append(notebook)
    return todo


def build(notebooks: list[Path], timeout_s: int = 600, force: bool = False,
          render_site: bool = True, jobs: int = 1,
          languages: tuple[str, ...] = site.LANGUAGES) -> int:
    todo = stale(notebooks, force)

    def finish(failed: list[str]) -> int:
        return (finish_site(notebooks, todo, failed, languages) if render_site
                else (1 if failed else 0))

    if jobs > 1 and len(todo) > 1:
        from tools.lanes import run_lanes

        codes: list[int] = []     # the site is rendered while the lanes end their engines
        run_lanes(todo, jobs, timeout_s, STAMP_DIR, cards=render_site,
                  then=lambda failed: codes.append(finish(failed)))
        return codes[0]
    return finish([notebook.name for notebook in todo
                   if not build_one(notebook, timeout_s, card=render_site)])


def finish_site(notebooks: list[Path], todo: list[Path], failed: list[str],
                languages: tuple[str, ...] = site.LANGUAGES) -> int:
    """The site step: the cards not drawn by this build's lanes, then the book; 1 if it or
    a notebook (named in `failed`) failed."""
    t0 = time.monotonic()
    pages = site_pages(notebooks)
    drawn = {notebook.name for notebook in todo} - set(failed)    # their cards: just now
    for page in (page for page in pages if page.name not in drawn | set(failed)):
        try:
            note = write_card_picture(page.stem, page)   # from the page as it is now
        except CardError as err:
            print(f"{page.name:<32} FAILED: {err}", flush=True)
            failed = [*failed, page.name]
            continue
        if note:
            print(f"{page.name:<32} {note.strip()}", flush=True)
    try:
        built = datetime.now(timezone.utc)
        site.render(pages, HTML_DIR, THUMBS_DIR,
                    {language: environment_stamp(language, built) for language in languages},
                    languages=languages)
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:
        print(f"the site was not rendered; build/html is as it was: {err}", file=sys.stderr)
        return 1
    print(f"{'site (cards, Sphinx)':<32} {time.monotonic() - t0:6.1f} s  {len(pages)} pages",
          flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)}; "
              "the pages they had before are unchanged", file=sys.stderr)
        return 1
    print(f"open {HTML_DIR / 'index.html'}")
    return 0


def default_jobs() -> int:
    """Two lanes where there are two cores or more: one notebook mostly waits on its ranks."""
    return 2 if (os.cpu_count() or 1) >= 2 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to build (default: all in notebooks/)")
    parser.add_argument("--force", action="store_true", help="execute even if up to date")
    parser.add_argument("--no-site", dest="site", action="store_false",
                        help="execute only; build/html stays as it is (the next build renders)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell")
    parser.add_argument("--jobs", type=int, default=default_jobs(),
                        help="notebooks executed at once, each lane on engines of its own "
                             "(default: 2 with two cores or more, else 1)")
    parser.add_argument("--languages", default=",".join(site.LANGUAGES),
                        help="the site's languages, comma-separated, English first (default: "
                             f"{','.join(site.LANGUAGES)}; en alone renders in a third of the "
                             "time)")
    parser.add_argument("--lane", action="store_true", help=argparse.SUPPRESS)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--cold", action="store_true",
                      help="start new engines for every notebook (default: warm start, one "
                           "set of engines per world size for the whole build)")
    mode.add_argument("--warm", action="store_true",
                      help="the default (accepted for commands written when it was not)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be 1 or more, not {args.jobs}")
    languages = tuple(args.languages.split(","))
    if languages[0] != "en" or not set(languages) <= set(site.LANGUAGES):
        parser.error(f"--languages: en first, then any of {', '.join(site.LANGUAGES[1:])}; "
                     f"not {args.languages!r}")
    if args.lane:                       # tools.lanes: the notebooks come on stdin
        from tools.lanes import lane

        return lane(lambda notebook: build_one(notebook, args.timeout, card=args.site))
    notebooks = [p.resolve() for p in args.notebooks] or sorted(NOTEBOOK_DIR.glob("[0-9]*.ipynb"))
    # The notebooks' kernels inherit it (and it is one of the SETTINGS of a page).
    os.environ["TUTORIAL_WARM_START"] = "0" if args.cold else "1"
    if args.cold:
        return build(notebooks, args.timeout, args.force, args.site, args.jobs, languages)
    from helpers.runtime.warm import stop_warm_clusters

    try:
        return build(notebooks, args.timeout, args.force, args.site, args.jobs, languages)
    finally:
        stop_warm_clusters()


if __name__ == "__main__":
    sys.exit(main())
