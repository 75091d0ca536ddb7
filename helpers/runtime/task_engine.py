"""One engine per task of a batch job (the slurm launcher's srun), with its nanny forked.

    srun python -m helpers.runtime.task_engine [ipengine arguments...]

What `python -m ipyparallel.engine` runs, but the engine's nanny is forked here
(engine_boot.fork_nanny) before anything starts a thread: a nanny that, when the job ends
(scancel, the time limit), tells the controller at once that its engine is going. With
ipyparallel's own nanny the controller heard of it only from missed heartbeats, 30 s
later, and a cell running on the cancelled engines waited as long to fail. The
connection comes in $IPP_CONNECTION_INFO, as ipyparallel sends it to batch engines.
"""
from __future__ import annotations


def main() -> None:
    from ipyparallel.engine.app import main as engine_main

    from helpers.runtime.engine_boot import fork_nanny

    fork_nanny()
    engine_main()


if __name__ == "__main__":
    main()
