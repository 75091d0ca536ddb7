"""The animations' player (helpers.figures.animation.show_animation): it opens on the last
frame, is drawn for the reading column with legible text, has controls that need no special
font, stays light, and several players on one page work apart, in a real browser too."""
from __future__ import annotations

import base64
import json
import re

import matplotlib
import pytest
from matplotlib.text import Text

import browser
from animation_checks import FRAME, displayed_frames, players
from helpers.collectives.ring import example_data, ring_model
from helpers.figures.animate_records import animate_record
from helpers.figures.animate_ring import animate_ring
from helpers.figures.animate_timeline import animate_barrier, animate_timeline
from helpers.figures.animation import (CONTENT_WIDTH_IN, CSS_PX_PER_INCH, MIN_FONT_PT,
                                       PALETTE, PIXEL_DENSITY, frame_png, show_animation)
from test_animation import CASES, model_record

matplotlib.use("Agg")

PAGE_LIMIT_KB = 300
MIN_TEXT_PX = 10
# An 18-like pipeline: 4 stages, 8 micro-batches, forward then backward, with their sends.
PIPELINE = {name: [[(kind, mb, 0.004 * (mb + r + shift), 0.004 * (mb + r + shift) + 0.003)
                    for mb in range(8)
                    for kind, shift in (("forward", 0), ("send", 0.75), ("backward", 11 + k))]
                   for r in range(4)] for k, name in enumerate(("GPipe", "1F1B"))}


def barrier():
    return animate_barrier([{"rank": r, "arrived": 0.25 * r + 0.02, "left": 0.78 + 0.001 * r}
                            for r in range(4)])


def ring():
    trace = ring_model(example_data(4))
    return animate_ring(trace, trace.tensors())


def pipeline():
    return animate_timeline(PIPELINE, title="m = 8 · 4 stages", labelled=("forward",
                                                                          "backward"))


# What the notebooks animate: 00's barrier, 01–09's records at 4 ranks, 10's ring, 18's
# two schedules (the records at 2 ranks too).
MAKERS = {"barrier": barrier, "ring": ring, "pipeline": pipeline,
          **{f"{c}-{n}": (lambda c=c, p=p, n=n: animate_record(model_record(c, n, p)))
             for c, p in CASES for n in (2, 4)}}


def sources(page: str) -> list[str]:
    """Every frame's data URI, in order (the last is the poster's)."""
    data = re.search(r'<script type="application/json" class="nccl-animation-data">'
                     r"(.*?)</script>", page, re.S).group(1)
    poster = re.search(r'<img class="nccl-animation-frame" src="([^"]*)"', page).group(1)
    return json.loads(data) + [poster]


def smallest_font_px(anim) -> float:
    """The smallest visible text of any frame, in CSS px as the player shows the figure."""
    fig = anim._fig
    points = []
    for i in range(anim.frame_count):
        anim.draw_frame(i)
        points += [t.get_fontsize() for t in fig.findobj(Text)
                   if t.get_visible() and t.get_text().strip()]
    width_in = fig.get_size_inches()[0]
    return min(points) * CSS_PX_PER_INCH / 72 * min(1.0, CONTENT_WIDTH_IN / width_in)


@pytest.mark.parametrize("make", list(MAKERS))
def test_the_player_opens_on_the_last_frame_legible_light_and_column_wide(make):
    anim = MAKERS[make]()
    px = smallest_font_px(anim)
    assert px >= MIN_TEXT_PX, f"{px:.1f} px text"
    page = show_animation(anim).data
    [player] = players(page)
    count = anim.frame_count
    assert player["attrs"]["data-frames"] == str(count)
    assert player["attrs"]["data-frame"] == str(count - 1)
    frames = sources(page)
    assert len(frames) == count == page.count(FRAME) and len(set(frames)) == count
    anim.draw_frame(count - 1)           # the poster is the last frame, pixel for pixel
    width_in = anim._fig.get_size_inches()[0]
    css_width = round(min(width_in, CONTENT_WIDTH_IN) * CSS_PX_PER_INCH)
    last = frame_png(anim._fig, PIXEL_DENSITY * css_width / width_in)
    assert base64.b64decode(frames[-1].split(",", 1)[1]) == last
    assert 700 <= css_width <= 800, css_width
    img = re.search(r'<img class="nccl-animation-frame"[^>]*>', page).group()
    assert f'width="{css_width}"' in img and f"width:{css_width}px;max-width:100%" in img
    assert len(page.encode()) < PAGE_LIMIT_KB * 1024, f"{len(page.encode()) / 1024:.0f} KB"
    matplotlib.pyplot.close("all")


