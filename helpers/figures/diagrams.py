"""Collective diagrams: the upstream ones when reachable, our own drawings otherwise.

`load_diagram("scatter")` returns the upstream PNG (PyTorch tutorial or NCCL
user guide), fetched once with a short timeout and cached *outside* the
repository; without network it falls back to our own drawing in
`images/<collective>.png` and says so in `Diagram.note`.

Our drawings live in helpers.figures.drawings (`make images`).

Environment: TUTORIAL_OFFLINE=1 skips the network; TUTORIAL_CACHE_DIR moves the
cache (default ~/.cache/nccl-notebooks/diagrams); TUTORIAL_DIAGRAM_BASE_URL
replaces the upstream base URL (the file name is appended).
"""
from __future__ import annotations

import hashlib
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from helpers.collectives.registry import ALIASES, UPSTREAM
from helpers.figures.drawings import IMAGES_DIR, REGENERATE
from helpers.runtime.config import on_off
from helpers.runtime.files import atomic_write

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"



def canonical(collective: str) -> str:
    if collective not in UPSTREAM:
        raise ValueError(f"no diagram for {collective!r}; known: {', '.join(sorted(UPSTREAM))}")
    return ALIASES.get(collective, collective)


def upstream_url(collective: str) -> str:
    """The URL load_diagram fetches (TUTORIAL_DIAGRAM_BASE_URL replaces the base)."""
    up = UPSTREAM[canonical(collective)]
    base = os.environ.get("TUTORIAL_DIAGRAM_BASE_URL")
    return f"{base.rstrip('/')}/{up.filename}" if base else up.url


def cache_dir() -> Path:
    explicit = os.environ.get("TUTORIAL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "nccl-notebooks" / "diagrams"


def cache_path(url: str) -> Path:
    """One cache file per URL, so a test server never shadows the real diagram."""
    name = Path(urllib.parse.urlparse(url).path).stem or "diagram"
    return cache_dir() / f"{name}-{hashlib.sha256(url.encode()).hexdigest()[:12]}.png"


def local_path(collective: str) -> Path:
    return IMAGES_DIR / f"{canonical(collective)}.png"


def is_png(data: bytes) -> bool:
    return data[:8] == PNG_MAGIC and len(data) > 32


@dataclass(frozen=True)
class Diagram:
    collective: str
    png: bytes
    source: str                 # "upstream" or "local"
    url: str                    # the upstream diagram, always
    credit: str                 # who made what is shown
    licence: str
    caption: str                # one line to print under the image
    note: str | None = None     # why we fell back to our own drawing
    path: Path | None = None    # cache file or local drawing
    reason: str | None = None   # the error behind the note

    def __repr__(self) -> str:
        return (f"Diagram({self.collective!r}, source={self.source!r}, {len(self.png)} bytes, "
                f"url={self.url!r}, note={self.note!r})")

    def _ipython_display_(self) -> None:
        """In a notebook: the image itself (embedded) and its credit line."""
        DiagramDisplay(self)._ipython_display_()


# Hosts that failed with a network error: not retried for a while in this process,
# so an offline notebook waits at most once.
_UNREACHABLE: dict[str, float] = {}
UNREACHABLE_FOR_S = 300.0


def _fetch(url: str, timeout_s: float, max_bytes: int = 8_000_000) -> bytes:
    """GET url with a hard overall deadline (DNS and slow servers included)."""
    result: dict[str, Any] = {}

    def worker() -> None:
        try:
            request = urllib.request.Request(url, headers={"User-Agent": "nccl-notebooks/diagrams"})
            deadline = time.monotonic() + timeout_s
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                chunks, total = [], 0
                while time.monotonic() < deadline:
                    chunk = response.read(65536)
                    if not chunk:
                        result["data"] = b"".join(chunks)
                        return
                    chunks.append(chunk)
                    total += len(chunk)
                    if total > max_bytes:
                        raise ValueError(f"more than {max_bytes} bytes")
                raise TimeoutError(f"download took longer than {timeout_s} s")
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=worker, name="diagram-fetch", daemon=True)
    thread.start()
    thread.join(timeout_s + 0.2)
    if thread.is_alive():
        raise TimeoutError(f"no answer from {url} within {timeout_s} s")
    if "error" in result:
        raise result["error"]
    return result["data"]


