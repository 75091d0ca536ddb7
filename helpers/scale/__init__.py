"""Part 5 (notebooks 25–27): the collectives at scale, by hand.

Which algorithm a collective runs (ring, tree, halving-doubling) and when each wins (25),
checkpoints that survive a failed rank and a change of world size (26), and a planner that
predicts a run's collectives, bytes, memory and time, checked against measured runs (27).
The taught code (every `dist.<collective>` call) stays in the notebooks' `%%px` cells; these
modules hold what every rank and the notebook share.
"""
