"""The pictures the series shares: per-rank plots and panels, the scheme drawings
(images/), the upstream diagrams, tables, and the step-through animations.

An animation is drawn from what a run recorded, not from theory: frame 0 is the recorded
`before`, the last frame the recorded `after`. `show_animation(anim)` (animation.py) embeds
it as PNG frames in a small player that opens on the last frame (self-contained, no network).
A part's own plots live with it (helpers/bench/figures.py, helpers/training/).
"""
