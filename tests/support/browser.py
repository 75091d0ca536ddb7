"""Headless Chromium (Debian's `chromium` package) driven by Playwright, for the tests.

Playwright's Python wheel carries its driver; no browser is downloaded
(`playwright install` is never run): the tests launch the system's Chromium.
`/usr/bin/chromium` is a shell wrapper, so the real binary is launched directly.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import queue
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import psutil
import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser


CHROMIUM = Path("/usr/lib/chromium/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}
LAUNCH_TIMEOUT_MS = 90_000

# Terminal residue that must never reach a page.
ANSI = re.compile(r"\x1b\[|\[(?:\d{1,3};)*\d{1,3}m")
PROGRESS_BAR = re.compile(r"\d+%\|[^\n]*\||\d+/\d+ \[\d+:\d+<|tasks/s\]|it/s\]")


def require_chromium() -> None:
    """Skip where Debian's Chromium or Playwright is missing; fail under CI (.ci/run installs both)."""
    missing = []
    if not CHROMIUM.exists():
        missing.append(f"{CHROMIUM} (apt-get install chromium)")
    try:
        import playwright.sync_api  # noqa: F401  (is it installed?)
    except ImportError:
        missing.append("playwright (pip install -r requirements.txt)")
    if missing:
        message = "browser tests need " + ", ".join(missing)
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium, closed (with Playwright's driver) on the way out."""
    require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=CHROMIUM_ARGS, timeout=LAUNCH_TIMEOUT_MS)
        try:
            yield browser
        finally:
            browser.close()


def in_shared_chromium(work: Callable[["Browser"], object], timeout_s: float = 300) -> object:
    """`work(browser)` run on this process's one headless Chromium; its result (or error).

    The Chromium and its Playwright live in a thread of their own, started at the first
    call and closed as the process exits: launching one costs about 1.2 CPU-s, and the
    suite checks a deck per notebook. A thread of its own, because Playwright's sync API
    holds the event loop of the thread it runs in, where papermill and jupyter_client
    need theirs."""
    done: queue.Queue = queue.Queue(maxsize=1)
    _shared_thread().put((work, done))
    try:
        ok, value = done.get(timeout=timeout_s)
    except queue.Empty:
        raise TimeoutError(f"the shared Chromium did not finish in {timeout_s:.0f} s") from None
    if not ok:
        raise value
    return value


_SHARED: dict[str, object] = {}
_SHARED_LOCK = threading.Lock()


def _shared_thread() -> queue.Queue:
    """The work queue of the thread that owns the shared Chromium (started on first use)."""
    with _SHARED_LOCK:
        thread = _SHARED.get("thread")
        if thread is None or not thread.is_alive():
            require_chromium()
            work: queue.Queue = queue.Queue()
            thread = threading.Thread(target=_serve, args=(work,), name="shared-chromium",
                                      daemon=True)
            thread.start()
            _SHARED.update(thread=thread, queue=work)
            atexit.register(_stop_shared, work, thread)
        return _SHARED["queue"]


def _serve(work: queue.Queue) -> None:
    """Run each piece of work on one Chromium, launched again if it has gone."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = None
        try:
            while (item := work.get()) is not None:
                task, done = item
                try:
                    if browser is None or not browser.is_connected():
                        browser = p.chromium.launch(executable_path=str(CHROMIUM),
                                                    headless=True, args=CHROMIUM_ARGS,
                                                    timeout=LAUNCH_TIMEOUT_MS)
                    done.put((True, task(browser)))
                except BaseException as err:     # handed to the caller, who raises it
                    done.put((False, err))
        finally:
            if browser is not None:
                browser.close()


def _stop_shared(work: queue.Queue, thread: threading.Thread) -> None:
    work.put(None)
    thread.join(timeout=30)


class PageWatch:
    """What went wrong on a page: console errors, uncaught exceptions, failed requests."""

    def __init__(self, page) -> None:
        self.errors: list[str] = []
        self.failed_requests: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda err: self.errors.append(f"pageerror: {err}"))
        page.on("requestfailed",
                lambda req: self.failed_requests.append(f"{req.url[:200]} ({req.failure})"))

    def _console(self, msg) -> None:
        if msg.type == "error":
            self.errors.append(f"console.error: {msg.text[:500]} at {msg.location}")


def block_network(context) -> list[str]:
    """Abort every request that is not file:// or data:; return the list they are noted in."""
    foreign: list[str] = []

    def handle(route) -> None:
        url = route.request.url
        if url.startswith(("file:", "data:", "blob:")):
            route.continue_()
        else:
            foreign.append(url)
            route.abort()

    context.route("**/*", handle)
    return foreign


