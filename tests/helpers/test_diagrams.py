"""Upstream diagrams with an offline fallback, and our own drawings (helpers.figures.diagrams)."""
from __future__ import annotations

import contextlib
import http.server
import io
import socket
import threading
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mimage
import matplotlib.pyplot as plt
import numpy as np
import pytest

from helpers.figures import diagrams
from helpers.figures import drawings
from helpers.collectives import examples


def make_png(text: str = "upstream") -> bytes:
    fig = plt.figure(figsize=(2, 1), dpi=50)
    fig.text(0.5, 0.5, text, ha="center")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


class Server:
    """A loopback HTTP server in a thread; `body` is served for every path."""

    def __init__(self, files: dict[str, bytes] | None = None, delay_s: float = 0.0):
        self.files, self.delay_s, self.requests = files or {}, delay_s, []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                owner.requests.append(self.path)
                time.sleep(owner.delay_s)
                body = owner.files.get(self.path.lstrip("/"))
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body or b"")

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "Server":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A private cache, no proxies for loopback, no memory of unreachable hosts."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("TUTORIAL_CACHE_DIR", str(cache))
    monkeypatch.delenv("TUTORIAL_OFFLINE", raising=False)
    monkeypatch.delenv("TUTORIAL_DIAGRAM_BASE_URL", raising=False)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    monkeypatch.setattr(diagrams, "_UNREACHABLE", {})
    return cache


