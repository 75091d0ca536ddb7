"""Training parallelism, built by hand (notebooks 14–19): the toy model, its data and
single-process reference (`toy`), and the count of what each rank sends (`comm`).

The taught code (every `dist.<collective>` call) stays in the notebooks' `%%px` cells;
these modules hold what every rank and the notebook share.
"""
