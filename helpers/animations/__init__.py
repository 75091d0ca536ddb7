"""Step-through animations of recorded runs: what moved where, frame by frame.

Every animation is drawn from what a run recorded, not from theory: frame 0 is the
recorded `before`, the last frame the recorded `after` (or the measured per-step states,
or the measured timeline). `show_animation(anim)` embeds it in the page as PNG frames
(matplotlib's `to_jshtml`: self-contained, no script loaded from the network).

- `animate_record(record)`: one collective call (notebooks 01-08);
- `animate_ring(trace, measured)`: the hand-built ring all-reduce, step by step (notebook 10);
- `animate_timeline(timelines)`, `animate_barrier(timings)`: measured per-rank spans
  filling in over time (notebooks 18 and 00).

The static figures (helpers.plots, helpers.ring, helpers.training.pipeline) stay for print
and slides. Used by notebooks 00-08, 10 and 18.
"""
from helpers.animations.core import read_frame, show_animation
from helpers.animations.records import animate_record
from helpers.animations.ring import animate_ring
from helpers.animations.timeline import animate_barrier, animate_timeline

__all__ = ["animate_barrier", "animate_record", "animate_ring", "animate_timeline",
           "read_frame", "show_animation"]
