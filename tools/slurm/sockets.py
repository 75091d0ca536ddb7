"""Which interface each listening TCP socket of some processes is on, across namespaces.

    rows = listening_sockets({"controller": 1234, "rank 0": 2345})
    print(socket_table(rows))

Read from /proc: a process's socket inodes (/proc/PID/fd) matched against the TCP table
of *its* network namespace (/proc/PID/net/tcp, tcp6), and the namespace's addresses from
`ip -o addr` run inside it (nsenter). Linux only; root reads every process.
"""
from __future__ import annotations

import ipaddress
import os
import socket
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

LISTEN = "0A"   # the TCP state column of /proc/net/tcp


@dataclass(frozen=True)
class ListeningSocket:
    process: str
    pid: int
    namespace: str     # the network namespace's name (/run/netns), or "this machine"
    address: str
    port: int
    interface: str     # the interface holding `address`; "every interface" for 0.0.0.0/::


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _decode(hex_address: str) -> tuple[str, int]:
    host, port = hex_address.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        address = socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(host, 16)))
    else:   # four little-endian 32-bit words
        address = socket.inet_ntop(socket.AF_INET6, b"".join(
            struct.pack("<I", int(host[i:i + 8], 16)) for i in range(0, 32, 8)))
    return address, int(port, 16)


def _listening(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket process `pid` listens on."""
    inodes = _socket_inodes(pid)
    found = []
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in inodes:
                found.append(_decode(fields[1]))
    return found


def _namespace_names() -> dict[int, str]:
    """inode of a network namespace → its name: /run/netns/<name>, "this machine"."""
    names = {os.stat("/proc/self/ns/net").st_ino: "this machine"}
    folder = Path("/run/netns")
    if folder.is_dir():
        for path in folder.iterdir():
            try:
                names[os.stat(path).st_ino] = path.name
            except OSError:
                continue
    return names


def _interfaces(pid: int) -> dict[str, str]:
    """address → interface name, in process `pid`'s network namespace."""
    out = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", "ip", "-o", "addr"],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    found = {}
    for line in out.splitlines():
        fields = line.split()
        found[fields[3].split("/")[0]] = fields[1]
    return found


def listening_sockets(processes: dict[str, int]) -> list[ListeningSocket]:
    """Every listening TCP socket of `processes` ({label: pid}), with its interface."""
    names = _namespace_names()
    rows = []
    for label, pid in processes.items():
        namespace = names.get(os.stat(f"/proc/{pid}/ns/net").st_ino, "another namespace")
        interfaces = _interfaces(pid)
        for address, port in _listening(pid):
            unspecified = ipaddress.ip_address(address).is_unspecified
            interface = ("every interface" if unspecified
                         else interfaces.get(address, "?"))
            rows.append(ListeningSocket(label, pid, namespace, address, port, interface))
    return rows


def socket_table(rows: list[ListeningSocket]) -> str:
    """The rows as a Markdown table: process, pid, namespace, address:port, interface."""
    lines = ["| process | pid | network namespace | listening on | interface |",
             "|---|---|---|---|---|"]
    lines += [f"| {r.process} | {r.pid} | {r.namespace} | {r.address}:{r.port} | "
              f"{r.interface} |" for r in rows]
    return "\n".join(lines)
