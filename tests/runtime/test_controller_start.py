"""The controller's start: a port taken between ipyparallel's draw and its bind.

ipyparallel's controller draws free ports (bind to port 0, close), then binds them; a
process that takes one in between makes it exit with "Address already in use". Here the
taken port is made certain with the controller's own `--ports` option.
"""
from __future__ import annotations

import json
import random
import socket
import time
from pathlib import Path

import pytest

from helpers.runtime import launchers, starting

pytestmark = pytest.mark.cold   # real controllers of their own, never the warm engines


def taken_port() -> socket.socket:
    """A socket that listens on a free loopback port, as another process's would."""
    sock = socket.socket()
    sock.bind((launchers.LOOPBACK, 0))
    sock.listen()
    return sock


def quiet_ports(count: int) -> list[socket.socket]:
    """Sockets that listen on ports below the ephemeral range: once closed, no connection
    another process opens can take one of them (only an explicit bind)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    held: list[socket.socket] = []
    while len(held) < count:
        sock = socket.socket()
        try:
            sock.bind((launchers.LOOPBACK, random.randrange(low - 10000, low)))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()
    return held


def cluster_on(port: int | str, tmp_path, monkeypatch):
    """An unstarted cluster of the local plan whose controller binds `port` first (or the
    ports of a comma-separated list, in its order: registration, control, mux, task, ...)."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    plan = launchers.cluster_options("local", 2)
    return starting.new_ipp_cluster(plan, controller_args=[f"--ports={port}"],
                                    shutdown_atexit=False)


def free_on_stop(ipp_cluster, held: socket.socket) -> list[float]:
    """Close `held` (the other process is done with the port) when the start stops the
    failed controller; the times it did."""
    stop, stops = ipp_cluster.stop_controller_sync, []

    def stop_then_free_the_port():
        stops.append(time.monotonic())
        held.close()
        return stop()

    ipp_cluster.stop_controller_sync = stop_then_free_the_port
    return stops


def test_a_port_taken_before_the_controller_binds_it_costs_one_more_start(
        tmp_path, monkeypatch):
    held = taken_port()
    port = held.getsockname()[1]
    ipp_cluster = cluster_on(port, tmp_path, monkeypatch)
    stop = ipp_cluster.stop_controller_sync
    stops = free_on_stop(ipp_cluster, held)
    client = starting.start_controller(ipp_cluster)
    try:
        assert len(stops) == 1, "the first controller exited; one more start"
        with open(ipp_cluster.controller.connection_files["engine"]) as f:
            assert json.load(f)["registration"] == port   # the second bound the port
        assert client.ids == []                       # and it answers
    finally:
        client.close()
        stop()


def test_a_scheduler_port_taken_after_the_files_are_written_costs_one_more_start(
        tmp_path, monkeypatch):
    """The task scheduler binds after the controller wrote its connection files: the dead
    controller's files must not be read by the next try, and its death is seen in bounded
    time."""
    first, held = quiet_ports(3), quiet_ports(1)[0]
    ports = [sock.getsockname()[1] for sock in first] + [held.getsockname()[1]]
    for sock in first:
        sock.close()
    ipp_cluster = cluster_on(",".join(map(str, ports)), tmp_path, monkeypatch)
    stop = ipp_cluster.stop_controller_sync
    stops = free_on_stop(ipp_cluster, held)
    started = time.monotonic()
    client = starting.start_controller(ipp_cluster)
    try:
        assert len(stops) == 1 and stops[0] - started < 4 * starting.CONNECT_TRY_S
        with open(ipp_cluster.controller.connection_files["engine"]) as f:
            assert json.load(f)["task"] == ports[3]
        assert client.ids == []
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