def cached_files(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*")) if cache.exists() else []


# ---------------------------------------------------------------- (a) images are current
def test_committed_images_are_current(tmp_path):
    fresh = drawings.write_images(tmp_path)
    assert [p.name for p in fresh] == [f"{c}.png" for c in drawings.LOCAL_DRAWINGS]
    for path in fresh:
        committed = drawings.IMAGES_DIR / path.name
        hint = f"regenerate with `{drawings.REGENERATE}` in the repository root"
        assert committed.is_file(), f"images/{path.name} is missing; {hint}"
        assert committed.stat().st_size < 100_000, f"images/{path.name} is over 100 KB"
        old, new = mimage.imread(committed), mimage.imread(path)
        assert old.shape == new.shape, f"images/{path.name} is stale (size {old.shape} != {new.shape}); {hint}"
        differing = np.mean(np.abs(old - new).max(axis=-1) > 0.02)
        assert differing < 1e-3, f"images/{path.name} is stale ({differing:.2%} of pixels differ); {hint}"


def test_write_images_is_deterministic(tmp_path):
    first = drawings.write_images(tmp_path / "a", collectives=["scatter"])[0].read_bytes()
    second = drawings.write_images(tmp_path / "b", collectives=["scatter"])[0].read_bytes()
    assert first == second and diagrams.is_png(first)


def test_drawing_follows_the_model():
    params = {"dst": 0, "op": "SUM"}
    befores = examples.example_befores("reduce", 4, params, size=1)
    afters = examples.model_after("reduce", befores, params)
    fig = drawings.draw_collective("reduce", 4)
    shown = [t.get_text() for t in fig.axes[0].texts]
    result = f"{afters[0]['tensor'][0]:g}"
    inputs = [f"{b['tensor'][0]:g}" for b in befores]
    assert result in shown and all(v in shown for v in inputs)
    assert shown.count("undefined") == 3
    assert f"{result} = {' + '.join(inputs)}" in shown
    plt.close("all")


# ---------------------------------------------------------------- (b) online, then cache
def test_fetches_upstream_once_then_reads_the_cache(env, monkeypatch):
    png = make_png()
    with Server({"scatter.png": png}) as server:
        env_base = server.url
        monkeypatch.setenv("TUTORIAL_DIAGRAM_BASE_URL", env_base)
        diagram = diagrams.load_diagram("scatter", timeout_s=5)
        assert diagram.source == "upstream", diagram.note
        assert diagram.png == png and diagram.url == f"{env_base}/scatter.png"
        assert diagram.note is None and "Séb Arnold" in diagram.caption
        assert server.requests == ["/scatter.png"]
    files = cached_files(env)
    assert len(files) == 1 and files[0].read_bytes() == png and files[0] == diagram.path
    assert not [f for f in files if f.name.endswith(".tmp")]

    again = diagrams.load_diagram("scatter", timeout_s=5)      # server is gone
    assert again.source == "upstream" and again.png == png
    assert server.requests == ["/scatter.png"]


def test_aliases_use_the_upstream_file(env, monkeypatch):
    png = make_png("nccl")
    with Server({"reducescatter.png": png}) as server:
        monkeypatch.setenv("TUTORIAL_DIAGRAM_BASE_URL", server.url + "/")
        diagram = diagrams.load_diagram("reduce_scatter_single", timeout_s=5)
    assert diagram.source == "upstream" and diagram.png == png
    assert "NCCL" in diagram.credit and "Apache-2.0" in diagram.licence
    assert diagrams.UPSTREAM["all_gather_single"] is diagrams.UPSTREAM["all_gather"]


def test_damaged_cache_is_fetched_again(env, monkeypatch):
    png = make_png()
    with Server({"gather.png": png}) as server:
        monkeypatch.setenv("TUTORIAL_DIAGRAM_BASE_URL", server.url)
        path = diagrams.cache_path(diagrams.upstream_url("gather"))
        path.parent.mkdir(parents=True)
        path.write_bytes(b"half a file")
        diagram = diagrams.load_diagram("gather", timeout_s=5)
    assert diagram.source == "upstream" and path.read_bytes() == png


# ---------------------------------------------------------------- (c) offline
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assert_local(diagram, name: str) -> None:
    assert diagram.source == "local"
    assert diagram.png == (drawings.IMAGES_DIR / f"{name}.png").read_bytes()
    assert diagram.url.endswith(diagrams.UPSTREAM[name].filename)


@pytest.mark.timing
def test_unreachable_server_falls_back_to_our_drawing(env, monkeypatch):
    monkeypatch.setenv("TUTORIAL_DIAGRAM_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    start = time.monotonic()
    diagram = diagrams.load_diagram("all_to_all", timeout_s=2)
    assert time.monotonic() - start < 2.5
    assert_local(diagram, "all_to_all")
    assert "offline" in diagram.note.lower() and diagram.url in diagram.note
    assert cached_files(env) == []
    # the host is remembered as unreachable: the next diagram does not wait again
    assert diagrams.load_diagram("all_gather_single").source == "local"


def test_tutorial_offline_skips_the_network(env, monkeypatch):
    with Server({"broadcast.png": make_png()}) as server:
        monkeypatch.setenv("TUTORIAL_DIAGRAM_BASE_URL", server.url)
        monkeypatch.setenv("TUTORIAL_OFFLINE", "1")
        diagram = diagrams.load_diagram("broadcast")
    assert server.requests == []
    assert_local(diagram, "broadcast")
    assert "offline" in diagram.note.lower()
    assert cached_files(env) == []


def test_missing_local_drawing_is_a_clear_error(env, monkeypatch, tmp_path):
    monkeypatch.setenv("TUTORIAL_OFFLINE", "1")
    monkeypatch.setattr(diagrams, "IMAGES_DIR", tmp_path / "no-images")
    with pytest.raises(FileNotFoundError, match="make images") as info:
        diagrams.load_diagram("scatter")
    assert "scatter.png" in str(info.value)


# ---------------------------------------------------------------- (d) bad answers
def test_non_png_answer_is_not_cached(env, monkeypatch):
    with Server({"reduce.png": b"<html>Sorry, moved.</html>" * 10}) as server:
        monkeypatch.setenv("TUTORIAL_DIAGRAM_BASE_URL", server.url)
        diagram = diagrams.load_diagram("reduce", timeout_s=5)
    assert_local(diagram, "reduce")
    assert "not a PNG" in diagram.note
    assert cached_files(env) == []


def test_http_error_falls_back(env, monkeypatch):
    with Server({}) as server:
        monkeypatch.setenv("TUTORIAL_DIAGRAM_BASE_URL", server.url)
        diagram = diagrams.load_diagram("all_reduce", timeout_s=5)
    assert_local(diagram, "all_reduce")
    assert "404" in diagram.note and cached_files(env) == []


@pytest.mark.timing
def test_slow_server_times_out(env, monkeypatch):
    with Server({"all_gather.png": make_png()}, delay_s=3.0) as server:
        monkeypatch.setenv("TUTORIAL_DIAGRAM_BASE_URL", server.url)
        start = time.monotonic()
        diagram = diagrams.load_diagram("all_gather", timeout_s=0.5)
        elapsed = time.monotonic() - start
    assert elapsed < 1.5, f"took {elapsed:.1f} s with a 0.5 s timeout"
    assert_local(diagram, "all_gather")
    assert "offline" in diagram.note.lower()
    assert cached_files(env) == []


# ---------------------------------------------------------------- display
def test_a_diagram_shows_itself_with_the_png_embedded(env, monkeypatch):
    monkeypatch.setenv("TUTORIAL_OFFLINE", "1")
    shown = diagrams.DiagramDisplay(diagrams.load_diagram("scatter"))
    assert shown.image.data == (drawings.IMAGES_DIR / "scatter.png").read_bytes()
    assert shown.image.url is None
    markdown = shown.credit.data
    assert diagrams.UPSTREAM["scatter"].url in markdown and "Offline" in markdown
    assert diagrams.UPSTREAM["scatter"].url == "https://docs.pytorch.org/tutorials/_images/scatter.png"
