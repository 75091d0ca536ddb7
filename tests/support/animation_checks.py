"""Reading the step-through animations back out of an executed notebook (helpers.figures).

`show_animation` wraps to_jshtml's page in <div class="step-animation" data-frames=N
data-last-frame=JSON>: the JSON is what the last frame's artists showed.
"""
from __future__ import annotations

import html
import json
import re

import numpy as np

from helpers.formatting import format_value
from helpers.figures.panels import flatten

WRAPPER = re.compile(r'<div class="step-animation" data-frames="(\d+)" '
                      r'data-last-frame="([^"]*)">')
FRAME = "data:image/png;base64,"
REMOTE = re.compile(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", re.IGNORECASE)


def animations(nb) -> list[dict]:
    """Per animation output, in order: frames (announced and embedded), its last frame,
    whether it loads anything from the network, and its size in KB."""
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            page = str(out.get("data", {}).get("text/html", ""))
            match = WRAPPER.search(page)
            if match:
                found.append({"frames": int(match.group(1)), "embedded": page.count(FRAME),
                              "last": json.loads(html.unescape(match.group(2))),
                              "remote": bool(REMOTE.search(page)),
                              "kb": len(page.encode()) / 1024})
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
    """Per rank, per chunk, what helpers.collectives.ring shows: the value, or its first value and …"""
    state = np.asarray(state, dtype=np.float64)
    return [[format_value(c[0]) + ("" if np.all(c == c[0]) else "…")
             for c in state[r].reshape(n, -1)] for r in range(n)]


def only_animation(nb, key: str) -> dict:
    """The one animation of the executed notebook whose last frame has `key`
    ("ranks": a record or the ring; "spans": a timeline), checked to be whole and offline."""
    shown = [a for a in animations(nb) if key in a["last"]]
    assert len(shown) == 1, f"{len(shown)} animations with {key!r} in the notebook"
    anim = shown[0]
    assert anim["frames"] > 2 and anim["embedded"] == anim["frames"], anim["frames"]
    assert not anim["remote"], "the animation loads something from the network"
    return anim
