"""What every step-through animation shares: building it, reading a frame back, showing it.

An animation here is a matplotlib `FuncAnimation` over frames 0 … n − 1 with two extra
attributes: `draw_frame(i)` (puts the figure's artists in frame i's state) and
`read_drawn()` (what the artists show now, as plain data). `read_frame(anim, i)` uses
both, so tests and the page's caption check what is drawn, not what went in.

`show_animation` turns it into a small self-contained player (PNG frames as data URIs, a
few lines of script, no network) that opens on the LAST frame, the result: the reader
steps or plays from there. Figures are drawn for the reading column: CONTENT_WIDTH_IN
inches at CSS's 96 px per inch is about 800 px, so a font of F points reads as F·4/3 px.
"""
from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import json
from typing import Any, Callable

from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure

FPS = 2                 # frames per second when played: slow enough to follow one step
CSS_PX_PER_INCH = 96    # CSS's inch: a figure N inches wide is shown N·96 px wide
CONTENT_WIDTH_IN = 8.3  # the reading column (~800 px); wider figures are shown scaled down
MIN_FONT_PT = 7.5       # 10 px at CSS_PX_PER_INCH: the smallest text an animation draws
PIXEL_DENSITY = 1.25    # frame pixels per CSS px: sharper on dense screens, still light
PALETTE = 96            # colours per frame (flat fills and anti-aliased text)
EMBED_LIMIT_MB = 4.0    # a page this heavy is refused, never cut short

_players = itertools.count()


def step_animation(fig: Figure, frame_count: int, draw_frame: Callable[[int], None],
                   read_drawn: Callable[[], Any]) -> FuncAnimation:
    """A FuncAnimation over `frame_count` frames that can also be stepped and read back."""
    if frame_count < 2:
        raise ValueError(f"an animation needs at least 2 frames, got {frame_count}")

    def update(i: int) -> list:
        draw_frame(i)
        return []

    anim = FuncAnimation(fig, update, frames=frame_count, interval=1000 / FPS,
                         repeat=False, blit=False)
    anim.frame_count = frame_count
    anim.draw_frame = draw_frame
    anim.read_drawn = read_drawn
    return anim


def read_frame(anim: FuncAnimation, i: int) -> Any:
    """Draw frame i and return what its artists show (values, positions, extents)."""
    if not 0 <= i < anim.frame_count:
        raise IndexError(f"frame {i} of an animation with {anim.frame_count} frames")
    anim.draw_frame(i)
    return anim.read_drawn()


def frame_png(fig: Figure, dpi: float) -> bytes:
    """The figure as it is drawn now: a palette PNG (flat colours compress to a few KB)."""
    from PIL import Image

    buffer = io.BytesIO()
    # Agg's pixels as they are (a PNG written and read back held the same, and cost more)
    fig.savefig(buffer, format="rgba", dpi=dpi, facecolor="white")
    pixels = buffer.getvalue()
    width = int(fig.get_figwidth() * dpi)       # Agg's canvas: the size in pixels, cut down
    height, rest = divmod(len(pixels), 4 * width)
    if rest or not height:
        raise ValueError(f"{len(pixels)} bytes of RGBA are not rows of {width} pixels")
    image = Image.frombuffer("RGBA", (width, height), pixels, "raw", "RGBA", 0, 1)
    image = image.convert("RGB")
    small = io.BytesIO()
    image.quantize(colors=PALETTE, dither=Image.Dither.NONE).save(small, "PNG", optimize=True)
    return small.getvalue()


class StepAnimation:
    """The player as a notebook output: text/html for pages and JupyterLab, a line of text
    for terminals. `data` is the HTML."""

    def __init__(self, data: str, frame_count: int, title: str):
        self.data, self.frame_count, self.title = data, frame_count, title

    def _repr_html_(self) -> str:
        return self.data

    def __repr__(self) -> str:
        return f"step-through animation, {self.frame_count} frames; last: {self.title}"


