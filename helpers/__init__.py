"""What the nccl-notebooks notebooks import; the taught code stays in the notebooks.

Layout: this package holds only what notebooks use (collectives.py is the registry every
module reads); helpers.runtime the engines and process group behind start_cluster;
helpers.bench the bandwidth measurement; the site tooling is in tools/, outside it.

The names below are imported on first use, so `python -m helpers.bench` on every rank
and the code shipped to engines do not pay for matplotlib and ipyparallel.
"""
from importlib import import_module

_WHERE = {
    "ClusterConfigError": "helpers.runtime.config", "TutorialCluster": "helpers.runtime.cluster",
    "start_cluster": "helpers.runtime.cluster", "load_diagram": "helpers.figures.diagrams",
    "show_diagram": "helpers.figures.diagrams", "rank_table": "helpers.figures.display",
    "plot_barrier": "helpers.figures.display", "check_prediction": "helpers.checks",
    "report": "helpers.checks", "plot_record": "helpers.figures.plots",
    "make_record": "helpers.records", "record_from_states": "helpers.records",
    "save_results": "helpers.records",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")
