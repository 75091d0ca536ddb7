"""`make lab`'s Jupyter server settings (the Makefile puts this folder on JUPYTER_CONFIG_PATH).

ipyparallel's server extension (its IPython Clusters panel) reads every cluster file of
every profile in IPYTHONDIR each time the panel asks (GET /ipyparallel/clusters, every
5 s): ClusterManager.load_clusters, ipyparallel/cluster/cluster.py. It rebuilds each
running cluster's launchers (LocalProcessLauncher.from_dict, cluster/launcher.py), which
watch the processes. When one it did not start ends, its exit code is unknown (None), and
BaseLauncher._log_output logs the last output_limit (100) lines of the process's output
file (the engines' or the controller's own log) as a WARNING: `None != 0`. The notebooks'
clusters are such clusters, and so is any cluster a notebook starts with ipyparallel alone.

Here only the terminal changes, not what the extension does: the panel still lists the
clusters. The terminal keeps the server's own log and every ERROR, and drops what
ipyparallel's cluster code (ipyparallel/cluster/) logs below ERROR: those outputs, and
"Controller stopped", "engine set stopped", "Removing stopped cluster", of any cluster.
Through logging's dictConfig, which traitlets' Application.logging_config feeds.
"""
import logging
import os

import ipyparallel.cluster

CLUSTER_CODE = os.path.dirname(ipyparallel.cluster.__file__) + os.sep


class ClusterChatter(logging.Filter):
    """Drops the records logged by ipyparallel's cluster code below ERROR."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or not record.pathname.startswith(CLUSTER_CODE)


c = get_config()  # noqa: F821  (traitlets gives a config file this function)
c.ServerApp.logging_config = {
    "filters": {"cluster_chatter": {"()": ClusterChatter}},
    "handlers": {"console": {"filters": ["cluster_chatter"]}},
}
