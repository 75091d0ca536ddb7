"""What a process's forkserver imports, once, before it forks a disposable rank or an engine.

helpers/runtime/disposable.py and helpers/runtime/forked_engines.py name this module in
the preload of the `multiprocessing` forkserver context (disposable_rank.PRELOAD), so that
a rank of a case, or an engine, costs a fork, not a new `python` importing torch. Only
that server imports it: it sets an environment variable and freezes the collector's view
of what it imported.
"""
from __future__ import annotations

import gc
import os
import sys

from helpers.runtime.launchers import engine_log_env

# c10 reads TORCH_CPP_LOG_LEVEL once, when torch is imported, and a forked rank keeps what
# its server read: the engines' rule (the caller's level, else ERROR) must hold here first.
if "torch" not in sys.modules:
    for name, value in engine_log_env().items():
        if os.environ.get(name) != value:
            os.environ[name] = value

import torch  # noqa: E402,F401
import torch.distributed  # noqa: E402,F401

import ipykernel.ipkernel  # noqa: E402,F401
import ipyparallel.engine.app  # noqa: E402,F401

import helpers.runtime.disposable_rank  # noqa: E402,F401
import helpers.runtime.engine  # noqa: E402,F401
import helpers.runtime.rendezvous  # noqa: E402,F401
import helpers.runtime.transfer  # noqa: E402,F401

# Never collected (the gc module's advice before fork): a rank's full collections skip the
# ~200,000 objects imported here instead of walking them.
gc.freeze()
