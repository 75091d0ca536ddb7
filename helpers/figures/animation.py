"""What every step-through animation shares: building it, reading a frame back, showing it.

An animation here is a matplotlib `FuncAnimation` over frames 0 … n − 1 with two extra
attributes: `draw_frame(i)` (puts the figure's artists in frame i's state) and
`read_drawn()` (what the artists show now, as plain data). `read_frame(anim, i)` uses
both, so tests and the page's caption check what is drawn, not what went in.
"""
from __future__ import annotations

import html
import json
import re
from typing import Any, Callable

from matplotlib.animation import FuncAnimation
from matplotlib.figure import Figure

FPS = 2                 # frames per second when played: slow enough to follow one step
# to_jshtml links Font Awesome from a CDN for its button icons: plain characters instead,
# so the page loads nothing from the network.
ICONS = {"fa fa-minus": "−", "fa fa-plus": "+", "fa fa-fast-backward": "⏮",
         "fa fa-step-backward": "◁", "fa fa-play fa-flip-horizontal": "◀",
         "fa fa-pause": "⏸", "fa fa-play": "▶", "fa fa-step-forward": "▷",
         "fa fa-fast-forward": "⏭"}
REMOTE_LINK = re.compile(r"<link[^>]*href=\"https?://[^\"]*\"[^>]*>")
EMBED_LIMIT_MB = 4.0    # to_jshtml stops adding frames past this; we refuse instead


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


def show_animation(anim: FuncAnimation, fps: int = FPS):
    """The animation as self-contained HTML (PNG frames, base64) for a notebook cell.

    The figure is closed, so the notebook shows the animation only. The wrapper's
    `data-last-frame` holds the last frame's drawn values (read back from the artists),
    a text alternative that tests compare with the recorded `after`.
    """
    import matplotlib
    import matplotlib.pyplot as plt
    from IPython.display import HTML

    with matplotlib.rc_context({"animation.embed_limit": EMBED_LIMIT_MB}):
        page = offline(anim.to_jshtml(fps=fps, default_mode="once"))
    embedded = page.count("data:image/png;base64,")
    if embedded != anim.frame_count:
        raise ValueError(f"only {embedded} of {anim.frame_count} frames fit in "
                         f"{EMBED_LIMIT_MB} MB: draw fewer frames or a smaller figure")
    last = read_frame(anim, anim.frame_count - 1)
    plt.close(anim._fig)
    anim.event_source = None       # nothing left to play outside the page
    return HTML(f'<div class="step-animation" data-frames="{anim.frame_count}" '
                f'data-last-frame="{html.escape(json.dumps(last), quote=True)}">'
                f"{page}</div>")


def offline(page: str) -> str:
    """to_jshtml's page without its stylesheet link: the buttons get plain characters."""
    page = REMOTE_LINK.sub("", page)
    for icon, character in ICONS.items():
        page = page.replace(f'<i class="{icon}"></i>', character)
    return page


def ease(fraction: float) -> float:
    """Smooth start and stop for a piece in flight (0 → 0, 1 → 1)."""
    return fraction * fraction * (3 - 2 * fraction)
