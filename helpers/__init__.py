"""Plumbing for the nccl-notebooks series: the taught code stays in the notebooks."""
from helpers.cluster import ClusterConfigError, TutorialCluster, start_cluster
from helpers.display import rank_table
from helpers.results import make_record, save_results

__all__ = ["ClusterConfigError", "TutorialCluster", "start_cluster", "rank_table",
           "make_record", "save_results"]
