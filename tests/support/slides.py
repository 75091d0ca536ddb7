"""Every slide of a deck in headless Chromium at 1280×720, as a projector shows it.

`check_deck(stem, nb)` makes the deck of an executed notebook with tools.slide_deck, opens it
from disk with the network cut and visits every slide and sub-slide (reveal.js's own
`slide(h, v)`). On each it measures what the room would see: every element inside the
slide's 1280×720 box (nothing cut, nothing taller or wider than the slide), every slide
ending at most MAX_HEIGHT_PX from its top (a margin for other machines' fonts), no element
that scrolls, text (markdown) at least MIN_TEXT_PX and code and outputs at least MIN_CODE_PX on
screen (computed size × reveal's scale), and no console error or uncaught exception.
Speaker notes and the series navigation (a list of links) are not held to the font sizes;
what a closed <details> folds (a passing check's lines, a log) is not measured: it is not seen.

One Chromium per test process (browser.in_shared_chromium), a context per deck; the
vendored reveal.js is fetched (npm) or copied once per process.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from pathlib import Path

import nbformat

import browser
from tools.page_metrics import FOLDED_JS
from tools.slide_layout import MARGIN_PX

VIEWPORT = {"width": 1280, "height": 720}
MIN_TEXT_PX = 24
MIN_CODE_PX = 20
# Another machine's fonts set the same slide taller (13 of 1,051 slides measured 725 px
# there): here a slide must end this far above the box's bottom.
MAX_HEIGHT_PX = VIEWPORT["height"] - MARGIN_PX

# Runs in the deck: the Reveal that require.js loaded for it, then every slide in turn.
VISIT_JS = """async () => {
  const R = await new Promise(done => require(["vendor/reveal.js/dist/reveal.js"], done));
  const box = document.querySelector('.reveal .slides');
  const folded = %(folded)s;      // a folded check or log: not seen
  const skip = el => el.closest('aside.notes, .series-bar, .series-toc') || folded(el);
  const describe = el => (el.className && typeof el.className === 'string'
                          ? el.tagName + '.' + el.className.split(' ')[0] : el.tagName)
                         + ': ' + (el.innerText || '').trim().slice(0, 60);
  const found = [];
  for (const slide of R.getSlides()) {
    const at = R.getIndices(slide);
    R.slide(at.h, at.v || 0);
    const cfg = R.getConfig(), scale = R.getScale(), frame = box.getBoundingClientRect();
    const bottom = frame.top + cfg.height * scale, right = frame.left + cfg.width * scale;
    const seen = {where: `${at.h}/${at.v || 0}`, height: 0, width: 0, cut: [], scrolls: [],
                  text_px: null, code_px: null, small: [], scale: scale};
    for (const el of slide.querySelectorAll('*')) {
      if (skip(el)) continue;
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      seen.height = Math.max(seen.height, (r.bottom - frame.top) / scale);
      seen.width = Math.max(seen.width, (r.right - frame.left) / scale);
      if (r.bottom > bottom + 1 || r.right > right + 1 || r.top < frame.top - 1
          || r.left < frame.left - 1) seen.cut.push(describe(el));
      const s = getComputedStyle(el);
      if ((el.scrollWidth > el.clientWidth + 1 && /auto|scroll|hidden/.test(s.overflowX))
          || (el.scrollHeight > el.clientHeight + 1 && /auto|scroll|hidden/.test(s.overflowY)))
        seen.scrolls.push(describe(el));
    }
    const walk = document.createTreeWalker(slide, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      const el = node.parentElement;
      if (!node.textContent.trim() || skip(el) || !el.getClientRects().length) continue;
      const px = parseFloat(getComputedStyle(el).fontSize) * scale;
      const code = !!el.closest('pre, code, .jp-CodeCell');
      const kind = code ? 'code_px' : 'text_px';
      seen[kind] = seen[kind] === null ? px : Math.min(seen[kind], px);
      if (px < (code ? %(code)d : %(text)d) - 0.5)
        seen.small.push(`${px.toFixed(1)} px: ${node.textContent.trim().slice(0, 40)}`);
    }
    seen.cut = seen.cut.slice(0, 5); seen.scrolls = seen.scrolls.slice(0, 5);
    seen.small = seen.small.slice(0, 5);
    found.push(seen);
  }
  return found;
}""" % {"code": MIN_CODE_PX, "text": MIN_TEXT_PX, "folded": FOLDED_JS}

_cache: dict = {}


def _folder() -> Path:
    """This process's folder for decks, with reveal.js, require.js and jQuery in vendor/."""
    if "folder" not in _cache:
        from helpers.paths import build_dir
        from tools.slide_deck import vendor_reveal

        folder = Path(tempfile.mkdtemp(prefix="decks-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        built = build_dir() / "slides" / "vendor"
        if (built / "reveal.js" / "dist" / "reveal.js").exists():
            shutil.copytree(built, folder / "vendor")
        urls = vendor_reveal(folder / "vendor")
        if urls is None:
            raise AssertionError("the slides need npm (or build/slides/vendor) for reveal.js")
        _cache["folder"], _cache["urls"] = folder, urls
    return _cache["folder"]


def visit_deck(deck: Path) -> tuple[list[dict], list[str]]:
    """Every slide of `deck` as measured (VISIT_JS), and the console's errors: in a context
    of its own on the process's one Chromium (browser.in_shared_chromium)."""
    def visit(chromium) -> tuple[list[dict], list[str]]:
        context = chromium.new_context(viewport=VIEWPORT)
        try:
            foreign = browser.block_network(context)
            tab = context.new_page()
            watch = browser.PageWatch(tab)
            tab.goto(deck.as_uri())
            tab.wait_for_selector(".reveal.ready", timeout=30_000)
            slides = tab.evaluate(VISIT_JS)
            tab.wait_for_timeout(50)          # a slide-change handler's late error
            return slides, watch.errors + [f"network: {url}" for url in foreign]
        finally:
            context.close()

    return browser.in_shared_chromium(visit)


def problems(slides: list[dict]) -> list[str]:
    """What a projector would show wrong, one line per slide."""
    wrong = []
    for s in slides:
        what = [f"{k}: {s[k]}" for k in ("cut", "scrolls", "small") if s[k]]
        if s["height"] > MAX_HEIGHT_PX:
            what.append(f"taller than {MAX_HEIGHT_PX} px (the margin for other fonts)")
        if what:
            wrong.append(f"#/{s['where']} ({s['height']:.0f}×{s['width']:.0f} px) "
                         + "; ".join(what))
    return wrong


def check_deck(stem: str, nb: nbformat.NotebookNode) -> dict:
    """Make `nb`'s deck and fail unless every slide fits, reads and runs clean (see above).

    Skipped (silently) where Chromium or Playwright is missing, except under CI."""
    try:
        browser.require_chromium()
    except BaseException:               # pytest's Skipped derives from BaseException
        if os.environ.get("CI"):
            raise
        return {}
    from tools.slide_deck import deck_html

    folder = _folder()
    start = time.perf_counter()
    deck = folder / f"{stem}.slides.html"
    deck.write_text(deck_html(nb, stem, _cache["urls"]))
    made = time.perf_counter()
    slides, errors = visit_deck(deck)
    wrong = problems(slides)
    assert slides and not wrong and not errors, (
        f"{stem}'s deck at 1280×720: {len(wrong)} of {len(slides)} slides do not fit or read"
        f" (≤ {MAX_HEIGHT_PX} px, {MIN_TEXT_PX} px text, {MIN_CODE_PX} px code):\n"
        + "\n".join(wrong[:20])
        + (f"\nconsole: {errors[:5]}" if errors else ""))
    return {"slides": len(slides), "make_s": made - start,
            "visit_s": time.perf_counter() - made}
