"""Part 4 (notebooks 23–24): fitting a training step in memory and time, by hand.

Gradient accumulation, activation recomputation and compressed gradients (23), the
pipeline schedules after 1F1B (24). The taught code (every `dist.<collective>` call) stays
in the notebooks' `%%px` cells; these modules hold what every rank and the notebook share.
"""
