"""What tools/kernel_provisioner.py uses beyond documented APIs, and when each can go.

tools.execute runs kernels through jupyter_client's public API only (a provisioner, its
plug-in point). Forking them from the standard library's forkserver needs two names that
Python's documentation does not describe; each entry says why, and its probe tells
whether the installed Python still has it (tests/tools/test_execute.py checks every
probe, and that the code it names says `jupyter_compat: <key>` beside it). Where a probe
fails, the provisioner is not used (`usable`) and kernels are launched as jupyter_client
launches them.
"""
from __future__ import annotations

import atexit
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Entry:
    key: str
    where: str        # "module:qualified.name" of the code that uses it
    why: str
    recheck: str      # how to tell it can go
    present: Callable[[], bool]   # probe: the installed Python still has it


def _has_dupfd() -> bool:
    from multiprocessing import reduction

    return callable(getattr(reduction, "DupFd", None))


def _has_run_exitfuncs() -> bool:
    return callable(getattr(atexit, "_run_exitfuncs", None))


ENTRIES = (
    Entry(
        "dupfd", "tools.kernel_provisioner:Inherited",
        "a forkserver child has the server's fd 1 and 2, not its caller's now: "
        "multiprocessing.reduction.DupFd (not underscored, in no __all__ nor in the docs) is "
        "how multiprocessing pickles a Connection's fd for a child (connection.py: "
        "reduce_connection) and how torch.multiprocessing shares a tensor's storage "
        "(torch/multiprocessing/reductions.py: reduce_storage)",
        "Python documents a way to hand a child an fd, or multiprocessing stops using it",
        _has_dupfd),
    Entry(
        "atexit-run-exitfuncs", "tools.jupyter_compat:run_exit_handlers",
        "a multiprocessing child ends in os._exit (process.py: BaseProcess._bootstrap, then "
        "popen_fork/forkserver), so a kernel's atexit handlers (IPython's "
        "atexit_operations, helpers.scale.checkpoints' folder removal) would never run; "
        "atexit has no public way to run them",
        "multiprocessing runs atexit handlers in its children (then drop the call)",
        _has_run_exitfuncs),
)


def usable(key: str) -> bool:
    """Whether the entry `key`'s name is still there."""
    [entry] = [e for e in ENTRIES if e.key == key]
    return entry.present()


def run_exit_handlers() -> None:
    """Run the atexit handlers registered so far, as an ending python does."""
    if usable("atexit-run-exitfuncs"):
        atexit._run_exitfuncs()    # jupyter_compat: atexit-run-exitfuncs
