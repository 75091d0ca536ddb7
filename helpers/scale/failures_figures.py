"""Notebook 26's figures of what the run measured: the checkpoint folder file by file, how
long each rank's failing step took when one rank died, and torchrun's attempts step by step."""
from __future__ import annotations

import re
from typing import Any, Sequence

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers.training.schemes import INK, MUTED, rank_colour

DIED = "#b91c1c"


def _figure(width: float, height: float) -> Figure:
    """A pyplot figure, closed: shown once, as the value of the cell that draws it."""
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(width, height), dpi=100)
    plt.close(fig)
    return fig


def _axes(fig: Figure, left: float, bottom_in: float, top_in: float, right: float = 0.97):
    """Axes from `left` to `right` (figure fractions), `bottom_in`/`top_in` inches from the
    figure's bottom/top edge."""
    h = fig.get_figheight()
    return fig.add_axes([left, bottom_in / h, right - left, 1 - (bottom_in + top_in) / h])


def short_error(text: str | None) -> str:
    """gloo's error without its source path and its advice: "Connection reset by peer"."""
    if not text:
        return "no error"
    text = text.split(". This is")[0]
    text = re.sub(r"^\[[^\]]*\]\s*", "", text).replace("Read error ", "")
    return re.sub(r"\s*\[[\d.:a-f]+\]:\d+:?", "", text).strip()   # the peer's address, port


def plot_checkpoint_files(files: Sequence[dict[str, Any]], tensor_bytes: Sequence[int]
                          ) -> Figure:
    """One bar per file of the checkpoint (its measured size); inside each rank's file, the
    bytes of the tensors that rank holds (`tensor_bytes[r]`, counted on the rank)."""
    fig = _figure(7.9, 0.95 + 0.36 * len(files))
    ax = _axes(fig, 0.17, 0.5, 0.35, 0.96)
    top = max(f["bytes"] for f in files)
    for i, f in enumerate(files):
        m = re.fullmatch(r"__(\d+)_0\.distcp", f["name"])
        if m is None:
            ax.barh(i, f["bytes"], 0.6, color="#e5e7eb", edgecolor=INK, linewidth=0.8)
            note = "where each piece of each tensor is"
        else:
            r = int(m.group(1))
            ax.barh(i, f["bytes"], 0.6, color=rank_colour(r, light=True),
                    edgecolor=rank_colour(r), linewidth=0.8)
            ax.barh(i, tensor_bytes[r], 0.6, color=rank_colour(r))
            note = f"{f['bytes'] / tensor_bytes[r]:.1f} × its {tensor_bytes[r]:,} B of tensors"
        ax.text(f["bytes"] + 0.01 * top, i, f"{f['bytes']:,} B · {note}", va="center",
                fontsize=8, color=INK)
    ax.set_yticks(range(len(files)), [f["name"] for f in files], fontsize=8)
    ax.set_ylim(len(files) - 0.5, -0.5)
    ax.set_xlim(0, top * 1.9)
    ax.set_xlabel("bytes on disk, measured (dark: the rank's tensors, counted on the rank)",
                  fontsize=8)
    ax.tick_params(labelsize=8)
    ax.set_title("the checkpoint folder: one file per rank and the .metadata", fontsize=10)
    return fig


