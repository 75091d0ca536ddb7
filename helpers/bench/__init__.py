"""Bandwidth measurement, as nccl-tests reports it (notebook 11, `make bench`).

- `nccl_tests`: sizes, plans and the nccl-tests table (busbw factors live in
  helpers.collectives.registry);
- `measurement`: one timed collective on every rank, and the `torchrun -m helpers.bench`
  command;
- `sweep`: a sweep driven from the notebook; `figures`: its plots, tables and self-checks;
- `alpha_beta`: the α-β model fitted to a sweep (notebook 11 and `--fit`).
- `ratios`: paired ratios repeated until they hold still (`make bench` only);
- `taught`: a notebook's `%%px` definitions run outside Jupyter, and `step_profile`: a
  step's compute, communication and waiting from torch.profiler (`make bench`'s training
  table only); `quote`: that table's rows, as the notebooks show them.
"""