@pytest.mark.parametrize("size_in, dpi", [((6.4, 2.3), 120.0), ((9.7, 3.3), 82.26)])
def test_a_frame_holds_the_pixels_a_png_of_the_figure_holds(size_in, dpi):
    """frame_png reads Agg's pixels straight from the canvas: the same pixels, and so the
    same palette PNG, as a PNG written by savefig and read back (two sizes, one of them a
    fractional number of pixels wide)."""
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    fig = plt.figure(figsize=size_in)
    fig.add_subplot().bar(range(5), [3, 1, 4, 1, 5], color=["C0", "C1", "C2", "C3", "C4"])
    fig.suptitle("rank 0 · 3 of 5")
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=dpi, facecolor="white")
    written = Image.open(io.BytesIO(png.getvalue())).convert("RGB")
    frame = Image.open(io.BytesIO(frame_png(fig, dpi)))
    assert frame.size == written.size
    palette = written.quantize(colors=PALETTE, dither=Image.Dither.NONE)
    assert frame.convert("RGB").tobytes() == palette.convert("RGB").tobytes()
    plt.close(fig)


def test_min_font_is_the_columns_ten_pixels():
    assert MIN_FONT_PT * CSS_PX_PER_INCH / 72 == MIN_TEXT_PX
    assert CONTENT_WIDTH_IN * CSS_PX_PER_INCH <= 800


def test_controls_are_ascii_words_and_inline_svg_with_names():
    page = show_animation(ring()).data
    controls = re.search(r'<div class="nccl-animation-controls".*?</div>', page, re.S).group()
    script = re.findall(r"<script>(.*?)</script>", page, re.S)[-1]
    labels = [re.sub(r"<svg.*?</svg>", "", b) for b in
              re.findall(r"<button[^>]*>(.*?)</button>", controls, re.S)]
    labels += [json.loads(s) for s in re.findall(r'innerHTML = playing \? ("(?:[^"\\]|\\.)*") : '
                                                  r'("(?:[^"\\]|\\.)*")', script)[0]]
    texts = [re.sub(r"<[^>]+>", "", re.sub(r"<svg.*?</svg>", "", label)).strip()
             for label in labels]
    assert texts == ["", "step", "play", "step", "", "pause", "play"], texts
    assert all(text.isascii() for text in texts)
    names = re.findall(r'<button [^>]*aria-label="([^"]*)"', controls)
    assert names == ["First frame", "Previous frame", "Play", "Next frame", "Last frame"]
    assert controls.count("<svg") == 5 and "<i " not in page and "fa fa-" not in page
    outside_svg = re.sub(r"<svg.*?</svg>", "", controls)
    assert outside_svg.isascii(), [c for c in outside_svg if not c.isascii()]
    matplotlib.pyplot.close("all")


def test_two_players_on_one_page_have_their_own_ids_even_when_alike():
    first, second = show_animation(ring()).data, show_animation(ring()).data
    ids = [re.search(r'<div class="nccl-animation[^>]* id="([^"]+)"', p).group(1)
           for p in (first, second)]
    assert ids[0] != ids[1]
    assert sources(first) == sources(second)      # same pictures, apart all the same
    matplotlib.pyplot.close("all")


