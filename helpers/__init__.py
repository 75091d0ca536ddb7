"""Plumbing for the nccl-notebooks series: the taught code stays in the notebooks."""
from helpers.cluster import ClusterConfigError, TutorialCluster, start_cluster
from helpers.diagrams import load_diagram, show_diagram
from helpers.display import plot_barrier, rank_table
from helpers.models import check_prediction, report
from helpers.plots import plot_record
from helpers.results import make_record, record_from_states, save_results

__all__ = ["ClusterConfigError", "TutorialCluster", "start_cluster", "load_diagram",
           "show_diagram", "rank_table", "plot_barrier", "check_prediction", "report", "plot_record",
           "make_record", "record_from_states", "save_results"]
