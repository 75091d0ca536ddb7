"""The pictures the series shares: per-rank plots and panels, the scheme drawings
(images/), the upstream diagrams, tables, and the step-through animations.

An animation is drawn from what a run recorded, not from theory: frame 0 is the recorded
`before`, the last frame the recorded `after`. `show_animation(anim)` (animation.py) embeds
it as PNG frames (matplotlib's `to_jshtml`: self-contained, no script from the network).
A part's own plots live with it (helpers/bench/figures.py, helpers/training/).
"""
