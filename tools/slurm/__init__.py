"""A Slurm on this machine, for the slurm launcher's tests and for trying it by hand.

local.py starts and stops the daemons (one node on loopback, or several nodes in network
namespaces from network.py); sockets.py lists which interface each listening socket is
on; `python -m tools.slurm start|status|stop` is the command line (__main__.py).
"""
