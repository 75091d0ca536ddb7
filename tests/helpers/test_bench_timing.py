"""helpers.bench's GPU timing, as nccl-tests times: every call launched, then one wait.

No GPU here: the CUDA calls are replaced by recorders, so what is checked is the order
of launches, waits and synchronizations, not a time.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from helpers.bench import measurement as bench


class _Work:
    def __init__(self, log: list[str], i: int):
        self.log, self.i = log, i

    def wait(self) -> None:
        self.log.append(f"wait {self.i}")


def _recording(monkeypatch) -> tuple[list[str], SimpleNamespace]:
    log: list[str] = []
    monkeypatch.setattr(bench.torch.cuda, "synchronize", lambda: log.append("synchronize"))
    monkeypatch.setattr(bench.dist, "barrier", lambda: log.append("barrier"))
    return log, SimpleNamespace(type="cuda")


def test_nccl_tests_timing_launches_every_call_then_waits_once(monkeypatch):
    log, device = _recording(monkeypatch)
    launched = []

    def call(async_op=False):
        launched.append(async_op)
        log.append(f"launch {len(launched)}")
        return _Work(log, len(launched))

    seconds = bench._time_per_call(call, 3, device, "nccl-tests")
    assert seconds >= 0 and launched == [True, True, True]   # no call waits for itself
    assert log == ["synchronize", "barrier", "synchronize", "launch 1", "launch 2",
                   "launch 3", "wait 1", "wait 2", "wait 3", "synchronize"]


def test_nccl_tests_timing_of_a_call_that_makes_no_call(monkeypatch):
    log, device = _recording(monkeypatch)   # gather/scatter of 0 elements: None
    assert bench._time_per_call(lambda async_op=False: None, 2, device, "nccl-tests") >= 0
    assert log[-1] == "synchronize"


def test_measure_refuses_an_unknown_timing():
    with pytest.raises(ValueError, match="timing must be one of"):
        bench.measure("all_reduce", 8, timing="sometimes")
