"""The index cards' pictures (tools.build): what every rank ended with, not the whole figure.

From the results a notebook saved (build/results/<stem>.json) when they say it:
- a record (helpers.records.make_record): its per-rank panels, drawn without the diagram;
- notebook 11's sweep rows: the busbw curves;
- notebook 13's diagnoses: "what happened, by rank" as a row of ranks;
otherwise the notebook's first result plot, as it is shown in the page.
"""
from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from typing import Any

WIDTH_PX = 480


def _png(fig: Any, width_px: int = WIDTH_PX) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=width_px / fig.get_figwidth(),
                metadata={"Software": None}, facecolor="white")
    return buf.getvalue()


def _first_record(data: Any) -> dict | None:
    from tools.compare import records

    return next((record for _where, record in records(data)), None)


def diagnosis_figure(diagnoses: list[dict]) -> Any:
    """One box per rank named in the most telling diagnosis: failed ✗, never ran, absent."""
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyBboxPatch

    telling = max(diagnoses, key=lambda d: (bool(d.get("skipped") or d.get("absent")),
                                            len(d.get("failed", []))))
    failed = {f["rank"]: f for f in telling.get("failed", [])}
    skipped, absent = set(telling.get("skipped", [])), set(telling.get("absent", []))
    n = max([*failed, *skipped, *absent, 0]) + 1
    fig = Figure(figsize=(6, 3.2))
    ax = fig.add_axes([0.02, 0.02, 0.96, 0.8])
    ax.set_xlim(0, n)
    ax.set_ylim(0, 1)
    ax.set_axis_off()
    fig.text(0.03, 0.92, "What happened, by rank", fontsize=15, fontweight="bold")
    for rank in range(n):
        if rank in failed:
            meaning = textwrap.wrap(failed[rank]["meaning"].split("(")[0], 16)
            color, label = "#d92d20", "\n".join(["✗ failed", *meaning[:4]])
        elif rank in skipped:
            color, label = "#98a2b3", "did not\nrun the cell"
        elif rank in absent:
            color, label = "#f79009", "never reached\nthe collective"
        else:
            color, label = "#12b76a", "ran it"
        ax.add_patch(FancyBboxPatch((rank + 0.06, 0.1), 0.88, 0.8,
                                    boxstyle="round,pad=0.02", fc=color, ec="none"))
        ax.text(rank + 0.5, 0.72, f"rank {rank}", ha="center", fontsize=12, color="white",
                fontweight="bold")
        ax.text(rank + 0.5, 0.42, label, ha="center", va="center", fontsize=7.5,
                color="white", wrap=True)
    return fig


def thumbnail(stem: str, results_dir: Path) -> bytes | None:
    """PNG of the card's picture from the saved results, or None (use the page's plot)."""
    path = results_dir / f"{stem}.json"
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    if isinstance(data, list) and data and all(isinstance(d, dict) and "failed" in d
                                               for d in data):
        return _png(diagnosis_figure(data))
    if isinstance(data, list) and data and all(isinstance(r, dict) and "busbw" in r
                                               for r in data):
        from helpers.bench.figures import plot_busbw

        return _png(plot_busbw(data))
    record = _first_record(data)
    if record is not None:
        from helpers.figures.plots import plot_record

        return _png(plot_record(record))
    return None