def _read_cache(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if is_png(data):
        return data
    path.unlink(missing_ok=True)                 # a damaged cache entry: fetch again
    return None


def _upstream(collective: str, url: str, data: bytes, path: Path | None) -> Diagram:
    up = UPSTREAM[canonical(collective)]
    caption = f"Diagram: {up.credit}. Licence: {up.licence}. Image: {url}"
    return Diagram(collective, data, "upstream", url, up.credit, up.licence, caption, path=path)


def _local(collective: str, url: str, note: str | None, reason: str | None) -> Diagram:
    path = local_path(collective)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing (our own drawing of {canonical(collective)}); regenerate it "
            f"with `{REGENERATE}` in the repository root")
    data = path.read_bytes()
    if not is_png(data):
        raise FileNotFoundError(f"{path} is not a PNG; regenerate it with `{REGENERATE}`")
    up = UPSTREAM[canonical(collective)]
    credit = "nccl-notebooks, drawn from helpers.collectives.models"
    caption = (f"Our own drawing of {canonical(collective)} ({credit}). "
               f"Upstream diagram: {url} ({up.credit})")
    return Diagram(collective, data, "local", url, credit, "same as this repository", caption,
                   note=note, path=path, reason=reason)


def load_diagram(collective: str, timeout_s: float = 3.0) -> Diagram:
    """The upstream diagram (cache, else one fetch), else our own drawing.

    Never raises for network trouble; raises FileNotFoundError only when the
    local fallback image itself is missing.
    """
    canonical(collective)
    url = upstream_url(collective)
    cached = cache_path(url)
    data = _read_cache(cached)
    if data is not None:
        return _upstream(collective, url, data, cached)

    offline = f"Offline: showing our own drawing of {collective}; the upstream diagram is at {url}"
    if on_off("TUTORIAL_OFFLINE"):
        return _local(collective, url, offline, "TUTORIAL_OFFLINE is set")
    host = urllib.parse.urlparse(url).netloc
    failed_at = _UNREACHABLE.get(host)
    if failed_at is not None and time.monotonic() - failed_at < UNREACHABLE_FOR_S:
        return _local(collective, url, offline, f"{host} was unreachable a moment ago")
    try:
        data = _fetch(url, timeout_s)
    except urllib.error.HTTPError as exc:
        note = (f"The upstream diagram is unavailable (HTTP {exc.code}): showing our own "
                f"drawing of {collective}; the upstream diagram is at {url}")
        return _local(collective, url, note, repr(exc))
    except Exception as exc:
        _UNREACHABLE[host] = time.monotonic()
        return _local(collective, url, offline, repr(exc))
    if not is_png(data):
        note = (f"The upstream answer was not a PNG: showing our own drawing of {collective}; "
                f"the upstream diagram is at {url}")
        return _local(collective, url, note, f"{len(data)} bytes starting {data[:16]!r}")
    try:
        atomic_write(cached, data)
    except OSError:                               # a read-only home: show it anyway
        cached = None
    return _upstream(collective, url, data, cached)


def diagram_markdown(diagram: Diagram) -> str:
    """The credit line (and the fallback note) as Markdown."""
    up = UPSTREAM[canonical(diagram.collective)]
    # A bare URL would swallow the closing "*" of the italics: make it an explicit link.
    credit = re.sub(r"(https?://[^\s,;)]+)", r"<\1>", up.credit)
    if diagram.source == "upstream":
        text = f"*Diagram: {credit} — [{up.filename}]({diagram.url}), {up.licence}.*"
    else:
        text = (f"*Our own drawing of `{canonical(diagram.collective)}`, computed from "
                f"`helpers.collectives.models`. Upstream diagram: "
                f"[{up.filename}]({diagram.url}) — {credit}.*")
    if diagram.note:
        text += f"\n\n> {diagram.note}"
    return text


def _audit_metadata(diagram: Diagram) -> dict[str, Any]:
    """Our own drawing's audit (helpers.figures.audit) as the PNG output's metadata: the
    figure redrawn as `make images` drew it, measured at the PNG's width. An upstream image
    is not ours to measure: none."""
    if diagram.source != "local":
        return {}
    import matplotlib.pyplot as plt

    from helpers.figures.audit import METADATA_KEY, audit
    from helpers.figures.drawings import draw_collective

    fig = draw_collective(diagram.collective)     # write_images' world size
    try:
        return {METADATA_KEY: audit(fig, png=diagram.png).as_metadata()}
    finally:
        plt.close(fig)


class DiagramDisplay:
    """Shows the PNG (embedded, not linked) and the credit line in a notebook."""

    def __init__(self, diagram: Diagram):
        from IPython.display import Image, Markdown
        self.diagram = diagram
        self.image = Image(data=diagram.png, format="png", metadata=_audit_metadata(diagram))
        self.credit = Markdown(diagram_markdown(diagram))

    def _ipython_display_(self) -> None:
        from IPython.display import display
        display(self.image, self.credit)

    def __repr__(self) -> str:
        return f"<diagram of {self.diagram.collective}: {self.diagram.caption}>"
