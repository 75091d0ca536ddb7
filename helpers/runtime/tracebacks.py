"""Tracebacks as a notebook shows them: no machine paths, and for an engine's error only
the frames of the reader's own code.

An engine's traceback (IPython's, as text) names its cell "Cell In[73]" (the engine's
execution count, not the notebook's) and walks through torch's own files under the
virtual environment. `short_traceback` keeps the %%px cell's frames and the project's,
says how many library frames it left out, and keeps the error message whole.
`without_machine_paths` rewrites the paths of the repository's files (relative to it), of
installed packages (from their package folder: torch/distributed/...) and of the standard
library; a path anywhere else (a file of the reader's own, /tmp) is shown as it is.
"""
from __future__ import annotations

import re
import sys
import sysconfig
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r"^(Cell In\[\d+\]|Input In \[\d+\]|File )")
_CELL = re.compile(r"^(?:Cell In\[\d+\]|Input In \[\d+\]),? ?")
_PACKAGES = re.compile(r"(?:/[^\s:'\"/]+)*/(?:site|dist)-packages/")
# Between the links of a chained exception ("raise ... from err", or an error in `except`)
_CHAIN = re.compile(r"^(?:The above exception was the direct cause of the following exception:"
                    r"|During handling of the above exception, another exception occurred:)$")


def _library_prefixes() -> list[str]:
    """The folders of the standard library (longest first): a file there is a library's."""
    found = {sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib")}
    found |= {str(Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}."
                                                  f"{sys.version_info[1]}")}
    return sorted((p.rstrip("/") + "/" for p in found if p), key=len, reverse=True)


_STDLIB = _library_prefixes()


def without_machine_paths(text: str) -> str:
    """`text` with the repository's paths relative to it and the paths of installed
    packages and the standard library from their own folder (torch/..., json/...)."""
    text = _PACKAGES.sub("", text)
    for prefix in _STDLIB:
        text = text.replace(prefix, "")
    return text.replace(f"{REPO_ROOT}/", "")


def _is_library_frame(first_line: str) -> bool:
    if not first_line.startswith("File "):
        return False
    path = first_line[len("File "):]
    return (bool(re.search(r"(site|dist)-packages/", path)) or path.startswith("<")
            or any(path.startswith(prefix) for prefix in _STDLIB))


def _library_name(first_line: str) -> str:
    """"torch/distributed/c10d_logger.py" from a library frame's first line."""
    return without_machine_paths(first_line[len("File "):]).split(":")[0]


def short_traceback(text: str) -> list[str]:
    """An engine's traceback (IPython's text) as lines: the cell's frames and the
    project's, a line naming the library frames left out, then the error message; for a
    chained exception, each link so, in order, with the line that joins them.

    Text that is not a traceback comes back whole (without machine paths)."""
    links: list[list[str]] = [[]]
    joins: list[str] = []
    for line in _ANSI.sub("", text).splitlines():
        if _CHAIN.match(line.strip()):
            joins.append(line.strip())
            links.append([])
        else:
            links[-1].append(line)
    shown = _short_link(links[0])
    for join, link in zip(joins, links[1:]):
        shown += ["", join, "", *_short_link(link)]
    return shown


def _short_link(lines: list[str]) -> list[str]:
    """One link of a traceback (see short_traceback)."""
    starts = [i for i, line in enumerate(lines) if _FRAME.match(line)]
    if not starts:
        return [without_machine_paths(line) for line in lines]
    frames: list[list[str]] = []
    message: list[str] = []
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else len(lines)
        block = lines[start:end]
        if index + 1 == len(starts):   # the last frame ends at its first blank line
            blank = next((i for i, line in enumerate(block) if not line.strip()), len(block))
            block, message = block[:blank], block[blank:]
        frames.append([line for line in block if line.strip()])
    kept: list[str] = []
    left_out: list[str] = []
    for frame in frames:
        if _is_library_frame(frame[0]):
            left_out.append(_library_name(frame[0]))
            continue
        first = _CELL.sub("the cell, ", frame[0]) if _CELL.match(frame[0]) else frame[0]
        kept += [without_machine_paths(first), *frame[1:], ""]
    if left_out:
        names = ", ".join(dict.fromkeys(left_out))
        kept.append(f"({len(left_out)} library frame{'s' if len(left_out) > 1 else ''} "
                    f"left out: {names})")
    while message and not message[0].strip():
        message = message[1:]
    while message and not message[-1].strip():
        message = message[:-1]
    return kept + [without_machine_paths(line) for line in message]


def quiet_paths_in_tracebacks(shell: Any) -> None:
    """Make every traceback this IPython shell shows free of machine paths (idempotent).

    IPython formats a traceback into lines and hands them to `shell._showtraceback`,
    which displays them; the wrapper rewrites the paths in those lines first
    (`without_machine_paths`). Errors, %tb and the debugger work as before.
    """
    show: Callable[..., Any] = shell._showtraceback
    if getattr(show, "_without_machine_paths", False):
        return

    def showtraceback(etype: Any, evalue: Any, stb: list[str]) -> Any:
        return show(etype, evalue, [without_machine_paths(line) for line in stb])

    showtraceback._without_machine_paths = True   # type: ignore[attr-defined]
    shell._showtraceback = showtraceback
