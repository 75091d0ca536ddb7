"""Notebook 28's pictures: what each rank's Flight Recorder holds, one column per rank."""
from __future__ import annotations

from collections import Counter

from helpers.debugging.flight_recorder import Entry, entries
from helpers.figures.grid import legend_below, rank_grid

SAME, ODD, MISSING, NO_DUMP = "#12b76a", "#f79009", "#ffffff", "#98a2b3"


def _row_colours(by_rank: dict[int, dict[int, Entry]], seq: int,
                 ranks: list[int]) -> dict[int, str]:
    """Green where a rank's call at `seq` is the one more ranks made than any other,
    orange where it is not (a tie: every side orange), white where the rank made none."""
    calls = {r: by_rank[r][seq] for r in ranks if seq in by_rank.get(r, {})}
    counts = Counter((e.collective, str(e.sizes)) for e in calls.values())
    top = counts.most_common(2)
    usual = top[0][0] if top and (len(top) == 1 or top[0][1] > top[1][1]) else None
    colours = {}
    for rank in ranks:
        entry = calls.get(rank)
        if entry is None:
            colours[rank] = MISSING
        elif (entry.collective, str(entry.sizes)) == usual:
            colours[rank] = SAME
        else:
            colours[rank] = ODD
    return colours


def plot_flight_records(traces: dict[int, dict | None], world_size: int, title: str,
                        last: int = 4, row_in: float = 0.75):
    """Each rank's newest `last` collectives of the default group as its buffer holds them,
    one column per rank, one row per sequence number (newest at the bottom): green where the
    rank made the call more ranks made at that number than any other, orange where it made
    another (or no call is the most common), a dashed empty box where it made none, a grey
    column for a rank without a dump."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    ranks = list(range(world_size))
    by_rank = {r: {e.seq: e for e in entries(t)} for r, t in traces.items() if t}
    seqs = sorted({s for calls in by_rank.values() for s in calls})[-last:]
    if not seqs:
        raise ValueError("no collective in any rank's dump: nothing to draw")
    fig = plt.figure(figsize=(max(6.0, 1.9 * world_size + 1.2), row_in * len(seqs) + 2.0),
                     dpi=100)
    plt.close(fig)                       # made through pyplot so Jupyter shows it, once
    ax = fig.add_subplot()
    for row, seq in enumerate(seqs):
        colours = _row_colours(by_rank, seq, ranks)
        for rank in ranks:
            if rank not in by_rank:
                continue
            entry = by_rank[rank].get(seq)
            colour = colours[rank]
            ax.add_patch(Rectangle((rank + 0.04, row + 0.08), 0.92, 0.84, facecolor=colour,
                                   edgecolor="#475467" if colour == MISSING else "white",
                                   linestyle="--" if colour == MISSING else "-"))
            text = entry.label().split(" ", 1)[1] if entry else "(no call)"
            ax.text(rank + 0.5, row + 0.5, text, ha="center", va="center", fontsize=9,
                    color="#101828" if colour in (MISSING, ODD) else "white")
    for rank in ranks:
        if rank not in by_rank:
            ax.add_patch(Rectangle((rank + 0.04, 0.08), 0.92, len(seqs) - 0.16,
                                   facecolor=NO_DUMP, edgecolor="white"))
            ax.text(rank + 0.5, len(seqs) / 2, "no dump:\nprocess gone", ha="center",
                    va="center", fontsize=10, color="white", fontweight="bold")
    rank_grid(ax, world_size, [f"#{s}" for s in seqs], label_size=10)
    ax.set_ylabel("collective sequence number", fontsize=10)
    legend_below(ax, [(SAME, "the call most ranks made"), (ODD, "another call, or a tie"),
                      (MISSING, "no call"), (NO_DUMP, "no dump")], fontsize=9,
                 edge="#475467")
    ax.set_title(title, fontsize=12, pad=28)
    return fig


def scheme_traces(world_size: int) -> dict[int, dict]:
    """Dumps as the scheme draws them (a model, not a run): three collectives on every
    rank, then a fourth, an all_reduce, that every rank but the last entered and none
    finished."""
    calls = [("all_reduce", [[4]]), ("broadcast", [[4]]), ("all_gather", [[4]])]

    def entry(seq: int, name: str, sizes: list, retired: bool) -> dict:
        return {"record_id": seq - 1, "pg_id": 0, "collective_seq_id": seq,
                "p2p_seq_id": 0, "profiling_name": f"gloo:{name}", "input_sizes": sizes,
                "process_group": ("0", "default_pg"), "retired": retired, "is_p2p": False,
                "frames": []}

    traces = {}
    for rank in range(world_size):
        found = [entry(i + 1, name, sizes, True) for i, (name, sizes) in enumerate(calls)]
        if rank != world_size - 1:
            found.append(entry(4, "all_reduce", [[4]], False))
        traces[rank] = {"entries": found}
    return traces


def draw_flight_recorder(world_size: int):
    """The page's scheme: every rank's buffer when the last rank never calls the fourth
    collective (`scheme_traces`), drawn as notebook 28 draws this run's dumps."""
    return plot_flight_records(scheme_traces(world_size), world_size,
                               "The scheme: each rank's buffer, the last rank missing #4",
                               row_in=0.36)


