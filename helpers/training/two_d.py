"""A 2-D (data × tensor parallel) mesh: why its shape, the planned step, the bytes, plots.

The taught code (the mesh, Megatron's f and g on the tensor-parallel group, the
gradient all_reduce on the data-parallel group) lives in notebook 19's `%%px` cells.

    dp, tp = mesh_shape(world_size)          # helpers.training.mesh: 4 → (2, 2), 5 → (1, 5)
    shape_reason(world_size)                 # that choice, in a sentence
    plan = planned_step(rank, dp, tp, batch=48)   # which collective, on which group, when
    with count_collectives() as log:         # on an engine (helpers.training.comm):
        ...                                  # log.rows(phase=...): each call, its group
    phase_rows(executed)                     # per phase, for tensor_parallel.wire_report

torch's own composition of the two: helpers.training.two_d_torch.
"""
from __future__ import annotations

from helpers.figures.column import COLUMN_IN
from helpers.training.mesh import coordinate, mesh_shape
from helpers.training.tensor_parallel import hidden_size
from helpers.training.toy import D_IN, D_OUT


def shape_reason(world_size: int) -> str:
    """One sentence saying which shape this world size gets, and why (2+ ranks)."""
    if world_size < 2:
        raise ValueError(f"a 2-D mesh needs 2+ ranks, got {world_size}")
    dp, tp = mesh_shape(world_size)
    if dp == 1:
        return (f"{world_size} ranks: {world_size} is prime, so the only 2-D shapes are "
                f"1 × {world_size} and {world_size} × 1. This notebook runs 1 × {world_size}:"
                f" tensor parallelism over all {world_size} ranks, and data-parallel groups "
                "of one rank each, whose all_reduce leaves the gradients as they are. "
                "Run it with 4 ranks to see both dimensions at work.")
    return (f"{world_size} ranks: a {dp} × {tp} mesh, {dp} data-parallel replicas (rows) "
            f"of {tp} tensor-parallel ranks (columns).")


def tp_group_ranks(rank: int, dp: int, tp: int) -> list[int]:
    row, _ = coordinate(rank, (dp, tp))
    return [row * tp + c for c in range(tp)]


def dp_group_ranks(rank: int, dp: int, tp: int) -> list[int]:
    _, col = coordinate(rank, (dp, tp))
    return [r * tp + col for r in range(dp)]


