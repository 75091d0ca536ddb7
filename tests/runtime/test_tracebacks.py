"""Tracebacks without machine paths, and an engine's traceback cut to the reader's frames."""
from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from helpers.runtime import diagnose
from helpers.runtime.tracebacks import (REPO_ROOT, quiet_paths_in_tracebacks, short_traceback,
                                        without_machine_paths)

PACKAGES = sysconfig.get_paths()["purelib"]          # .../.venv/lib/python3.x/site-packages
STDLIB = sysconfig.get_paths()["stdlib"]
ANSI_RED, ANSI_END = "\x1b[31m", "\x1b[39m"
RULE = "-" * 75

# What an engine sends back for `dist.all_reduce` refusing a mismatch (IPython's format).
ENGINE_TB = f"""{ANSI_RED}{RULE}{ANSI_END}
{ANSI_RED}RuntimeError{ANSI_END}                              Traceback (most recent call last)
Cell In[76], line 2
      1 tensor = torch.ones(4 + (rank == 1), device=device)   # rank 1: 5 elements
----> 2 dist.all_reduce(tensor)

File {PACKAGES}/torch/distributed/c10d_logger.py:83, in _exception_logger.<locals>.wrapper(*args)
     82     try:
---> 83         return func(*args, **kwargs)

File {REPO_ROOT}/helpers/runtime/engine.py:70, in snapshot(**named)
     69     x = 1
---> 70     return named

File {PACKAGES}/torch/distributed/distributed_c10d.py:3245, in all_reduce(tensor, op)
-> 3245 work = group.allreduce([tensor], opts)

RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective

  TensorShape=[4] but Rank 1 TensorShape=[5]
"""


def test_an_engine_traceback_keeps_the_cell_the_project_and_the_message():
    lines = short_traceback(ENGINE_TB)
    text = "\n".join(lines)
    assert lines[0] == "the cell, line 2"
    assert "----> 2 dist.all_reduce(tensor)" in text
    assert "File helpers/runtime/engine.py:70, in snapshot(**named)" in text   # ours: kept
    assert "---> 70     return named" in text
    assert "(2 library frames left out: torch/distributed/c10d_logger.py, " \
           "torch/distributed/distributed_c10d.py)" in lines
    assert "group.allreduce" not in text and "return func" not in text   # their code: out
    assert text.endswith("RuntimeError: Detected mismatch between collectives on ranks. Rank 0"
                         " is running collective\n\n  TensorShape=[4] but Rank 1 TensorShape=[5]")
    for noise in ("Cell In[", "\x1b[", str(REPO_ROOT), "site-packages", ".venv", "-----"):
        assert noise not in text, noise


CHAINED_TB = f"""{RULE}
KeyError                                  Traceback (most recent call last)
File {PACKAGES}/torch/distributed/rendezvous.py:12, in lookup(key)
---> 12     return table[key]

KeyError: 'k'

The above exception was the direct cause of the following exception:

{RULE}
RuntimeError                              Traceback (most recent call last)
Cell In[5], line 3
      2 except KeyError as err:
----> 3     raise RuntimeError("no such store key") from err

RuntimeError: no such store key
"""


def test_a_chained_exception_keeps_every_link_and_its_message():
    text = "\n".join(short_traceback(CHAINED_TB))
    cause, _, effect = text.partition(
        "The above exception was the direct cause of the following exception:")
    assert "(1 library frame left out: torch/distributed/rendezvous.py)" in cause
    assert cause.rstrip().endswith("KeyError: 'k'")
    assert effect.strip().startswith("the cell, line 3")
    assert text.endswith("RuntimeError: no such store key")
    assert "site-packages" not in text and "Cell In[" not in text


