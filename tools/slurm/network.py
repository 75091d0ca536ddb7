"""Hosts on one machine: network namespaces joined by a bridge, each with its own address.

    hosts = make_hosts(2, folder)   # namespaces nns<tag>1, nns<tag>2; a bridge in this one
    hosts.interface                 # the same name in every namespace and here (the bridge)
    hosts.run_in(hosts.nodes[0])    # ["nsenter", "--net=/run/netns/...", ...] prefix
    remove_hosts(folder)            # namespaces, veths and bridge gone (idempotent)

A process started with `run_in` sees only its namespace's interfaces: loopback and one
veth, `interface`, on a private /24 (10.x.y.0/24, one not routed here yet). This machine
reaches every host on the bridge, which carries the same name and the subnet's .1.
`nsenter --net` (not `ip netns exec`, which remounts /sys without the cgroup file system
slurmd 22.05 wants) switches the network namespace only. Needs root and iproute2.
"""
from __future__ import annotations

import contextlib
import ipaddress
import json
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

NETWORK_FILE = "network.json"


@dataclass(frozen=True)
class Host:
    name: str          # the Slurm node name
    namespace: str     # its network namespace (/run/netns/<namespace>)
    address: str       # its address on `interface`


@dataclass(frozen=True)
class Hosts:
    interface: str     # veth name in every namespace = bridge name on this machine
    bridge_address: str
    nodes: list[Host]

    def run_in(self, host: Host) -> list[str]:
        """The command prefix that runs a program inside `host`'s network namespace."""
        return ["nsenter", f"--net=/run/netns/{host.namespace}"]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no route or address of this machine touches."""
    routes = _ip("-4", "route", "show", "table", "all").stdout + _ip("-4", "addr").stdout
    used = [ipaddress.ip_network(word, strict=False) for word in routes.split()
            if word[0].isdigit() and ("/" in word or word.count(".") == 3)
            and _is_network(word)]
    for _ in range(100):
        subnet = ipaddress.ip_network(f"10.{random.randrange(64, 250)}."
                                      f"{random.randrange(1, 250)}.0/24")
        if not any(subnet.overlaps(other) for other in used):
            return subnet
    raise RuntimeError("no free 10.x.y.0/24 subnet for the namespaces")


def _is_network(word: str) -> bool:
    try:
        ipaddress.ip_network(word, strict=False)
        return True
    except ValueError:
        return False


def make_hosts(count: int, folder: Path) -> Hosts:
    """`count` namespaces on a new bridge; recorded in folder/network.json for removal."""
    tag = _tag(folder)   # per start: names never collide
    subnet = _free_subnet()
    addresses = list(subnet.hosts())
    hosts = Hosts(interface=f"tut{tag}", bridge_address=str(addresses[0]),
                  nodes=[Host(f"node{i}", f"nns{tag}{i}", str(addresses[10 + i]))
                         for i in range(1, count + 1)])
    record = folder / NETWORK_FILE
    record.write_text(json.dumps({"bridge": hosts.interface,
                                  "namespaces": [h.namespace for h in hosts.nodes]}))
    try:
        _ip("link", "add", hosts.interface, "type", "bridge")
        _ip("addr", "add", f"{hosts.bridge_address}/24", "dev", hosts.interface)
        _ip("link", "set", hosts.interface, "up")
        for i, host in enumerate(hosts.nodes, 1):
            outside = f"veth{tag}{i}"
            _ip("netns", "add", host.namespace)
            _ip("link", "add", outside, "type", "veth", "peer", "name", hosts.interface,
                "netns", host.namespace)
            _ip("link", "set", outside, "master", hosts.interface, "up")
            inside = ["-n", host.namespace]
            _ip(*inside, "addr", "add", f"{host.address}/24", "dev", hosts.interface)
            _ip(*inside, "link", "set", hosts.interface, "up")
            _ip(*inside, "link", "set", "lo", "up")
    except BaseException:
        remove_hosts(folder)
        raise
    return hosts


def remove_hosts(folder: Path) -> None:
    """Delete the namespaces (their veths go with them) and the bridge. Idempotent.

    Call it once the processes inside have ended: a namespace lives on while one runs.
    """
    record = folder / NETWORK_FILE
    if not record.exists():
        return
    saved = json.loads(record.read_text())
    for namespace in saved["namespaces"]:
        _ip("netns", "del", namespace, check=False)
    _ip("link", "del", saved["bridge"], check=False)
    with contextlib.suppress(FileNotFoundError):
        record.unlink()


def leftover_network(folder: Path) -> list[str]:
    """What of folder's namespaces and bridge still exists (nothing, once removed); found
    by their names, which come from the folder's, with or without its network.json."""
    tag = _tag(folder)
    names = [n for n in _ip("netns", "list").stdout.split() if n.startswith(f"nns{tag}")]
    links = _ip("-o", "link").stdout
    return names + ([f"tut{tag}"] if f" tut{tag}:" in links else [])


def _tag(folder: Path) -> str:
    """Six characters of the folder's name: its namespaces' and interfaces' names."""
    return folder.name[-6:].lower().replace("_", "0")
