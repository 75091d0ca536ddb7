"""Step-through animations of recorded runs: what moved where, frame by frame.

Every animation is drawn from what a run recorded, not from theory: frame 0 is the
recorded `before`, the last frame the recorded `after` (or the measured per-step states,
or the measured timeline). `show_animation(anim)` embeds it in the page as PNG frames
(matplotlib's `to_jshtml`: self-contained, no script loaded from the network).

- `animate_record(record)`: one collective call (notebooks 01-08), one send/recv (09);
- `animate_ring(trace, measured)`: the hand-built ring all-reduce, step by step (notebook 10);
- `animate_timeline(timelines)`, `animate_barrier(timings)`: measured per-rank spans
  filling in over time (notebooks 18 and 00).

The static figures (helpers.plots, helpers.ring, helpers.training.pipeline) stay for print
and slides. Used by notebooks 00-10 and 18, which import from the submodules
(`from helpers.animations.records import animate_record`): a page then depends on the
modules it uses only, so editing helpers/ring.py re-executes notebook 10 alone.
"""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"read_frame": "core", "show_animation": "core", "animate_record": "records",
          "animate_ring": "ring", "animate_barrier": "timeline",
          "animate_timeline": "timeline"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """`from helpers.animations import animate_ring` imports only the module it needs."""
    if name not in _WHERE:
        raise AttributeError(f"module 'helpers.animations' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
