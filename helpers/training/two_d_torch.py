"""Notebook 19's torch composition: `parallelize_module` on the "tp" sub-mesh, then
`fully_shard` (FSDP2) on "dp": what it calls on which group, the bytes it sends to each
group, what each rank holds.

    with count_torch_collectives() as log:   # on an engine: count_collectives + the
        loss = loss_fn(torch_model(X_local), Y_local)   # functional collectives DTensor calls
    full_parameters(torch_model)             # every DTensor parameter's full tensor
    planned_torch_step(rank, dp, tp, batch=48)   # what it should call, on which group
    step_group_bytes(states, "torch_sockets", dp, tp)   # each rank's bytes to its row, column
    group_table(by_group(hand, ...), by_group(torch, ...), hand_sent, torch_sent)
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator, Sequence

from helpers.training.measured import as_gloo_runs
from helpers.training.two_d import dp_group_ranks, planned_step, tp_group_ranks

# DTensor's functional collectives (torch.distributed._functional_collectives), which
# count_collectives cannot see, and the collective each is (for the ring model).
FUNCTIONAL = {"all_reduce": "all_reduce", "all_gather_single": "all_gather",
              "reduce_scatter_single": "reduce_scatter", "all_gather_tensor": "all_gather",
              "reduce_scatter_tensor": "reduce_scatter"}


@contextlib.contextmanager
def count_torch_collectives() -> Iterator[Any]:
    """`count_collectives` (FSDP2 calls `dist.all_gather_single` and `reduce_scatter_single`
    itself), plus every call of a functional collective, as "<name> (functional)": its
    group's ranks, S and the ring model. Measured: the whole block, as `count_collectives`."""
    import inspect

    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed import distributed_c10d

    from helpers.bench.nccl_tests import model_sent
    from helpers.training.comm import Call, count_collectives

    def wrap(name: str, original: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            arguments = inspect.signature(original).bind(*args, **kwargs).arguments
            group = funcol._resolve_group(arguments["group"], arguments.get("tag", ""))
            if isinstance(group, str):
                group = distributed_c10d._resolve_process_group(group)
            tensor, n, kind = arguments["self"], group.size(), FUNCTIONAL[name]
            size = tensor.numel() * tensor.element_size() * (n if kind == "all_gather" else 1)
            log.entries.append(Call(f"{name} (functional)", size, n,
                                    model_sent(kind, size, n, group.rank(), 0), None,
                                    dist.get_process_group_ranks(group)))
            return original(*args, **kwargs)
        return counted

    originals = {name: getattr(funcol, name) for name in FUNCTIONAL}
    with count_collectives() as log:
        try:
            for name, original in originals.items():
                setattr(funcol, name, wrap(name, original))
            yield log
        finally:
            for name, original in originals.items():
                setattr(funcol, name, original)


def block_sockets(log: Any) -> dict[str, int] | None:
    """A counted block's bytes per connection ("local>remote"); None where not measured."""
    return None if log.wire is None else dict(log.wire.sockets)


def full_parameters(module: Any) -> dict[str, Any]:
    """Every DTensor parameter's full tensor (`full_tensor()`: collectives on its mesh)."""
    # W1 and b1 are _StridedShard over dp: DTensor logs that gathering them takes two
    # all_gathers, a hint for production meshes, not a problem here.
    quiet = logging.getLogger("torch.distributed.tensor._redistribute")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        return {name: p.full_tensor().detach().clone() for name, p in module.named_parameters()}
    finally:
        quiet.setLevel(level)


def group_bytes(sockets_by_rank: Sequence[dict | None], dp: int, tp: int
                ) -> list[dict[str, int] | None]:
    """Per rank, the bytes one block wrote to its row-mates (tp group), to its column-mates
    (dp group) and to any other rank, from every rank's `block_sockets` (None: NCCL)."""
    from helpers.bench.wire import peer_matrix

    if any(s is None for s in sockets_by_rank):
        return [None] * len(sockets_by_rank)
    sent, other = peer_matrix(sockets_by_rank)
    out = []
    for r, row in enumerate(sent):
        tp_peers = set(tp_group_ranks(r, dp, tp)) - {r}
        dp_peers = set(dp_group_ranks(r, dp, tp)) - {r}
        out.append({"tp": sum(row[j] for j in tp_peers), "dp": sum(row[j] for j in dp_peers),
                    "other": other[r] + sum(b for j, b in enumerate(row)
                                            if j not in tp_peers | dp_peers)})
    return out


def step_group_bytes(states: Sequence[dict], key: str, dp: int, tp: int
                     ) -> list[dict[str, int] | None]:
    """Per rank, `group_bytes` summed over the phases of one step: `state[key]` holds each
    phase's `block_sockets`, in the same order on every rank."""
    phases = [group_bytes([s[key][i] for s in states], dp, tp)
              for i in range(len(states[0][key]))]
    return [None if any(p[r] is None for p in phases) else
            {g: sum(p[r][g] for p in phases) for g in ("tp", "dp", "other")}
            for r in range(len(states))]


def by_group(executed: Sequence[dict], rank: int, dp: int, tp: int) -> dict[str, dict]:
    """One step's calls (`log.rows`) per group of `rank`: {"tp"|"dp"|"other": {"calls",
    "model", "names"}}; a 1 × n mesh's one-rank column is its dp group."""
    groups = {"tp": tp_group_ranks(rank, dp, tp), "dp": dp_group_ranks(rank, dp, tp)}
    out = {g: {"calls": 0, "model": 0.0, "names": []} for g in ("tp", "dp", "other")}
    for c in executed:
        g = next((g for g, ranks in groups.items() if c["group"] == ranks), "other")
        out[g]["calls"] += 1
        out[g]["model"] += c["model"]
        out[g]["names"].append(c["name"])
    return out


GROUP_LABELS = {"tp": "its row (tp group)", "dp": "its column (dp group)",
                "other": "any other rank"}


def group_table(hand: dict, torch_calls: dict, hand_sent: dict | None,
                torch_sent: dict | None) -> str:
    """One rank's step, per group: calls, ring model and measured bytes, by hand beside
    torch's composition (`by_group`, `step_group_bytes`)."""
    from helpers.training.measured import bytes_text

    def sent(table: dict | None, g: str) -> str:
        return bytes_text(None if table is None else table[g])

    lines = [f"{'':<23}{'by hand':^31}  {'parallelize_module + fully_shard':^33}",
             f"{'bytes sent to':<23}{'calls':>6}{'model: ring':>12}{'measured':>13}  "
             f"{'calls':>6}{'model: ring':>12}{'measured':>15}"]
    for g, label in GROUP_LABELS.items():
        lines.append(f"{label:<23}{hand[g]['calls']:>6}{bytes_text(hand[g]['model']):>12}"
                     f"{sent(hand_sent, g):>13}  {torch_calls[g]['calls']:>6}"
                     f"{bytes_text(torch_calls[g]['model']):>12}{sent(torch_sent, g):>15}")
    total = {name: (sum(t[g]["calls"] for g in GROUP_LABELS),
                    sum(t[g]["model"] for g in GROUP_LABELS)) for name, t in
             (("hand", hand), ("torch", torch_calls))}
    lines.append(f"{'total':<23}{total['hand'][0]:>6}{bytes_text(total['hand'][1]):>12}"
                 f"{bytes_text(None if hand_sent is None else sum(hand_sent.values())):>13}"
                 f"  {total['torch'][0]:>6}{bytes_text(total['torch'][1]):>12}"
                 f"{bytes_text(None if torch_sent is None else sum(torch_sent.values())):>15}")
    return "\n".join(lines)


def on_gloo(executed: Sequence[dict]) -> float:
    """The calls' ring model, with each reduce_scatter counted as the all_reduce of its input
    that gloo runs instead (notebook 11: 2(n − 1)/n · S, twice the ring's reduce_scatter)."""
    return sum(as_gloo_runs(c["name"], c["model"]) for c in executed)


def group_bytes_report(title: str, states: Sequence[dict], rows_key: str,
                       sent: Sequence[dict | None], dp: int, tp: int):
    """✓ per rank when, on each group, the step's measured bytes are what its calls send on
    gloo (`on_gloo`) plus gloo's headers, 0 B on a group without a call, 0 B to other ranks."""
    from helpers.bench.wire import agrees
    from helpers.checks import Report
    from helpers.training.measured import NOT_MEASURED

    report = Report(title)
    for state, measured in zip(states, sent):
        if measured is None:
            return report.note(NOT_MEASURED)
        r, verdicts, texts = state["rank"], [], []
        groups = {"tp": tp_group_ranks(state["rank"], dp, tp),
                  "dp": dp_group_ranks(state["rank"], dp, tp)}
        for g, ranks in groups.items():
            calls = [c for c in state[rows_key] if c["group"] == ranks]
            expected = on_gloo(calls)
            ok = (measured[g] == 0 if not calls or len(ranks) == 1
                  else agrees(measured[g], expected, len(calls), len(ranks)))
            verdicts.append(ok)
            texts.append(f"{g} {ranks}: {len(calls)} call(s), {measured[g]:,} B measured, "
                         f"{expected:,.0f} B on gloo without headers")
        verdicts.append(measured["other"] == 0)
        report.add(r, all(verdicts), "; ".join(texts) + f"; other ranks {measured['other']} B")
    return report


def planned_torch_step(rank: int, dp: int, tp: int, batch: int, itemsize: int = 8
                       ) -> list[dict]:
    """What torch's composition calls in one step on `rank`, in order: FSDP2's all_gather of
    every parameter's tp shard over the column (one flat call), DTensor's g on the row,
    FSDP2's reduce_scatter of the gradients over the column. FSDP2 calls neither on a
    column of one rank (the 1 × n meshes)."""
    g, *sync = planned_step(rank, dp, tp, batch, itemsize)
    flat = {"group": sync[0]["group"], "size": sum(c["size"] for c in sync)}
    fsdp = dp > 1
    return ([{"phase": "forward", "what": "FSDP2: unshard", "name": "all_gather_single",
              **flat}] * fsdp
            + [{**g, "what": "DTensor: g", "name": "all_reduce (functional)"}]
            + [{"phase": "backward", "what": "FSDP2: reduce grads",
                "name": "reduce_scatter_single", **flat}] * fsdp)


def rows_held(piece: Any, full: Any, tol: float = 1e-12) -> list[int]:
    """Which rows of `full` a rank's `piece` is: each piece row found by value (to `tol`),
    in order."""
    import torch

    piece, full = torch.as_tensor(piece), torch.as_tensor(full)
    found = []
    for row in piece:
        matches = [i for i, whole in enumerate(full)
                   if (row - whole).abs().max().item() <= tol]
        if len(matches) != 1:
            raise ValueError(f"a row of the piece matches {len(matches)} rows of the whole")
        found.append(matches[0])
    return found


def plot_rows_held(hand: Sequence[list[int]], theirs: Sequence[list[int]], n_rows: int,
                   title: str):
    """Per rank, the rows of W1 it holds: by hand (its tensor-parallel shard, the same in
    every replica) beside torch's composition (FSDP2's rows of those rows)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from helpers.training.schemes import rank_colour

    n = len(hand)
    fig, axes = plt.subplots(1, 2, figsize=(8, 1.3 + 0.42 * n), sharey=True)
    for ax, held, label in ((axes[0], hand, "by hand"),
                            (axes[1], theirs, "parallelize_module + fully_shard")):
        for r, rows in enumerate(held):
            for i in rows:
                ax.add_patch(Rectangle((i, r), 0.92, 0.8, facecolor=rank_colour(r, True),
                                       edgecolor=rank_colour(r), lw=1.5, gid=f"rank:{r}"))
        ax.set_xlim(-0.2, n_rows)
        ax.set_ylim(n - 0.1, -0.1)
        ax.set_xticks([i + 0.46 for i in range(n_rows)], [str(i) for i in range(n_rows)],
                      fontsize=8)
        ax.set_xlabel("row of W1", fontsize=9)
        sizes = sorted({len(rows) for rows in held})
        ax.set_title(f"{label}: {' or '.join(map(str, sizes))} of {n_rows} rows a rank",
                     fontsize=10)
        for spine in ("top", "right"):
            ax.spines[spine].set_visible(False)
    axes[0].set_yticks([r + 0.4 for r in range(n)], [f"rank {r}" for r in range(n)],
                       fontsize=9)
    for r, tick in enumerate(axes[0].get_yticklabels()):
        tick.set_color(rank_colour(r))
    fig.suptitle(title, fontsize=11, x=0.02, ha="left")
    fig.tight_layout()
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
