"""The controller's start: a port taken between ipyparallel's draw and its bind.

ipyparallel's controller draws free ports (bind to port 0, close), then binds them; a
process that takes one in between makes it exit with "Address already in use". Here the
taken port is made certain with the controller's own `--ports` option.
"""
from __future__ import annotations

import json
import socket
import time

import pytest

from helpers.runtime import launchers, starting

pytestmark = pytest.mark.cold   # real controllers of their own, never the warm engines


def taken_port() -> socket.socket:
    """A socket that listens on a free loopback port, as another process's would."""
    sock = socket.socket()
    sock.bind((launchers.LOOPBACK, 0))
    sock.listen()
    return sock


def cluster_on(port: int, tmp_path, monkeypatch):
    """An unstarted cluster of the local plan whose controller binds `port` first."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    plan = launchers.cluster_options("local", 2)
    return starting.new_ipp_cluster(plan, controller_args=[f"--ports={port}"],
                                    shutdown_atexit=False)


def test_a_port_taken_before_the_controller_binds_it_costs_one_more_start(
        tmp_path, monkeypatch):
    held = taken_port()
    port = held.getsockname()[1]
    ipp_cluster = cluster_on(port, tmp_path, monkeypatch)
    stop = ipp_cluster.stop_controller_sync
    stops = []

    def stop_then_free_the_port():
        stops.append(time.monotonic())
        held.close()               # the other process is done with it
        return stop()

    ipp_cluster.stop_controller_sync = stop_then_free_the_port
    client = starting.start_controller(ipp_cluster)
    try:
        assert len(stops) == 1, "the first controller exited; one more start"
        with open(ipp_cluster.controller.connection_files["engine"]) as f:
            assert json.load(f)["registration"] == port   # the second bound the port
        assert client.ids == []                       # and it answers
    finally:
        client.close()
        stop()


def test_a_port_that_stays_taken_is_a_clear_error_after_the_last_try(
        tmp_path, monkeypatch):
    held = taken_port()
    port = held.getsockname()[1]
    ipp_cluster = cluster_on(port, tmp_path, monkeypatch)
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError) as error:
            starting.start_controller(ipp_cluster)
    finally:
        held.close()
    text = str(error.value)
    assert f"tried {starting.CONTROLLER_TRIES} time(s)" in text
    assert starting.PORT_TAKEN in text and str(port) in text    # its own last output
    assert ipp_cluster.controller is None                       # nothing left running
    assert time.monotonic() - started < 60


def test_a_controller_that_fails_otherwise_is_not_started_again(tmp_path, monkeypatch):
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    plan = launchers.cluster_options("local", 2)
    ipp_cluster = starting.new_ipp_cluster(
        plan, controller_args=["--IPController.db_class=no.such.Backend"],
        shutdown_atexit=False)
    with pytest.raises(RuntimeError) as error:
        starting.start_controller(ipp_cluster)
    text = str(error.value)
    assert "tried 1 time(s)" in text and "No module named 'no'" in text
