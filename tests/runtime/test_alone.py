"""The run lock behind `@pytest.mark.alone` (tests/support/alone.py)."""
from __future__ import annotations

import threading
import time

import pytest

from alone import LockTimeout, RunLock


def test_shared_holders_overlap(tmp_path):
    lock = RunLock(tmp_path)
    with lock.shared(), lock.shared():   # two at once: no wait
        pass


def test_alone_waits_for_running_tests_and_new_tests_wait_for_it(tmp_path):
    lock, events = RunLock(tmp_path), []
    first_in, alone_waiting = threading.Event(), threading.Event()

    def running_test():
        with lock.shared():
            first_in.set()
            alone_waiting.wait(10)
            time.sleep(0.3)          # still running when the alone test asks
            events.append("first ends")

    def alone_test():
        first_in.wait(10)
        alone_waiting.set()
        with lock.exclusive():
            events.append("alone runs")
            time.sleep(0.3)          # a test that starts now must wait for this
            events.append("alone ends")

    def next_test():
        alone_waiting.wait(10)
        time.sleep(0.1)              # asks after the alone test began to wait
        with lock.shared():
            events.append("next runs")

    threads = [threading.Thread(target=f) for f in (running_test, alone_test, next_test)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert events == ["first ends", "alone runs", "alone ends", "next runs"]


def test_a_lock_held_too_long_fails_the_waiter_with_a_clear_error(tmp_path):
    lock = RunLock(tmp_path, wait_s=0.2)
    with lock.shared():
        start = time.monotonic()
        with pytest.raises(LockTimeout, match="another test held tests.lock"):
            with lock.exclusive():
                pass
        assert time.monotonic() - start < 5
