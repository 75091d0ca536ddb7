"""Notebook 00's scheme: the notebook, its engines (one engine = one rank) and the process
group they join through rank 0's store, as `start_cluster` does it (helpers.runtime.group:
the client asks rank 0's engine to open the store's socket on 127.0.0.1, then every engine
calls helpers.runtime.rendezvous.join: rank 0 serves the TCPStore, the others connect).

Drawn without a cluster, for a literal world size. The artists that carry a fact have a
gid ("engine:2", "store", "connect:3", "group"), so the tests read the drawing.
"""
from __future__ import annotations

from matplotlib.figure import Figure

from helpers.training.schemes import INK, MUTED, SMALL, Canvas, rank_colour

STORE = "#c2410c"        # the rendezvous: the series' root colour


def draw_ranks(world_size: int = 4) -> Figure:
    """The notebook (ipyparallel client) sends `%%px` cells to `world_size` engines and
    pulls values back; engine k is rank k, with its device; rank 0 serves the TCPStore the
    other ranks connect to, and all of them form the default process group."""
    if not 3 <= world_size <= 5:       # the labels fit these widths (tests: the audit)
        raise ValueError(f"drawn for 3 to 5 ranks, not {world_size}")
    pitch, bw, bh, top = 3.05, 2.75, 2.0, 1.5
    x0 = 6.0                                   # the group's left edge
    width = x0 + 0.35 + max(world_size, 4) * pitch     # 3 ranks: room for the labels
    c = Canvas(width, 5.95, f"{world_size} ranks: one engine = one process = one rank",
               f"start_cluster({world_size}) starts {world_size} engines; each joins one "
               "process group, the world")

    c.box(0.1, 1.5, 3.3, 2.5, face="#f2f4f7", edge=INK, gid="notebook")
    c.text(1.75, 1.95, "this notebook", bold=True)
    c.text(1.75, 2.95, "IPython kernel,\nipyparallel\nclient", size=SMALL)
    c.arrow((3.5, 2.4), (x0 - 0.1, 2.4), gid="px")
    c.text(4.7, 1.95, "%%px: the cell", size=SMALL)
    c.arrow((x0 - 0.1, 3.3), (3.5, 3.3), gid="pull")
    c.text(4.7, 3.75, "cluster.pull", size=SMALL)
    c.text(1.75, 4.65, "(both through\nipyparallel's\ncontroller)", size=SMALL, colour=MUTED)

    c.box(x0, 0.1, width - x0 - 0.1, 5.75, face="none", edge=INK, lw=1.6, gid="group")
    c.text(x0 + 0.2, 0.8, f"the process group (the world): world_size = {world_size}\n"
           "backend: gloo on the CPU, or NCCL with one GPU per rank", size=SMALL, ha="left")
    lefts = [x0 + 0.25 + k * pitch for k in range(world_size)]
    for k, x in enumerate(lefts):
        c.box(x, top, bw, bh, face=rank_colour(k, True), edge=rank_colour(k), lw=1.6,
              gid=f"engine:{k}")
        c.text(x + bw / 2, top + 0.4, f"engine {k}", bold=True)
        c.text(x + bw / 2, top + 0.85, f"rank {k}", bold=True)
        c.text(x + bw / 2, top + 1.47, f"device: cpu\nor cuda:{k}", size=SMALL)
    store_y = top + bh + 0.4
    c.box(lefts[0], store_y, bw, 0.85, face="white", edge=STORE, lw=1.8, gid="store")
    c.text(lefts[0] + bw / 2, store_y + 0.42, "TCPStore\non 127.0.0.1", size=SMALL,
           colour=STORE)
    c.arrow((lefts[0] + bw / 2, top + bh), (lefts[0] + bw / 2, store_y), colour=STORE,
            gid="serve")
    c.text(lefts[0] + bw / 2 - 0.15, top + bh + 0.22, "serves", size=SMALL, colour=STORE,
           ha="right")
    for k, x in enumerate(lefts[1:], start=1):
        tip = (lefts[0] + bw + 0.05, store_y + 0.85 * k / world_size)
        c.arrow((x + bw / 2, top + bh), tip, colour=STORE, gid=f"connect:{k}")
    c.text(lefts[1], store_y + 1.35, "ranks " + ", ".join(map(str, range(1, world_size)))
           + " connect to it; then each rank calls\n"
           "init_process_group(backend, store, rank, world_size)", size=SMALL, ha="left")
    return c.fig