IMAGES_JS = """() => [...document.images].map(img => {
    const box = img.getBoundingClientRect();
    return {src: img.currentSrc.slice(0, 120), complete: img.complete,
            naturalWidth: img.naturalWidth, width: box.width, height: box.height,
            plot: !!img.closest('.jp-OutputArea-output, .jp-RenderedImage')};
})"""


def broken_images(page) -> list[dict]:
    """Images that did not load, and output images (plots) drawn at zero size."""
    return [img for img in page.evaluate(IMAGES_JS)
            if not img["complete"] or img["naturalWidth"] == 0
            or (img["plot"] and (img["width"] == 0 or img["height"] == 0))]


def plot_count(page) -> int:
    return sum(1 for img in page.evaluate(IMAGES_JS) if img["plot"])


def wait_until(condition: Callable[[], object], timeout_s: float, what: str,
               interval_s: float = 0.5):
    """Poll `condition` until it returns something truthy; fail naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(interval_s)


def processes_with_env(name: str, value: str | None = None) -> list[psutil.Process]:
    """Live processes whose environment has `name` (equal to `value` when given)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if name in env and (value is None or env[name] == value):
            found.append(proc)
    return found


def describe(procs: list[psutil.Process]) -> str:
    lines = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            lines.append(f"{proc.pid}: {' '.join(proc.cmdline())[:160]}")
    return "\n".join(lines)


def execute_in_kernel(base: str, token: str, kernel_id: str, code: str,
                      timeout_s: float) -> dict:
    """Run `code` in a Jupyter server's kernel over its websocket, as a notebook page does.

    Returns {"status": "ok" | "error", "stdout": ..., "stderr": ..., "error": traceback}.
    Fails the test naming the code's first line after `timeout_s`.
    """
    import json
    import uuid

    import websocket  # websocket-client, a jupyter_server dependency

    url = base.replace("http://", "ws://", 1) + f"/api/kernels/{kernel_id}/channels"
    conn = websocket.create_connection(url, header=[f"Authorization: token {token}"],
                                       timeout=timeout_s)
    msg_id = uuid.uuid4().hex
    conn.send(json.dumps({
        "header": {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex,
                   "msg_type": "execute_request", "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False,
                    "user_expressions": {}, "allow_stdin": False, "stop_on_error": True},
    }))
    found = {"status": None, "stdout": "", "stderr": "", "error": ""}
    idle = False
    deadline = time.monotonic() + timeout_s
    try:
        while not (found["status"] and idle):
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                msg = json.loads(conn.recv())
            except websocket.WebSocketTimeoutException:
                pytest.fail(f"no reply after {timeout_s:g} s to {code.splitlines()[0]!r}; "
                            f"so far: {found}")
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                found[content["name"]] += content["text"]
            elif kind == "error":
                found["error"] = "\n".join(content["traceback"])
            elif kind == "execute_reply":
                found["status"] = content["status"]
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
    finally:
        conn.close()
    return found


VISIBLE_TEXT_JS = """(root) => {
  const walker = document.createTreeWalker(root || document.body, NodeFilter.SHOW_TEXT);
  const out = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (el && el.checkVisibility({visibilityProperty: true, opacityProperty: true}))
      out.push(node.textContent);
  }
  return out.join("");
}"""


def visible_text(page, selector: str = "body") -> str:
    """The text a reader sees under `selector`: the content of a closed <details>, which
    innerText still holds in Chromium, is left out."""
    return page.eval_on_selector(selector, VISIBLE_TEXT_JS)
