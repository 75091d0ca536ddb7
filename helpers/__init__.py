"""What the nccl-notebooks notebooks import; the taught code stays in the notebooks.

How helpers/ is organised (a folder says who uses it), and where each thing lives:
docs/ARCHITECTURE.md. The site tooling is in tools/, outside it.

The names below are imported on first use, so `python -m helpers.bench` on every rank
and the code shipped to engines do not pay for matplotlib and ipyparallel.
"""
from importlib import import_module

_WHERE = {   # each of these is imported by a notebook (tests/tools/test_architecture.py)
    "ClusterConfigError": "helpers.runtime.config", "start_cluster": "helpers.runtime.cluster",
    "load_diagram": "helpers.figures.diagrams", "rank_table": "helpers.figures.display",
    "plot_barrier": "helpers.figures.display", "plot_ranks": "helpers.figures.display",
    "grade": "helpers.checks",
    "Report": "helpers.checks", "report": "helpers.collectives.model_check",
    "plot_record": "helpers.figures.plots", "make_record": "helpers.records",
    "save_results": "helpers.records", "save_run": "helpers.records",
}
# What start_cluster adds to a kernel from outside helpers/runtime (which imports no lesson
# code): the waiting line of %%px cells and the report of a cell ■ stopped.
KERNEL_ADDITIONS = ("helpers.debugging.waiting",)
__all__ = sorted(_WHERE)
# The modules behind those names: what a notebook's first cell imports (tools.kernel_provisioner's
# kernels import them before they are forked).
MODULES = tuple(dict.fromkeys(_WHERE.values()))


def __getattr__(name: str):
    if name in _WHERE:
        if name == "start_cluster":
            for module in KERNEL_ADDITIONS:
                import_module(module).install()
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")
