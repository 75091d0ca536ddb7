"""Notebook 19's figures of what its ranks recorded: the planned step of every rank, the
bytes of each call, the bytes per group (by hand and torch's), the losses per rank.

Drawn from the values the notebook pulled (plans from `two_d.planned_step`); rank colours
and the row / column colours of 14–19 (`helpers.training.schemes`).
"""
from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure

from helpers.figures.column import COLUMN_IN
from helpers.training.sent_figures import plot_sent


def _same(values: Sequence[float], what: str) -> float:
    """The one value every rank has (the ring model of a call is the same on every rank)."""
    if len(set(values)) != 1:
        raise ValueError(f"the ranks disagree on {what}: {list(values)}")
    return values[0]


def plot_plan(plans: Sequence[Sequence[dict]], title: str) -> Figure:
    """One row per rank, one box per planned call in order: the collective, its group's
    ranks and S; red along a row (tp group), green along a column (dp group)."""
    from helpers.training.schemes import COLUMN, ROW, Canvas, rank_colour

    n, calls = len(plans), len(plans[0])
    left, bw, pitch, bh, top = 1.5, 2.95, 3.2, 0.85, 1.5
    c = Canvas(left + calls * pitch, top + n * 1.05 + 0.1, title,
               "each box: the collective, its group's ranks and S, in bytes; red: the rank's "
               "row (tp group), green: its column (dp group)")
    for j, call in enumerate(plans[0]):
        c.text(left + j * pitch + bw / 2, top - 0.6,
               f"{call['phase']}\n{call['what'].split(':')[0].replace(' grad', '')}", size=9)
    for r, plan in enumerate(plans):
        y = top + r * 1.05
        c.text(left - 0.2, y + bh / 2, f"rank {r}", ha="right", colour=rank_colour(r), size=10)
        row_ranks = plan[0]["group"]
        for j, call in enumerate(plan):
            along_row = call["group"] == row_ranks
            c.box(left + j * pitch, y, bw, bh,
                  f"{call['name']} {call['group']}\nS {call['size']:,} B",
                  face="white", edge=ROW if along_row else COLUMN, size=9,
                  gid=f"plan:{r}:{j}:{call['name']}:{call['size']}")
    return c.fig


def plot_step_bytes(states: Sequence[dict], title: str) -> Figure:
    """Each call of the last step (`executed`): the ring model's bytes and every rank's
    measured ones (None on NCCL: no bar)."""
    first = states[0]["executed"]
    groups = [f"{c['phase'].replace('gradient ', 'grad ')}\nS {c['size']:,} B\n"
              f"{len(c['group'])} ranks" for c in first]
    model = [_same([s["executed"][i]["model"] for s in states], "the model")
             for i in range(len(first))]
    measured = [[c["measured"] for c in s["executed"]] for s in states]
    return plot_sent(groups, model, measured, title)


def plot_group_bytes(hand_calls: Sequence[dict], torch_calls: Sequence[dict],
                     hand_sent: Sequence[dict | None], torch_sent: Sequence[dict | None],
                     title: str) -> Figure:
    """Per group (row, column), by hand then torch's: the calls' ring model and what every
    rank wrote to that group's other ranks (`two_d_torch.by_group`, `step_group_bytes`)."""
    groups, model, keys = [], [], []
    for g, where in (("tp", "row"), ("dp", "column")):
        for who, calls in (("by hand", hand_calls), ("torch", torch_calls)):
            counts = _same([c[g]["calls"] for c in calls], "the calls")
            groups.append(f"{where} ({g}): {who}\n{counts} call{'s' * (counts != 1)}")
            model.append(_same([c[g]["model"] for c in calls], "the model"))
            keys.append((g, who))
    measured = [[None if (hand if who == "by hand" else mine) is None
                 else (hand if who == "by hand" else mine)[g] for g, who in keys]
                for hand, mine in zip(hand_sent, torch_sent)]
    return plot_sent(groups, model, measured, title)


def plot_losses(states: Sequence[dict], reference: Sequence[float], title: str) -> Figure:
    """Each rank's loss (its replica's, on its batch shard) step by step, their mean and the
    one-process reference's; ranks of a row share a loss: markers by column keep each seen."""
    import matplotlib.pyplot as plt
    import numpy as np

    from helpers.training.schemes import rank_colour

    fig, ax = plt.subplots(figsize=(COLUMN_IN, 3.3), dpi=100)
    steps = np.arange(1, len(reference) + 1)
    markers = "ox+1234"        # a row's later ranks as strokes, over its first's disc
    for s in states:
        ax.plot(steps, s["losses"], marker=markers[s["tp_rank"] % len(markers)],
                ms=10 if s["tp_rank"] == 0 else 9, mew=2, color=rank_colour(s["rank"]), lw=1.2,
                label=f"rank {s['rank']} (row {s['dp_rank']})", gid=f"loss:{s['rank']}")
    mean = np.mean([s["losses"] for s in states], axis=0)
    ax.plot(steps, mean, "k--", lw=2, label="mean over ranks", gid="loss:mean")
    ax.plot(steps, reference, ":", color="#b91c1c", lw=3, label="one process,\nwhole batch",
            gid="loss:reference")
    ax.set_xticks(steps)
    ax.set_xlabel("step", fontsize=9)
    ax.set_ylabel("loss before the step", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(title, loc="left", fontsize=10)
    ax.legend(fontsize=8.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    plt.close(fig)
    return fig


def plot_wrong_group(states: Sequence[dict], dp: int, world_size: int, title: str) -> Figure:
    """Per rank, each gradient value averaged over the right group (its column: x) against
    the same value averaged over every rank (y); on the dotted diagonal they agree.
    states: pulled "right" and "wrong" (the sums over the column and over all ranks)."""
    import matplotlib.pyplot as plt
    import torch

    from helpers.training.schemes import rank_colour

    n = len(states)
    fig, axes = plt.subplots(1, n, figsize=(COLUMN_IN, 2.75), dpi=100, squeeze=False,
                             sharex=True, sharey=True)
    lim = 0.0
    for ax, s in zip(axes[0], states):
        right = torch.cat([torch.as_tensor(g).flatten() for g in s["right"]]) / dp
        wrong = torch.cat([torch.as_tensor(g).flatten() for g in s["wrong"]]) / world_size
        ax.plot(right.tolist(), wrong.tolist(), "o", ms=3.5, color=rank_colour(s["rank"]),
                gid=f"wrong:{s['rank']}")
        lim = max(lim, right.abs().max().item(), wrong.abs().max().item())
        ax.set_title(f"rank {s['rank']}", fontsize=9, color=rank_colour(s["rank"]))
        ax.set_xlabel("over its column", fontsize=8.5)
        ax.tick_params(labelsize=8)
    lim *= 1.1
    for ax in axes[0]:
        ax.plot([-lim, lim], [-lim, lim], "k:", lw=0.8)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
    axes[0][0].set_ylabel("over every rank", fontsize=8.5)
    fig.suptitle(title, x=0.01, ha="left", fontsize=10)
    fig.tight_layout()
    plt.close(fig)
    return fig
