"""Our drawings of the model-splitting schemes: tensor parallelism (17: how W is cut, the
output assembled, Megatron's f and g) and pipeline parallelism (18: the schedule grid).

Drawn from the notebook's parameters (world size, widths, micro-batches), in the style and
rank colours of `helpers.training.schemes`; artists that carry a fact have a gid.
"""
from __future__ import annotations

from functools import lru_cache

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers.training.pipeline import COLOURS
from helpers.training.schemes import (GROUP, INK, LINE, MUTED, SMALL, Canvas, rank_colour)
from helpers.training.tensor_parallel import FEATURES_PER_RANK, hidden_size
from helpers.training.toy import D_IN, D_OUT


# ------------------------------------------------------------------ 17: tensor parallelism
def draw_tensor_parallel(world_size: int, d_in: int = D_IN, d_out: int = D_OUT,
                         batch: int = 48, per_rank: int = FEATURES_PER_RANK) -> Figure:
    """The MLP of notebook 17, column then row: W1ᵀ with each rank's columns (its rows of W1)
    outlined in its colour, the output slices they give, W2 with each rank's columns, the
    partial outputs, g's all_reduce into Y2; beside, the f / g pair, top to bottom."""
    n, d_hidden = world_size, hidden_size(world_size, per_rank)
    left, cw, rh, bh = 3.3, min(0.3, 4.8 / d_hidden), 0.22, 0.62
    mat_w = d_hidden * cw
    right = left + mat_w + 0.35
    chain_x = right + 5.0
    width = chain_x + 4.3
    ys = {"W1T": 0.25, "Y1": 0.25 + d_in * rh + 0.3}
    ys["W2"] = ys["Y1"] + bh + 0.65
    ys["partial"] = ys["W2"] + d_out * rh + 0.3
    sum_y = ys["partial"] + bh + 0.4             # every partial into one line, to g
    c = Canvas(width, max(sum_y + 0.15, 5.9), f"tensor parallel over {n} ranks: column, "
               "then row", f"hidden width {d_hidden} = {per_rank} features per rank; the same "
               "feature slice, in one colour, through both layers")

    def matrix(tag: str, y: float, rows: int, label: str, note: str) -> None:
        c.ax.add_patch(Rectangle((left, y), mat_w, rows * rh, facecolor="white",
                                 edgecolor=INK, linewidth=1.0, gid=tag))
        for r in range(n):
            c.ax.add_patch(Rectangle((left + r * per_rank * cw, y), per_rank * cw, rows * rh,
                                     facecolor=rank_colour(r, True), edgecolor=rank_colour(r),
                                     linewidth=2.2, gid=f"{tag}:{r}"))
        for i in range(1, rows):                 # one cell per element
            c.ax.plot([left, left + mat_w], [y + i * rh] * 2, color="white", lw=0.6)
        for j in range(1, d_hidden):
            if j % per_rank:
                c.ax.plot([left + j * cw] * 2, [y, y + rows * rh], color="white", lw=0.6)
        c.text(left - 0.2, y + rows * rh / 2, label, ha="right", size=SMALL)
        c.text(right, y + rows * rh / 2, note, ha="left", size=SMALL, colour=MUTED)

    matrix("W1T", ys["W1T"], d_in, f"W1ᵀ ({d_in} × {d_hidden})\ncolumn-parallel",
           f"rank r keeps rows {per_rank}r … {per_rank}r+{per_rank - 1}\nof W1 (its "
           "output features)")
    for r in range(n):
        x = left + r * per_rank * cw
        c.box(x, ys["Y1"], per_rank * cw, bh, f"r{r}", face=rank_colour(r, True),
              edge=rank_colour(r), gid=f"Y1:{r}", size=SMALL)
        c.arrow((x + per_rank * cw / 2, ys["Y1"] + bh + 0.05),
                (x + per_rank * cw / 2, ys["W2"] - 0.05), colour=rank_colour(r))
    c.text(left - 0.2, ys["Y1"] + bh / 2, f"Y1 = X·W1ᵀ + b1\n({batch} × {d_hidden})",
           ha="right", size=SMALL)
    c.text(right, ys["Y1"] + bh / 2, "each rank: its columns, from\nthe whole X: no "
           "communication", ha="left", size=SMALL, colour=MUTED)
    c.text(right, ys["Y1"] + bh + 0.33, "tanh, slice by slice", ha="left", size=SMALL,
           colour=MUTED)
    matrix("W2", ys["W2"], d_out, f"W2 ({d_out} × {d_hidden})\nrow-parallel",
           f"rank r keeps columns {per_rank}r … {per_rank}r+{per_rank - 1}\n(its input "
           "features)")
    node = (right + 0.55, ys["partial"] + bh / 2)
    for r in range(n):
        x = left + r * per_rank * cw
        c.box(x, ys["partial"], per_rank * cw, bh, f"r{r}", face=rank_colour(r, True),
              edge=rank_colour(r), gid=f"partial:{r}", size=SMALL)
        c.ax.plot([x + per_rank * cw / 2] * 2, [ys["partial"] + bh, sum_y],
                  color=rank_colour(r), lw=1.6)
    c.ax.plot([left + per_rank * cw / 2, node[0]], [sum_y, sum_y], color="#555555", lw=1.4)
    c.arrow((node[0], sum_y), (node[0], node[1] + 0.5))
    c.text(node[0] + 0.55, sum_y - 0.05, "all_reduce", ha="left", size=SMALL, colour=GROUP)
    c.text(left - 0.2, ys["partial"] + bh / 2, f"partial outputs\n({batch} × {d_out}) each",
           ha="right", size=SMALL)
    c.node(*node, 0.48, "g: Σ", gid="g")
    c.arrow((node[0] + 0.5, node[1]), (node[0] + 1.0, node[1]))
    c.box(node[0] + 1.05, node[1] - bh * 0.65, 2.0, bh * 1.3, f"Y2 + b2\n{batch} × {d_out}",
          face="#eeeeee", gid="Y2", size=SMALL)
    _f_and_g(c, chain_x)
    return c.fig


