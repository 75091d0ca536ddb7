"""Notebook 20's figures: the block split by heads and by sequence (our drawing), what each
rank holds (read from the pulled shards), and the activation bytes each rank saved.

Rank colours as in 14–19 (`helpers.training.schemes.rank_colour`); artists that carry a fact
have a gid.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from matplotlib.figure import Figure

from helpers.training.schemes import INK, MUTED, SMALL, Canvas, rank_colour
from helpers.transformer.block import D_FF, N_HEADS, SEQ

SEQUENCE, TENSOR = "#e8eef7", "#fdf1e4"     # the two regions' backgrounds


def draw_block_split(world_size: int) -> Figure:
    """The block as a chain of steps, twice: tensor parallel alone (top) and with sequence
    parallelism (bottom), the steps named once, at the top. Each step's boxes say what each
    rank holds; between the regions the collective that joins them, forward / backward."""
    n = world_size
    steps = ["LN1", "attention (q k v, o)", "+ x", "LN2", "MLP (fc1, fc2)", "+ h"]
    kinds = ["norm", "tensor", "norm", "norm", "tensor", "norm"]
    width, step_w, gap = 22.0, 2.9, 0.75
    pitch = min(0.48, 2.8 / n)                  # one rank's box and the space under it
    label = 7.5                                # the ranks' and the joins' text, in points
    names_h = 0.95                             # the steps' names, above the first row
    row_h = lambda first: 0.45 + (names_h if first else 0.15) + n * pitch + 0.1 + 1.0
    c = Canvas(width, row_h(True) + row_h(False) + 0.05,
               f"the block over {n} ranks: split by heads, then also by sequence",
               f"{N_HEADS} heads = {N_HEADS // n} per rank; {D_FF} hidden features = "
               f"{D_FF // n} per rank; {SEQ} tokens = {SEQ // n} per rank (sequence parallel)")

    def row(y: float, sequence: bool, title: str, joins: Sequence[tuple[str, str]]) -> None:
        c.text(0.2, y + 0.2, title, ha="left", size=SMALL, bold=True)
        top = y + 0.45
        first = y + 0.45 + (names_h if not sequence else 0.15)      # the first rank's box
        x, j = 0.2, 0
        for step, kind in zip(steps, kinds):
            tensor = kind == "tensor"
            c.box(x - 0.1, top, step_w + 0.2, first + n * pitch + 0.05 - top,
                  face=TENSOR if tensor else (SEQUENCE if sequence else "white"), edge="none")
            if not sequence:       # named once; two lines where it has a detail: it stays
                c.text(x + step_w / 2, top + names_h / 2, step.replace(" (", "\n("),
                       size=SMALL, bold=True)                # inside its region
            for r in range(n):
                text = (f"heads {r * N_HEADS // n}–{(r + 1) * N_HEADS // n - 1}"
                        if step.startswith("att") else f"features {r * D_FF // n}–"
                        f"{(r + 1) * D_FF // n - 1}" if tensor else
                        f"tokens {r * SEQ // n}–{(r + 1) * SEQ // n - 1}" if sequence
                        else "every token")
                c.box(x, first + r * pitch, step_w, pitch - 0.06, f"r{r}: {text}",
                      face=rank_colour(r, True), edge=rank_colour(r), size=label,
                      gid=f"{'sp' if sequence else 'tp'}:{step}:{r}")
            x += step_w
            if step != steps[-1]:
                mid = first + n * pitch / 2
                c.arrow((x + 0.05, mid), (x + gap - 0.05, mid), colour=INK)
            if kind != kinds[min(len(kinds) - 1, steps.index(step) + 1)] and j < len(joins):
                name, detail = joins[j]
                c.text(x + gap / 2, first + n * pitch + 0.52, f"{name}\n{detail}",
                       size=label, colour=MUTED)
                j += 1
            x += gap
    tp = [("Megatron's f", "fwd: –\nbwd: all_reduce"),
          ("Megatron's g", "fwd: all_reduce\nbwd: –")] * 2
    sp = [("SP's g", "fwd: all_gather\nbwd: reduce_scatter"),
          ("SP's ḡ", "fwd: reduce_scatter\nbwd: all_gather")] * 2
    row(0.0, False, "tensor parallel (Megatron-LM): the LayerNorms and residuals replicated", tp)
    row(row_h(True), True, "tensor + sequence parallel (Korthikanti et al.): the LayerNorm "
        "region split by tokens", sp)
    return c.fig


def plot_holdings(states: Sequence[dict], block: torch.nn.Module) -> Figure:
    """What each rank holds, found by matching its pulled shards against the whole block:
    which heads (rows of q), which hidden features (rows of fc1), which tokens (its X shard).
    states: pulled "q_weight", "fc1_weight", "X_shard" per rank; block: make_block()."""
    import matplotlib.pyplot as plt

    from helpers.transformer.block import make_tokens

    X_full, _ = make_tokens()
    q, fc1 = block.attn.q.weight.detach(), block.mlp[0].weight.detach()
    head_dim = q.shape[0] // N_HEADS
    panels = [("head", N_HEADS,
               lambda s, i: _holds_rows(s["q_weight"], q[i * head_dim:(i + 1) * head_dim])),
              ("hidden feature", D_FF, lambda s, i: _holds_rows(s["fc1_weight"], fc1[i:i + 1])),
              ("token", SEQ, lambda s, i: _holds_rows(
                  torch.as_tensor(s["X_shard"]).transpose(0, 1).flatten(1),
                  X_full[:, i:i + 1].transpose(0, 1).flatten(1)))]
    n = len(states)
    fig, axes = plt.subplots(3, 1, figsize=(8, 1.2 + 0.9 * 3 + 0.35 * n), dpi=100,
                             gridspec_kw={"hspace": 1.0})
    for ax, (what, total, holds) in zip(axes, panels):
        for r, s in enumerate(states):
            for i in range(total):
                if holds(s, i):
                    ax.add_patch(plt.Rectangle((i, n - 1 - r), 1, 0.9, color=rank_colour(r),
                                               gid=f"{what}:{i}:{r}"))
        ax.set_xlim(0, total)
        ax.set_ylim(0, n)
        ax.set_yticks([n - 1 - r + 0.45 for r in range(n)], [f"rank {r}" for r in range(n)])
        for r, label in enumerate(ax.get_yticklabels()):
            label.set_color(rank_colour(r))
        ax.set_xlabel(f"{what} (of {total})" + ("" if what != "token" else
                                               ": under sequence parallelism only"))
        ax.tick_params(axis="x", labelsize=8)
    axes[0].set_title("what each rank holds (matched against the whole block)", loc="left",
                      fontsize=11)
    plt.close(fig)
    return fig


def _holds_rows(shard: Any, rows: torch.Tensor) -> bool:
    """Whether the pulled `shard` has `rows` (a block of whole rows) among its rows."""
    shard = torch.as_tensor(shard).to(rows.dtype)
    k = rows.shape[0]
    return any(torch.equal(shard[i:i + k], rows) for i in range(0, shard.shape[0] - k + 1, k))


def plot_activation_bytes(tables: Sequence[dict[str, dict[str, int]]]) -> Figure:
    """Per rank, the bytes autograd saved for backward in the block's forward, per scheme
    (one process, TP, TP + SP), stacked by region. tables: each rank's
    {scheme: {region: bytes}} (`ActivationMeter.by_region`)."""
    import matplotlib.pyplot as plt

    schemes = list(tables[0])
    regions = [("layernorm", "LayerNorm region (dark)", False),
               ("tensor-parallel", "attention + MLP, the tensor-parallel region (light)", True)]
    fig, ax = plt.subplots(figsize=(8, 3.8), dpi=100)
    width = 0.8 / len(schemes)
    ticks, names = [], []
    for r, table in enumerate(tables):
        for j, scheme in enumerate(schemes):
            x, bottom = r + (j - (len(schemes) - 1) / 2) * width, 0
            for key, label, light in regions:
                value = table[scheme].get(key, 0) / 1024
                ax.bar(x, value, width * 0.92, bottom=bottom, color=rank_colour(r, light),
                       edgecolor=rank_colour(r), linewidth=1.2,
                       label=label if (r, j) == (0, 0) else None, gid=f"{scheme}:{key}:{r}")
                bottom += value
            ax.text(x, bottom, f"{bottom:.0f}", ha="center", va="bottom", fontsize=7.5)
            ticks.append(x)
            names.append(scheme)
        ax.text(r, -0.2, f"rank {r}", transform=ax.get_xaxis_transform(), ha="center",
                color=rank_colour(r), fontsize=10, fontweight="bold")
    ax.set_xticks(ticks, names, fontsize=8, rotation=30)      # ≥ 9 px on the page
    top = max(sum(v for k, v in t[s].items() if k != "total") for t in tables for s in t)
    ax.set_ylim(0, top / 1024 * 1.35)
    ax.set_ylabel("KiB saved for backward")
    ax.set_title("activation memory per rank, measured (saved_tensors_hooks)", loc="left",
                 fontsize=11)
    ax.legend(loc="upper right", fontsize=8, frameon=False, ncol=2)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.25)
    plt.close(fig)
    return fig