def planned_step(rank: int, dp: int, tp: int, batch: int, itemsize: int = 8) -> list[dict]:
    """The collectives one training step should call on `rank`, in order.

    Forward: g's all_reduce of the row-parallel layer's partial outputs (tp group).
    Backward: none (f's all_reduce only runs when the input needs a gradient).
    Gradient sync: one all_reduce per parameter shard on the dp group, in
    `parameters()` order: W1 rows, b1 rows, W2 columns, b2 (whole).
    """
    k = hidden_size(tp) // tp
    tp_ranks, dp_ranks = tp_group_ranks(rank, dp, tp), dp_group_ranks(rank, dp, tp)
    plan = [{"phase": "forward", "what": "g: sum of partial outputs", "name": "all_reduce",
             "group": tp_ranks, "size": batch // dp * D_OUT * itemsize}]
    for what, numel in (("W1 shard grad", k * D_IN), ("b1 shard grad", k),
                        ("W2 shard grad", D_OUT * k), ("b2 grad", D_OUT)):
        plan.append({"phase": "gradient sync", "what": what, "name": "all_reduce",
                     "group": dp_ranks, "size": numel * itemsize})
    return plan


def _ranks(n: int) -> str:
    return f"{n} rank" + ("s" if n > 1 else "")


def call_rows(executed: list[dict]) -> list[dict]:
    """Each executed call ({"phase", "name", "group", "size", "model", "measured"}) as a
    row of `tensor_parallel.bytes_table`."""
    return [{"layer": c["phase"], "phase": _ranks(len(c["group"])), "calls": 1,
             "n": len(c["group"]), "model": c["model"], "measured": c["measured"],
             "collectives": {c["name"]: {"calls": 1, "size": c["size"], "model": c["model"],
                                         "measured": c["measured"]}}} for c in executed]


def phase_rows(executed: list[dict]) -> list[dict]:
    """The executed calls summed per phase, for `tensor_parallel.wire_report`: calls, the
    group's size, model and measured bytes (measured None if any call's is)."""
    rows: dict[str, dict] = {}
    for c in executed:
        row = rows.setdefault(c["phase"], {"layer": c["phase"], "phase": "", "calls": 0,
                                           "n": len(c["group"]), "model": 0.0, "measured": 0})
        row["calls"] += 1
        row["model"] += c["model"]
        row["measured"] = (None if None in (row["measured"], c["measured"])
                           else row["measured"] + c["measured"])
    return list(rows.values())


def sync_lines(states: list[dict]) -> str:
    """Per rank: the gradient sync's S, and the bytes it sent, model and measured."""
    from helpers.training.measured import bytes_text

    lines = []
    for state in states:
        sync = [c for c in state["executed"] if c["phase"] == "gradient sync"]
        measured = [c["measured"] for c in sync]
        lines.append(f"rank {state['rank']}: S {sum(c['size'] for c in sync):,} B in "
                     f"{len(sync)} all_reduce on {_ranks(len(sync[0]['group']))}; sent: model "
                     f"(ring) {bytes_text(sum(c['model'] for c in sync))} B, measured (gloo) "
                     f"{bytes_text(None if None in measured else sum(measured))} B")
    return "\n".join(lines)


def format_plan(plan: list[dict]) -> str:
    lines = [f"{'when':<15}{'what':<28}{'collective':<12}{'group (ranks)':<15}{'S (bytes)':>10}"]
    for row in plan:
        lines.append(f"{row['phase']:<15}{row['what']:<28}{row['name']:<12}"
                     f"{str(row['group']):<15}{row['size']:>10}")
    return "\n".join(lines)


def plot_mesh(dp: int, tp: int, title: str):
    """The mesh and the collectives along each axis: one box per rank (its batch shard and
    feature slice); a row is a tp group (g's all_reduce of the partial outputs, forward), a
    column a dp group (the all_reduce of each gradient shard, after backward)."""
    # here, not at the top: engines import this module (two_d_torch), and never draw
    from helpers.training.schemes import COLUMN, ROW, SMALL, Canvas, rank_colour

    bw, bh, px, py, left, top = 2.9, 1.45, 3.7, 2.15, 2.5, 0.55
    width = left + tp * px + 0.2
    c = Canvas(max(width, 15.0), top + dp * py + 1.0, title,
               "a row: one replica of the model, cut by features (tp); a column: the same "
               "slice in every replica (dp)")
    for r in range(dp * tp):
        row, col = coordinate(r, (dp, tp))
        c.box(left + col * px, top + row * py, bw, bh,
              f"rank {r}\nbatch shard {row}\nfeatures {col}", face=rank_colour(r, True),
              edge=rank_colour(r), size=SMALL, gid=f"mesh:rank:{r}")
    for row in range(dp):
        y = top + row * py + bh / 2
        c.text(left - 0.25, y, f"replica {row}\n(tp group)", ha="right", size=SMALL,
               colour=ROW)
        for col in range(tp - 1):
            c.arrow((left + col * px + bw + 0.05, y), (left + (col + 1) * px - 0.05, y),
                    colour=ROW, gid=f"tp:{row}:{col}", lw=2.0, both=True)
    for col in range(tp):
        x = left + col * px + bw / 2
        for row in range(dp - 1):
            c.arrow((x, top + row * py + bh + 0.05), (x, top + (row + 1) * py - 0.05),
                    colour=COLUMN, dashed=True, gid=f"dp:{col}:{row}", lw=2.0,
                    both=True)
    y = top + dp * py - 0.2
    c.text(0.3, y, "→ along a row (tp group): g's all_reduce of the partial outputs, "
           "forward", ha="left", colour=ROW)
    c.text(0.3, y + 0.65, "↓ along a column (dp group): all_reduce of each gradient shard, "
           "after backward" + ("" if dp > 1 else " (here of one rank)"), ha="left",
           colour=COLUMN)
    return c.fig


def plot_params(states: list[dict], reference: dict, k: int, title: str):
    """Per rank: each value of its shards against the reference's (on the diagonal: equal)."""
    import matplotlib.pyplot as plt

    import torch

    n = len(states)
    cols = min(n, 4)                      # four a row: the page's column, shown unscaled
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(COLUMN_IN, 2.5 * rows + 0.9), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, state in zip(axes.flat, states):
        mine = slice(state["tp_rank"] * k, (state["tp_rank"] + 1) * k)
        expected = {"0.weight": reference["0.weight"][mine], "0.bias": reference["0.bias"][mine],
                    "2.weight": reference["2.weight"][:, mine], "2.bias": reference["2.bias"]}
        for i, (name, value) in enumerate(expected.items()):
            got = torch.as_tensor(state["params"][name]).flatten()
            ax.plot(value.flatten().tolist(), got.tolist(), "o", ms=3, color=f"C{i}",
                    label=name)
        lim = max(v.abs().max().item() for v in expected.values()) * 1.1
        ax.plot([-lim, lim], [-lim, lim], "k:", lw=0.8)
        ax.set_title(f"rank {state['rank']} (row {state['dp_rank']}, col {state['tp_rank']})",
                     fontsize=9)
        ax.set_xlabel("reference", fontsize=8)
    for row in axes:
        row[0].set_ylabel("this rank's shard", fontsize=8)
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="lower center", ncol=4,
               fontsize=8.5, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.34 / fig.get_figheight(), 1, 1))
    plt.close(fig)   # shown once: as the value of the notebook cell that calls this
    return fig