FOUND, NOTHING = "#2e90fa", "#98a2b3"


def plot_side_by_side(rows: list[tuple[str, str, bool, str]]):
    """One row per section: (its name, torch's analyzer's line, whether that line is a
    finding, what the series' diagnosis said); blue where the tool found something, grey
    where it found nothing or refused."""
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig = plt.figure(figsize=(11, 0.95 * len(rows) + 1.0), dpi=100)
    plt.close(fig)                       # made through pyplot so Jupyter shows it, once
    ax = fig.add_subplot()
    for row, (name, theirs, found, ours) in enumerate(rows):
        ax.text(-0.02, row + 0.5, name, ha="right", va="center", fontsize=10)
        for col, (text, colour) in enumerate(((theirs, FOUND if found else NOTHING),
                                               (ours, FOUND if ours else NOTHING))):
            ax.add_patch(Rectangle((col + 0.01, row + 0.06), 0.98, 0.88, facecolor=colour,
                                   edgecolor="white", alpha=0.85))
            shown = textwrap.fill(text or "no error", 58, max_lines=3, placeholder=" …")
            ax.text(col + 0.5, row + 0.5, shown, ha="center", va="center", fontsize=9,
                    color="white")
    ax.set_xlim(0, 2)
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([0.5, 1.5], ["torch's analyzer (fr_trace)", "What happened, by rank"],
                  fontsize=11)
    ax.set_yticks([])
    ax.tick_params(length=0)
    ax.xaxis.tick_top()
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title("Each section: what each tool said (blue: a finding; grey: none)",
                 fontsize=12, pad=26)
    return fig


CELL, TORCH, CODE = "#2e90fa", "#f79009", "#667085"


def plot_stacks(found: dict, world_size: int, title: str):
    """Each rank's main-thread stack as py-spy read it (helpers.debugging.stacks), one
    column per rank, outermost frame on top: the cell's frames blue, your files' grey, the
    torch.distributed frame the rank waits in orange; a rank py-spy could not read says why."""
    import textwrap

    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    depth = max([len(f) for f in found.values() if not isinstance(f, str)] + [1])
    fig = plt.figure(figsize=(max(6.0, 2.1 * world_size + 1.2), 0.75 * depth + 2.0), dpi=100)
    plt.close(fig)                       # made through pyplot so Jupyter shows it, once
    ax = fig.add_subplot()
    colours = {"cell": CELL, "torch": TORCH, "code": CODE}
    for rank in range(world_size):
        frames = found.get(rank, "no dump")
        if isinstance(frames, str):
            ax.text(rank + 0.5, depth / 2, textwrap.fill(frames, 22), ha="center",
                    va="center", fontsize=9)
            continue
        for row, frame in enumerate(frames):
            ax.add_patch(Rectangle((rank + 0.04, row + 0.08), 0.92, 0.84,
                                   facecolor=colours[frame.kind], edgecolor="white"))
            where = "torch.distributed" if frame.kind == "torch" else frame.where
            ax.text(rank + 0.5, row + 0.5, f"{frame.function}\n{where}", ha="center",
                    va="center", fontsize=9, color="white")
    rank_grid(ax, world_size, ["outermost"] + [""] * (depth - 2) + ["innermost"]
              if depth > 1 else ["innermost"], label_size=10)
    legend_below(ax, [(CELL, "the cell"), (CODE, "your files"),
                      (TORCH, "torch.distributed: it waits here")], fontsize=9)
    ax.set_title(title, fontsize=12, pad=28)
    return fig