def show_animation(anim: FuncAnimation, fps: int = FPS) -> StepAnimation:
    """The animation as a self-contained player that opens on its last frame.

    The figure is closed, so the notebook shows the player only. The wrapper's
    `data-last-frame` holds the last frame's drawn values (read back from the artists),
    a text alternative that tests compare with the recorded `after`.
    """
    import matplotlib.pyplot as plt

    fig, count = anim._fig, anim.frame_count
    anim._draw_was_started = True       # rendered here, not by matplotlib: no warning
    width_in, height_in = fig.get_size_inches()
    css_width = round(min(width_in, CONTENT_WIDTH_IN) * CSS_PX_PER_INCH)
    css_height = round(css_width * height_in / width_in)
    dpi = PIXEL_DENSITY * css_width / width_in
    sources, total, audits = [], 0, []
    for i in range(count):
        anim.draw_frame(i)
        if i in (0, count - 1):     # the states at rest (pieces in flight sit on nothing)
            audits.append(_frame_audit(fig, css_width))
        png = frame_png(fig, dpi)
        total += len(png) * 4 / 3
        if total > EMBED_LIMIT_MB * 2 ** 20:
            raise ValueError(f"only {i} of {count} frames fit in {EMBED_LIMIT_MB} MB: "
                             "draw fewer frames or a smaller figure")
        sources.append("data:image/png;base64," + base64.b64encode(png).decode("ascii"))
    last = anim.read_drawn()            # the last frame is the one drawn now
    title = str(last.get("title", "")) if isinstance(last, dict) else ""
    plt.close(fig)
    anim.event_source = None            # nothing left to play outside the page
    uid = hashlib.sha1("".join(sources).encode()).hexdigest()[:10]
    page = player_html(sources, f"nccl-anim-{uid}-{next(_players)}", css_width, css_height,
                       last, title, 1000 // fps, audit=_worst(audits))
    return StepAnimation(page, count, title)


def _frame_audit(fig: Figure, css_width: int) -> dict[str, Any]:
    """The frame drawn now as the page shows it: css_width px, up to the column."""
    from helpers.figures.audit import COLUMN_PX, audit_at

    shown = min(css_width, COLUMN_PX)
    result = audit_at(fig, shown / (fig.get_figwidth() * fig.dpi), png_width_px=css_width,
                      scale=shown / css_width)
    return result.as_metadata()


def _worst(audits: list[dict[str, Any]]) -> dict[str, Any]:
    """One audit for the frames audited: the smallest text, every spill and legend."""
    worst = dict(min(audits, key=lambda a: a["min_text_px"]))
    for key in ("spills", "legend_over_data"):
        worst[key] = list(dict.fromkeys(x for a in audits for x in a[key]))
    return worst


_BUTTON = ("display:inline-flex;align-items:center;gap:4px;padding:2px 8px;font:inherit;"
           "font-size:0.9em;line-height:1.6;color:inherit;background:transparent;"
           "border:1px solid currentColor;border-radius:4px;cursor:pointer;opacity:0.85")
_SVG = ('<svg viewBox="0 0 16 16" width="12" height="12" aria-hidden="true" '
        'focusable="false"><path fill="currentColor" d="{}"/></svg>')
ICONS = {"first": "M2 2h2.5v12H2zM14 2v12L5.5 8z", "back": "M12.5 2v12L3.5 8z",
         "play": "M3.5 2v12l9-6z", "pause": "M3 2h3.5v12H3zM9.5 2H13v12H9.5z",
         "last": "M11.5 2H14v12h-2.5zM2 2v12l8.5-6z"}
# (action, accessible name, visible label): labels are ASCII words beside inline SVG icons
CONTROLS = [("first", "First frame", "{first}"), ("prev", "Previous frame", "{back} step"),
            ("play", "Play", "{play} play"), ("next", "Next frame", "step {play}"),
            ("last", "Last frame", "{last}")]


def _icons(label: str) -> str:
    return label.format(**{name: _SVG.format(path) for name, path in ICONS.items()})


def player_html(sources: list[str], uid: str, css_width: int, css_height: int,
                last_frame: Any, title: str, interval_ms: int,
                audit: dict[str, Any] | None = None) -> str:
    """The player's markup: the last frame as the poster, the controls, the other frames
    (JSON) and its script. Without the script (an untrusted notebook) the poster stays.
    `audit` (helpers.figures.audit, as metadata) goes in data-figure-audit."""
    count = len(sources)
    buttons = "".join(
        f'<button type="button" data-action="{action}" aria-label="{name}" title="{name}" '
        f'style="{_BUTTON}">{_icons(label)}</button>' for action, name, label in CONTROLS)
    script = (_SCRIPT.replace('"__ID__"', json.dumps(uid))
              .replace('"__PLAY__"', json.dumps(_icons("{play} play")))
              .replace('"__PAUSE__"', json.dumps(_icons("{pause} pause")))
              .replace("</", "<\\/"))      # never closes its <script> early
    audit_attr = ("" if audit is None else
                  f'data-figure-audit="{html.escape(json.dumps(audit), quote=True)}" ')
    return (
        f'<div class="nccl-animation step-animation" id="{uid}" data-frames="{count}" '
        f'data-frame="{count - 1}" data-interval="{interval_ms}" '
        f'data-last-frame="{html.escape(json.dumps(last_frame), quote=True)}" '
        f'{audit_attr}style="max-width:100%;margin:0.4em 0">'
        f'<img class="nccl-animation-frame" src="{sources[-1]}" width="{css_width}" '
        f'height="{css_height}" alt="{html.escape(title, quote=True)}" '
        f'style="display:block;width:{css_width}px;max-width:100%;height:auto">'
        f'<div class="nccl-animation-controls" style="display:none;flex-wrap:wrap;'
        f'align-items:center;gap:6px;margin-top:6px;max-width:{css_width}px">{buttons}'
        f'<input type="range" class="anim-slider" min="0" max="{count - 1}" step="1" '
        f'value="{count - 1}" aria-label="Frame" style="flex:1 1 100px;min-width:80px">'
        f'<span class="nccl-animation-counter" aria-live="polite" '
        f'style="font-size:0.9em;white-space:nowrap">frame {count}/{count}</span></div>'
        # the last frame is the poster's src: the list holds the others
        f'<script type="application/json" class="nccl-animation-data">'
        f"{json.dumps(sources[:-1])}</script><script>{script}</script>"
        "</div>")


# document.currentScript is this script inside its player (JupyterLab re-inserts scripts in
# place, pages run them where they stand); the id is the fallback where a notebook front
# end runs scripts elsewhere. Each player keeps its own state: several on a page are apart.
_SCRIPT = """(function () {
  var me = document.currentScript, id = "__ID__";
  function find() {
    var p = me && me.parentNode;
    if (p && p.classList && p.classList.contains("nccl-animation")) return p;
    return document.getElementById(id);
  }
  function setup(root) {
    if (!root) return false;
    if (root.getAttribute("data-ready")) return true;
    root.setAttribute("data-ready", "1");
    var img = root.querySelector("img.nccl-animation-frame");
    var frames = JSON.parse(root.querySelector("script.nccl-animation-data").textContent);
    frames.push(img.getAttribute("src"));
    var n = frames.length, timer = null;
    var controls = root.querySelector(".nccl-animation-controls");
    var slider = root.querySelector("input.anim-slider");
    var counter = root.querySelector(".nccl-animation-counter");
    var play = root.querySelector('button[data-action="play"]');
    var interval = Number(root.getAttribute("data-interval")) || 500;
    function current() { return Number(root.getAttribute("data-frame")); }
    function show(i) {
      i = Math.max(0, Math.min(n - 1, i));
      img.setAttribute("src", frames[i]);
      slider.value = String(i);
      root.setAttribute("data-frame", String(i));
      counter.textContent = "frame " + (i + 1) + "/" + n;
    }
    function label(playing) {
      play.innerHTML = playing ? "__PAUSE__" : "__PLAY__";
      play.setAttribute("aria-label", playing ? "Pause" : "Play");
      play.setAttribute("title", playing ? "Pause" : "Play");
    }
    function stop() {
      if (timer !== null) clearInterval(timer);
      timer = null;
      label(false);
    }
    function start() {
      if (current() >= n - 1) show(0);
      label(true);
      timer = setInterval(function () {
        show(current() + 1);
        if (current() >= n - 1) stop();
      }, interval);
    }
    controls.addEventListener("click", function (event) {
      var button = event.target.closest ? event.target.closest("button[data-action]") : null;
      if (!button) return;
      var action = button.getAttribute("data-action"), i = current();
      if (action === "play") { if (timer === null) start(); else stop(); return; }
      stop();
      show(action === "first" ? 0 : action === "last" ? n - 1 :
           action === "prev" ? i - 1 : i + 1);
    });
    slider.addEventListener("input", function () { stop(); show(Number(slider.value)); });
    controls.style.display = "flex";
    return true;
  }
  if (!setup(find())) setTimeout(function () { setup(find()); }, 0);
})();"""


def ease(fraction: float) -> float:
    """Smooth start and stop for a piece in flight (0 → 0, 1 → 1)."""
    return fraction * fraction * (3 - 2 * fraction)
