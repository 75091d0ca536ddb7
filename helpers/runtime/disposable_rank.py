"""What one disposable rank runs (helpers/runtime/disposable.py): join a fresh gloo group
(unless the spec says no group), call the case, print what it returned, raised or took,
then wait to be let go.

`main` runs in a process of its own: forked from the fork server (forkserver.py), or a new
`python` (COLD_START) where there is none. The group it joins is this process's own.
"""
from __future__ import annotations

import json
import os
import sys
import time

RESULT_MARK = "@@disposable-result "
# python -c COLD_START <spec as JSON> <the folder that holds helpers/>
COLD_START = ("import json, sys; sys.path.insert(0, sys.argv[2])\n"
              "from helpers.runtime.disposable_rank import main, no_core_dumps\n"
              "no_core_dumps()\n"
              "main(json.loads(sys.argv[1]))")


def no_core_dumps() -> None:
    """No core dump when gloo aborts this process: the kernel keeps a dumping process's
    sockets open until the dump is written (189 MB, or a pipe to a crash collector), so its
    peers would wait out the timeout instead of failing at once, and a `core` file would be
    left in the notebook's folder. PR_SET_DUMPABLE covers piped dumps, which ignore the
    rlimit. A forked child keeps both."""
    import ctypes
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE = 4


# What a disposable rank's fork server imports before it forks (forkserver.Kind).
PRELOAD = ("torch", "torch.distributed", "helpers.runtime.rendezvous",
           "helpers.runtime.transfer")


def forked(spec: dict, fds: list[int]) -> None:
    """The fork server's entry: rank 0 gets its listening socket as the one fd passed on."""
    no_core_dumps()
    main({**spec, "listen_fd": fds[0] if fds else None})


def main(spec: dict) -> None:
    """Run the case `spec` names as rank spec["rank"]; never returns."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL" if spec["detail"] else "OFF"
    import torch
    import torch.distributed as dist

    from helpers.runtime.rendezvous import join
    from helpers.runtime.transfer import encode

    dist.set_debug_level_from_env()   # torch read it at import: in a forked rank, the server's
    rank, world_size = spec["rank"], spec["world_size"]
    store = None
    if spec["group"]:
        store = join("gloo", rank, world_size, "127.0.0.1", spec["port"], spec["timeout_s"],
                     listen_fd=spec["listen_fd"], store_timeout_s=spec["timeout_s"] + 10)
    namespace = {"torch": torch, "dist": dist, "__name__": "__disposable__"}
    exec(compile(spec["source"], "<case>", "exec"), namespace)
    case = namespace[spec["name"]]
    start = time.monotonic()
    try:
        value = (case(rank, world_size, **spec["args"]) if spec["group"]
                 else case(**spec["args"]))       # no group: the case makes its own
        report = {"result": encode(value)}
    except Exception as err:
        report = {"error": f"{type(err).__name__}: {err}"}
    report["seconds"] = time.monotonic() - start
    # the result travels as JSON: encode's tensors (and NumPy arrays) as nested lists
    sys.stdout.write(RESULT_MARK + json.dumps(report, default=lambda v: v.tolist()) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    while os.read(0, 4096):   # stay alive, like an engine, until every rank has reported
        pass                  # or died: the caller closes our stdin then
    del store     # held until here: rank 0's serves the group
    os._exit(0)   # no teardown: a peer may be dead, and these processes are disposable

