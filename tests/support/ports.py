"""A free TCP port for a server a test starts and then connects to."""
from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, below the ephemeral range. A port that bind(0) hands out
    comes from that range, so any process's outgoing connection can take it before the
    server binds it (a CI run lost JupyterLab's port that way)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768                     # Linux's default start of the range
    for port in random.sample(range(10_000, low), min(200, max(low - 10_000, 0))):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:          # nothing free below the range: take what is given
        s.bind((host, 0))
        return s.getsockname()[1]