def _f_and_g(c: Canvas, x: float) -> None:
    """X → f → column-parallel → tanh → row-parallel → g → Y, top to bottom, beside what f
    and g do each way."""
    c.text(x - 0.1, 0.35, "Megatron's conjugate pair,\nas the notebook writes them:",
           ha="left", italic=True, size=SMALL)
    parts = [("X", "#eeeeee"), ("f", None), ("ColumnParallel W1 rows", "w"),
             ("tanh", "w"), ("RowParallel W2 columns", "w"), ("g", None), ("Y", "#eeeeee")]
    y, h, w, pitch = 1.05, 0.5, 3.9, 0.72
    for k, (label, face) in enumerate(parts):
        if face is None:                         # f or g: a node and what it does
            c.node(x + 0.3, y + h / 2, 0.3, label, gid=f"chain:{label}")
            does = ("forward: identity\nbackward: all_reduce" if label == "f"
                    else "forward: all_reduce\nbackward: identity")
            c.text(x + 0.8, y + h / 2, does, size=SMALL, colour=GROUP, ha="left")
        else:
            c.box(x, y, w if len(label) > 4 else 1.3, h, label,
                  face="white" if face == "w" else face, edge=LINE, size=SMALL)
        if k < len(parts) - 1:
            c.arrow((x + 0.3, y + h + 0.02), (x + 0.3, y + pitch - 0.02))
        y += pitch


# ------------------------------------------------------------------ 18: the schedule grid
SCHEDULES = ("GPipe", "1F1B")


def schedule_order(schedule: str, n_stages: int, stage: int, m: int) -> list[str]:
    """Stage `stage`'s forwards and backwards in the order notebook 18's code runs them:
    GPipe every forward then every backward (micro-batch 0 first); 1F1B
    min(p − 1 − s, m) warm-up forwards, then one forward and the oldest backward in turn,
    then the backwards left."""
    if schedule == "GPipe":
        return [f"F{i}" for i in range(m)] + [f"B{i}" for i in range(m)]
    if schedule != "1F1B":
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    warmup = min(n_stages - 1 - stage, m)
    order = [f"F{i}" for i in range(warmup)]
    for i in range(warmup, m):
        order += [f"F{i}", f"B{i - warmup}"]
    return order + [f"B{i}" for i in range(m - warmup, m)]


