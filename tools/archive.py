"""The runnable series as one zip, offered by the site (`make html` writes it; tools.site).

What `make lab` needs from an unpacked copy, and nothing of the build or the tests: the
notebooks as committed (without outputs), helpers/, every other file a notebook reads as it
runs (tools.dependencies: the images it shows, the training table it quotes), the files
`make install` reads (requirements.txt, pyproject.toml, README.md, tools/install.py) and
Makefile, environment.yml, and a note (ARCHIVE.md) on what runs from it. Everything sits
under one folder, FOLDER/, so unpacking makes one folder. The zip is the same bytes for the
same files (sorted, one fixed date), and is written to a temporary file, then renamed.
"""
from __future__ import annotations

import os
import tempfile
import zipfile
from pathlib import Path

from helpers.paths import REPO_ROOT
from tools.dependencies import RUNNING
from tools.i18n.strings import N_

NAME = "nccl-notebooks.zip"
FOLDER = "nccl-notebooks"
PROJECT_FILES = ("README.md", "Makefile", "requirements.txt", "pyproject.toml",
                 "environment.yml", "tools/__init__.py", "tools/install.py",
                 "tools/lab/jupyter_server_config.py")
TREES = ("helpers",)                         # whole: `pip install -e .` packages all of it
# how `make html` runs a notebook, not `make lab`
NOT_RUN_FROM_IT = tuple(f"tools/{name}" for name in RUNNING)
SKIPPED_PARTS = {"__pycache__", ".ipynb_checkpoints"}
DATE = (2020, 1, 1, 0, 0, 0)                 # every member's: the same files, the same bytes
NOTE = N_("""\
# The runnable series

This folder holds what `make lab` needs to run the notebooks: notebooks/ (as committed,
without outputs), helpers/ (what the notebooks import), the files the notebooks read as
they run, and the project's install files.

    make lab        # creates .venv, installs requirements.txt and this folder (pip -e),
                    # registers the kernel, opens JupyterLab on 127.0.0.1 in notebooks/

With conda: `conda env create -f environment.yml`, `conda activate nccl-notebooks`, then
`make lab`. A notebook downloaded from a page of the site runs from notebooks/ here.

The rest of the Makefile (`make html`, `make test`, `make slides`, `make student`,
`make bench`) needs the whole repository: its tools/, tests/ and benchmarks/ are not here.
""")


def members(root: Path = REPO_ROOT) -> list[Path]:
    """The files of the archive, relative to root, sorted."""
    from tools.dependencies import dependencies

    notebooks = sorted((root / "notebooks").glob("[0-9]*.ipynb"))
    found = {Path(name) for name in PROJECT_FILES}
    for tree in TREES:
        found |= {path.relative_to(root) for path in (root / tree).rglob("*")
                  if path.is_file() and not SKIPPED_PARTS & set(path.parts)
                  and path.suffix != ".pyc"}
    for notebook in notebooks:
        for path in dependencies(notebook, root):
            if path.is_relative_to(root):
                found.add(path.relative_to(root))
    found -= {Path(name) for name in NOT_RUN_FROM_IT}
    missing = [str(path) for path in found if not (root / path).is_file()]
    if missing:
        raise FileNotFoundError(f"the archive's files are missing: {', '.join(missing)}")
    return sorted(found)


def _add(archive: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(f"{FOLDER}/{name}", date_time=DATE)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def _in_language(name: str, data: bytes, language: str | None) -> bytes:
    """A notebook of the series with its markdown in `language` (tools.i18n), where it has a
    catalog; every other file as it is."""
    if language in (None, "en") or not (name.startswith("notebooks/") and name.endswith(".ipynb")):
        return data
    import nbformat

    from tools.i18n.cells import translated_page

    shown = translated_page(nbformat.reads(data.decode(), as_version=4), Path(name).stem,
                            language, whole=False)
    return (nbformat.writes(shown) + "\n").encode()


def write_archive(target: Path, root: Path = REPO_ROOT, language: str | None = None) -> Path:
    """Write the zip of the runnable series to `target` (a temporary file, then renamed);
    in `language`, its notebooks' markdown and its note translated."""
    from tools.i18n.strings import translated

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w") as archive:
            _add(archive, "ARCHIVE.md", translated(NOTE, language).encode())
            for path in members(root):
                name = path.as_posix()
                _add(archive, name, _in_language(name, (root / path).read_bytes(), language))
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
