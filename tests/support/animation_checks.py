"""Reading the step-through animations back, from an executed notebook or a loaded page.

`show_animation` (helpers.figures.animation) writes a player: <div class="nccl-animation
step-animation" data-frames=N data-frame=I data-last-frame=JSON>, whose
<img class="nccl-animation-frame"> shows frame I (the last, N − 1, when the page loads);
the JSON is what the last frame's artists showed.
"""
from __future__ import annotations

import html
import json
import re

import numpy as np

from helpers.formatting import format_value
from helpers.figures.panels import flatten

ROOT = re.compile(r'<div class="nccl-animation(?: [^"]*)?"[^>]*>')
ATTRIBUTE = re.compile(r'\s(data-[a-z-]+)="([^"]*)"')
POSTER = re.compile(r'<img class="nccl-animation-frame" src="([^"]*)"')
FRAME = "data:image/png;base64,"
REMOTE = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", re.IGNORECASE)


def players(page: str) -> list[dict]:
    """Every player in an HTML text, in order: its data-* attributes (unescaped) and the
    HTML from its root to the next player's root."""
    roots = list(ROOT.finditer(page))
    found = []
    for k, root in enumerate(roots):
        end = roots[k + 1].start() if k + 1 < len(roots) else len(page)
        attrs = {name: html.unescape(value) for name, value in ATTRIBUTE.findall(root.group())}
        found.append({"attrs": attrs, "html": page[root.start():end]})
    return found


def animations(nb) -> list[dict]:
    """Per animation output, in order: frames (announced and embedded), the frame shown on
    load, its last frame, whether it loads anything from the network, and its size in KB."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            page = str(out.get("data", {}).get("text/html", ""))
            for player in players(page):
                attrs = player["attrs"]
                found.append({"frames": int(attrs["data-frames"]),
                              "shown": int(attrs["data-frame"]),
                              "embedded": player["html"].count(FRAME),
                              "last": json.loads(attrs["data-last-frame"]),
                              "remote": bool(REMOTE.search(player["html"])),
                              "kb": len(player["html"].encode()) / 1024})
    return found


def written_texts(record: dict, rank: int, arg: str) -> list[str]:
    """What the animation should show for `arg` of `rank` after the call, as cell texts."""
    value = record["ranks"][rank]["after"].get(arg)
    return [] if value is None else [format_value(v) for v in flatten(value)]


def assert_one_animation_of(nb, record: dict, written_arg: str) -> dict:
    """The notebook shows a record animation whose last frame is `record`'s `after`."""
    anim = only_animation(nb, "ranks")
    for r, drawn in enumerate(anim["last"]["ranks"]):
        assert drawn["written"] == written_texts(record, r, written_arg), (r, drawn)
    return anim


def ring_texts(state, n: int) -> list[list[str]]:
    """Per rank, per chunk, what helpers.collectives.ring shows: the value, or its first and …"""
    state = np.asarray(state, dtype=np.float64)
    return [[format_value(c[0]) + ("" if np.all(c == c[0]) else "…")
             for c in state[r].reshape(n, -1)] for r in range(n)]


def only_animation(nb, key: str) -> dict:
    """The one animation of the executed notebook whose last frame has `key`
    ("ranks": a record or the ring; "spans": a timeline), checked to be whole, offline and
    opening on its last frame."""
    shown = [a for a in animations(nb) if key in a["last"]]
    assert len(shown) == 1, f"{len(shown)} animations with {key!r} in the notebook"
    anim = shown[0]
    assert anim["frames"] > 2 and anim["embedded"] == anim["frames"], anim["frames"]
    assert anim["shown"] == anim["frames"] - 1, "the player does not open on its last frame"
    assert not anim["remote"], "the animation loads something from the network"
    return anim


# Runs in the page: per player, the frame index and count it says it shows, and the share
# of the shown <img>'s pixels that differ from its top-left pixel (the background), read
# from a canvas (data: URIs are same-origin, so the canvas stays readable).
DISPLAYED_JS = """async () => {
  const out = [];
  for (const root of document.querySelectorAll('.nccl-animation')) {
    const img = root.querySelector('img.nccl-animation-frame');
    if (img && !img.complete) await new Promise(r => { img.onload = img.onerror = r; });
    let ink = null;
    if (img && img.naturalWidth > 0) {
      const canvas = document.createElement('canvas');
      canvas.width = img.naturalWidth;
      canvas.height = img.naturalHeight;
      const ctx = canvas.getContext('2d');
      ctx.drawImage(img, 0, 0);
      const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
      let inked = 0;
      for (let i = 0; i < px.length; i += 4) {
        const d = Math.max(Math.abs(px[i] - px[0]), Math.abs(px[i + 1] - px[1]),
                           Math.abs(px[i + 2] - px[2]));
        if (d > __TOLERANCE__) inked++;
      }
      ink = inked / (px.length / 4);
    }
    out.push({index: Number(root.getAttribute('data-frame')),
              count: Number(root.getAttribute('data-frames')), ink: ink,
              id: root.id, width: img ? img.getBoundingClientRect().width : 0});
  }
  return out;
}"""
INK_TOLERANCE = 24      # per channel, of 255: anti-aliasing's faint halo is not ink


def displayed_frames(page) -> list[dict]:
    """For every `.nccl-animation` on a loaded Playwright page, in document order:
    {index, count, ink, id, width}: the frame it shows (0-based) and how many it has, the
    fraction of the shown frame's pixels that are not background (None if no image
    loaded), the player's id and the frame's displayed width in CSS px."""
    return page.evaluate(DISPLAYED_JS.replace("__TOLERANCE__", str(INK_TOLERANCE)))