def schedule_slots(schedule: str, n_stages: int, m: int) -> dict[tuple[int, str], int]:
    """(stage, "F3") → its time slot, every forward and backward one slot long and
    communication free (the bubble formula's assumptions): each starts when its stage is
    free and its input is there (F: the stage before's forward; B: the stage after's
    backward)."""
    orders = [schedule_order(schedule, n_stages, s, m) for s in range(n_stages)]
    position = [{op: k for k, op in enumerate(order)} for order in orders]

    @lru_cache(maxsize=None)
    def end(stage: int, op: str) -> int:
        k = position[stage][op]
        start = end(stage, orders[stage][k - 1]) if k else 0
        neighbour = stage - 1 if op[0] == "F" else stage + 1
        if 0 <= neighbour < n_stages:
            start = max(start, end(neighbour, op))
        return start + 1

    return {(s, op): end(s, op) - 1 for s in range(n_stages) for op in orders[s]}


def draw_schedules(n_stages: int, m: int, schedules: tuple[str, ...] = SCHEDULES) -> Figure:
    """One grid per schedule: a row per stage, a column per time slot, each forward (F) and
    backward (B) in the slot the schedule gives it, its micro-batch written in; the white
    cells are the bubble."""
    grids = [(name, schedule_slots(name, n_stages, m)) for name in schedules]
    n_slots = max(max(slots.values()) + 1 for _, slots in grids)
    label_w, note_w = 2.3, 3.0
    cw = min(0.62, 13.5 / n_slots)
    ch = 0.5
    panel_h = n_stages * ch + 0.85
    width = max(label_w + n_slots * cw + note_w, 17.0)      # room for the titles
    c = Canvas(width, len(grids) * panel_h + 0.25, f"{n_stages} stages, m = {m} "
               "micro-batches: the schedules as planned",
               "each forward and backward one slot, communication free: the formula's "
               "assumptions")
    for k, (key, face) in enumerate((("forward", COLOURS["forward"]),
                                     ("backward", COLOURS["backward"]), ("idle: bubble",
                                                                         "white"))):
        x = label_w + k * 3.4
        c.ax.add_patch(Rectangle((x, 0.05), 0.5, 0.4, facecolor=face, edgecolor=LINE))
        c.text(x + 0.65, 0.25, key, ha="left", size=SMALL)
    for g, (name, slots) in enumerate(grids):
        top = 1.05 + g * panel_h
        busy = {s: sum(1 for (st, _), _t in slots.items() if st == s) for s in range(n_stages)}
        formula = n_slots == 2 * (m + n_stages - 1)       # then idle = (p − 1)/(m + p − 1)
        c.text(0.2, top - 0.35, f"{name}: {n_slots} slots, each stage idle "
               f"{(n_slots - 2 * m) / n_slots:.0%}" + (" = (p − 1)/(m + p − 1)" if formula
                                                       else ""), ha="left", bold=True)
        cell = {(s, t): op for (s, op), t in slots.items()}
        for s in range(n_stages):
            y = top + s * ch
            c.text(label_w - 0.2, y + ch / 2, f"stage {s}", ha="right", size=SMALL,
                   bold=True)
            for t in range(n_slots):
                op = cell.get((s, t))
                face = "white" if op is None else COLOURS["forward" if op[0] == "F"
                                                          else "backward"]
                c.ax.add_patch(Rectangle((label_w + t * cw, y), cw, ch, facecolor=face,
                                         edgecolor="#bbbbbb" if op is None else "white",
                                         linewidth=0.6, gid=f"{name}:{s}:{t}:{op or ''}"))
                if op is not None:
                    c.text(label_w + (t + 0.5) * cw, y + ch / 2, op[1:], size=SMALL,
                           colour="white", bold=True)
            c.text(label_w + n_slots * cw + 0.2, y + ch / 2,
                   f"idle {n_slots - busy[s]} of {n_slots}", ha="left", size=SMALL,
                   colour=MUTED)
    return c.fig