def test_text_that_is_no_traceback_comes_back_whole_without_paths():
    dead = ("Traceback (most recent call last):\n\n"
            f'  File "{PACKAGES}/ipyparallel/client/client.py", line 889, in _handle\n'
            "    raise error.EngineError(\n\n"
            "ipyparallel.error.EngineError: Engine 3 died while running task 'x'")
    assert short_traceback(dead) == [
        "Traceback (most recent call last):", "",
        '  File "ipyparallel/client/client.py", line 889, in _handle',
        "    raise error.EngineError(", "",
        "ipyparallel.error.EngineError: Engine 3 died while running task 'x'"]


def test_machine_paths_become_project_and_package_paths():
    assert without_machine_paths(f"File {REPO_ROOT}/helpers/training/tp.py:45, in f") == \
        "File helpers/training/tp.py:45, in f"
    assert without_machine_paths(f'"{PACKAGES}/torch/nn/modules/module.py"') == \
        '"torch/nn/modules/module.py"'
    assert without_machine_paths(f"{STDLIB}/json/decoder.py:337") == "json/decoder.py:337"
    colored = f"\x1b[32m{REPO_ROOT}/helpers/x.py:3\x1b[39m"
    assert without_machine_paths(colored) == "\x1b[32mhelpers/x.py:3\x1b[39m"
    assert without_machine_paths("nothing to do: /dev/null") == "nothing to do: /dev/null"


class FakeShell:
    def __init__(self):
        self.shown: list[tuple] = []

    def _showtraceback(self, etype, evalue, stb):
        self.shown.append((etype, evalue, stb))


def test_a_kernel_shows_every_traceback_without_machine_paths_once_wrapped():
    shell = FakeShell()
    quiet_paths_in_tracebacks(shell)
    quiet_paths_in_tracebacks(shell)          # idempotent: wrapped once
    error = ValueError("10 features do not split evenly over 3 ranks")
    shell._showtraceback(ValueError, error, [
        f"File {REPO_ROOT}/helpers/training/tensor_parallel.py:45, in column_shard",
        f"File {Path(sys.prefix)}/lib/x/site-packages/torch/nn/functional.py:12, in linear"])
    [(etype, evalue, stb)] = shell.shown
    assert etype is ValueError and evalue is error
    assert stb == ["File helpers/training/tensor_parallel.py:45, in column_shard",
                   "File torch/nn/functional.py:12, in linear"]


def _diagnosis(*meanings: str) -> dict:
    return {"failed": [{"rank": r, "meaning": m, "survives": False}
                       for r, m in enumerate(meanings)], "skipped": [], "absent": []}


def test_the_traceback_shown_is_the_rank_that_explains_the_failure():
    timeout = "it waited the whole collective timeout for its peers"
    wrong_list = "a scatter/gather list must hold world_size tensors"
    # the scatter's source named the problem; the others only timed out
    assert diagnose.first_to_read(_diagnosis(timeout, wrong_list, timeout),
                                  {0: "tb", 1: "tb", 2: "tb"}) == 1
    # everyone timed out: the first rank with a traceback
    assert diagnose.first_to_read(_diagnosis(timeout, timeout), {0: "", 1: "tb"}) == 1
    # a dead rank has no traceback to read
    died = "its engine process died (re-run the start cell for a full set of ranks)"
    assert diagnose.first_to_read(_diagnosis(died, "some ranks never reached this collective"),
                                  {0: "", 1: "tb"}) == 1


def test_a_dead_engine_is_one_line_without_ipyparallels_frames_or_task_id():
    from helpers.runtime.diagnose import rank_traceback

    dead = ("Traceback (most recent call last):\n\n"
            f'  File "{PACKAGES}/ipyparallel/client/client.py", line 889, in _handle\n'
            "    raise error.EngineError(\n\n"
            "ipyparallel.error.EngineError: Engine 3 died while running task "
            "'3e073112-09e1c3f19fca34b5b3694251_29362_25'")
    shown = rank_traceback(3, "EngineError", "Engine 3 died", dead)
    assert shown == ["rank 3 · its engine process ended while running the cell: no "
                     "traceback (the process is gone)"]
    # any other error keeps its frames and message
    assert rank_traceback(0, "RuntimeError", "x", "RuntimeError: x")[-1] == "RuntimeError: x"