def plot_crash(survivors: Sequence[dict[str, Any]], world_size: int, timeout_s: float,
               kill_at: int) -> Figure:
    """One row per rank of the run that crashed: how long each survivor's failing step took
    and the error it read; the last rank's row says it died; the timeout as a line."""
    fig = _figure(7.9, 0.95 + 0.36 * world_size)
    ax = _axes(fig, 0.08, 0.5, 0.35)
    by_rank = {s["rank"]: s for s in survivors}
    right = timeout_s * 2.6
    for r in range(world_size):
        s = by_rank.get(r)
        if s is None:
            ax.text(0.01 * right, r, f"ended its process (os._exit) in step {kill_at}",
                    va="center", fontsize=8, color=DIED)
            continue
        ax.barh(r, s["failed_after"], 0.6, color=rank_colour(r, light=True),
                edgecolor=rank_colour(r))
        ax.text(s["failed_after"] + 0.01 * right, r,
                f"{s['failed_after']:.2f} s · {short_error(s['failure'])}", va="center",
                fontsize=8, color=INK)
    ax.axvline(timeout_s, color=MUTED, linestyle="--", linewidth=1)
    ax.text(timeout_s, -0.55, f" timeout {timeout_s:g} s", fontsize=8, color=MUTED,
            va="bottom")
    ax.set_yticks(range(world_size), [f"rank {r}" for r in range(world_size)], fontsize=8)
    ax.set_ylim(world_size - 0.5, -0.5)
    ax.set_xlim(0, right)
    ax.set_xlabel(f"seconds the failing step {kill_at} took, this run", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.set_title(f"rank {world_size - 1} dies: what each other rank read, and when",
                 fontsize=10, pad=14)
    return fig


def plot_torchrun(events: Sequence[dict[str, Any]], save_at: int, kill_at: int,
                  total_steps: int) -> Figure:
    """One row per torchrun attempt and rank (the "@@" lines the script printed,
    ck.torchrun_events): a box per step it finished (its loss inside), the error a rank
    reported, the last step of a rank that printed nothing more; the checkpoint as a line."""
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    for e in events:
        row = rows.setdefault((e["attempt"], e["rank"]), {"pid": None, "losses": {},
                                                          "error": None})
        if "pid" in e:
            row["pid"] = e["pid"]
        elif "error" in e:
            row["error"] = e
        elif "loss" in e:
            row["losses"][e["step"]] = e["loss"]
    keys = sorted(rows)
    last_attempt = max(a for a, _ in keys)
    fig = _figure(7.9, 1.0 + 0.45 * len(keys))
    ax = _axes(fig, 0.25, 0.5, 0.35)
    for i, (attempt, rank) in enumerate(keys):
        row = rows[(attempt, rank)]
        for step, loss in row["losses"].items():
            ax.add_patch(Rectangle((step + 0.05, i - 0.32), 0.9, 0.64,
                                   facecolor=rank_colour(rank, light=True),
                                   edgecolor=rank_colour(rank), linewidth=1))
            ax.text(step + 0.5, i, f"{loss:.4f}", ha="center", va="center", fontsize=7.5,
                    color=INK)
        e = row["error"]
        if e is not None:
            ax.add_patch(Rectangle((e["step"] + 0.05, i - 0.32), 0.9, 0.64, facecolor="white",
                                   edgecolor=DIED, linewidth=1.2, linestyle="--"))
            ax.text(e["step"] + 1.0, i, f" read:\n {short_error(e['error'])}", va="center",
                    fontsize=8, color=DIED)
        elif attempt < last_attempt and row["losses"]:
            ax.text(max(row["losses"]) + 1.05, i, "no line after this step", va="center",
                    fontsize=8, color=DIED)
    ax.axvline(save_at, color=INK, linestyle=":", linewidth=1)
    ax.text(save_at, -0.6, f" checkpoint after step {save_at - 1}", fontsize=8,
            va="bottom", color=INK)
    ax.set_yticks(range(len(keys)), [f"attempt {a} · rank {r} · pid {rows[(a, r)]['pid']}"
                                     for a, r in keys], fontsize=8)
    ax.set_ylim(len(keys) - 0.5, -0.65)
    ax.set_xlim(0, total_steps + 0.2)
    ax.set_xticks([s + 0.5 for s in range(total_steps)], [str(s) for s in range(total_steps)],
                  fontsize=8)
    ax.set_xlabel(f"step (in each box: the whole batch's loss; the last rank ends its process "
                  f"in step {kill_at} of attempt 0)", fontsize=8)
    ax.set_title("torchrun --max-restarts 2: every attempt's steps, rank by rank", fontsize=10,
                 pad=14)
    return fig