def test_its_text_fallback_says_what_it_is():
    shown = show_animation(barrier())
    assert repr(shown).startswith("step-through animation, 10 frames; last: nobody leaves")
    assert shown._repr_html_() == shown.data
    matplotlib.pyplot.close("all")


# A JupyterLab output: HTML set while the host is not in the document, each script then
# replaced by a fresh copy in place (what its renderer does); attached afterwards.
DETACHED_JS = """(html) => {
  const host = document.createElement('div');
  host.innerHTML = html;
  for (const old of Array.from(host.querySelectorAll('script'))) {
    const fresh = document.createElement('script');
    for (const a of old.attributes) fresh.setAttribute(a.name, a.value);
    fresh.textContent = old.textContent;
    old.parentNode.replaceChild(fresh, old);
  }
  document.querySelector('main').appendChild(host);
}"""


def _page(tmp_path, pages: list[str]) -> str:
    body = "".join(f"<h2>animation {k}</h2><p>Text before it.</p>{p}" for k, p in
                   enumerate(pages))
    html = ('<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" '
            'content="width=device-width, initial-scale=1"><style>body{margin:0;'
            'font-family:sans-serif} main{max-width:800px;margin:0 auto;padding:0 20px}'
            f"</style></head><body><main>{body}</main></body></html>")
    path = tmp_path / "players.html"
    path.write_text(html)
    return path.as_uri()


def test_in_a_browser_every_player_opens_on_its_last_frame_and_steps_alone(tmp_path):
    browser.require_chromium()
    timeline, records = show_animation(barrier()).data, show_animation(
        animate_record(model_record("all_reduce", 4, {"op": "SUM"}))).data
    url = _page(tmp_path, [timeline, records])
    matplotlib.pyplot.close("all")
    with browser.chromium() as chromium:
        for width in (1280, 420):
            context = chromium.new_context(viewport={"width": width, "height": 900})
            page = context.new_page()
            watch = browser.PageWatch(page)
            page.route("http*://**", lambda route: route.abort())
            page.goto(url)
            shown = displayed_frames(page)
            assert [(s["index"], s["count"]) for s in shown] == [(9, 10), (6, 7)], shown
            assert all(s["ink"] > 0.05 for s in shown), shown
            assert len({s["id"] for s in shown}) == 2
            assert page.evaluate("document.documentElement.scrollWidth") <= width
            assert all(s["width"] <= min(800, width - 40) + 0.5 for s in shown), shown
            roots = page.locator(".nccl-animation")
            assert roots.nth(0).locator(".nccl-animation-counter").inner_text() == \
                "frame 10/10"
            if width == 1280:
                roots.nth(0).get_by_role("button", name="First frame", exact=True).click()
                roots.nth(1).get_by_role("button", name="Previous frame", exact=True).click()
                first, before_last = displayed_frames(page)
                assert (first["index"], before_last["index"]) == (0, 5)
                # the barrier's empty clock has less ink than its result
                assert first["ink"] < shown[0]["ink"]
                assert roots.nth(0).locator(".nccl-animation-counter").inner_text() == \
                    "frame 1/10"
                roots.nth(1).get_by_role("button", name="Play", exact=True).click()
                page.wait_for_function(
                    "() => document.querySelectorAll('.nccl-animation')[1]"
                    ".getAttribute('data-frame') === '6'", timeout=5000)
                assert roots.nth(1).get_by_role("button", name="Play", exact=True).count() == 1
                assert displayed_frames(page)[0]["index"] == 0      # the other stayed
                page.evaluate(DETACHED_JS, records)                 # a third, as JupyterLab
                third = displayed_frames(page)[2]
                assert (third["index"], third["count"]) == (6, 7)
                roots.nth(2).get_by_role("button", name="First frame", exact=True).click()
                assert [s["index"] for s in displayed_frames(page)] == [0, 6, 0]
            assert not watch.errors and not watch.failed_requests, watch.errors
            context.close()
