"""The process plumbing behind `start_cluster`: engines (one per rank), the process group,
launchers (local, mpi, slurm), warm start, leftover processes, diagnosis of a failed start.

Nothing here is taught; notebooks reach it through `helpers.start_cluster` and the
methods of the cluster it returns.
"""
