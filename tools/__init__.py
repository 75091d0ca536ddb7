"""Site tooling, outside the package the notebooks import: `python -m tools.build`
(make html), `tools.classroom` (make student / slides), `tools.execute` (one notebook
with a real kernel), `tools.gpu_check` (make gpu-check), `tools.shared_cells`.
"""
