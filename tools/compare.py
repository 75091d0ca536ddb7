"""`python -m tools.compare A B` (`make compare A=… B=…`): two machines' results, one page.

A and B are build folders (each with results/ and, optionally, bench/ inside, as `make
html` and `make bench` leave them) or results folders themselves: a laptop on gloo and a
GPU node on NCCL, or two students' runs. The page (self-contained, no network) shows:

- the busbw curves of both machines on the same axes (notebook 11's
  results/11_bandwidth.json: rows of helpers.bench.measurement.measure), with each
  collective's peak per machine in a table;
- every record (helpers.records.make_record: {"collective", "world_size", "ranks": [...]})
  whose per-rank values differ between the two, rank by rank;
- the scalar figures of bench/*.json side by side.
"""
from __future__ import annotations

import argparse
import base64
import html
import io
import json
import sys
from pathlib import Path
from typing import Any, Iterator

BANDWIDTH = "11_bandwidth.json"


class Machine:
    """One side of the comparison: its name and its results/ and bench/ folders."""

    def __init__(self, folder: Path, name: str | None = None) -> None:
        folder = Path(folder)
        if not folder.is_dir():
            raise SystemExit(f"compare: {folder} is not a folder")
        self.results = folder / "results" if (folder / "results").is_dir() else folder
        self.bench = folder / "bench" if (folder / "bench").is_dir() else None
        if not list(self.results.glob("*.json")):
            raise SystemExit(f"compare: no results (*.json) in {self.results}: "
                             "give a build folder or its results/ folder")
        self.name = name or folder.resolve().name

    def load(self, name: str) -> Any:
        path = self.results / name
        if not path.exists():
            return None
        try:
            return json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise SystemExit(f"compare: {path} is not JSON ({err})") from None


def records(data: Any, where: str = "") -> Iterator[tuple[str, dict]]:
    """(path, record) of every record inside a results file, however it is nested."""
    if (isinstance(data, dict) and "collective" in data and isinstance(data.get("ranks"), list)
            and all(isinstance(r, dict) and "after" in r for r in data["ranks"])):
        yield where or data.get("collective", "?"), data
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from records(value, f"{where}.{key}" if where else str(key))
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from records(value, f"{where}[{i}]")


def rank_differences(a: dict, b: dict) -> list[tuple[int, Any, Any]]:
    """(rank, A's state, B's state) for each rank whose before/after differ (or is missing)."""
    by_rank = lambda rec: {r.get("rank", i): {k: r.get(k) for k in ("before", "after")}
                           for i, r in enumerate(rec["ranks"])}
    ra, rb = by_rank(a), by_rank(b)
    return [(rank, ra.get(rank), rb.get(rank)) for rank in sorted(set(ra) | set(rb))
            if ra.get(rank) != rb.get(rank)]


def busbw_figure(rows_a: list[dict], rows_b: list[dict], names: tuple[str, str]) -> bytes:
    """PNG: busbw against size for both machines on one pair of axes (A solid, B dashed)."""
    from matplotlib.figure import Figure

    from helpers.bench.figures import COLORS, setup_axes, by_collective

    fig = Figure(figsize=(10, 5.6), dpi=100)
    ax = fig.add_subplot()
    for rows, name, style in ((rows_a, names[0], "-"), (rows_b, names[1], "--")):
        shown = [r for r in rows if r["busbw"] > 0]
        for collective, group in by_collective(shown).items():
            first = group[0]
            ax.plot([r["bytes"] for r in group], [r["busbw"] for r in group], style,
                    color=COLORS.get(collective, "black"), marker="o", markersize=3,
                    label=f"{name}: {collective} ({first['backend']}, "
                          f"{first['world_size']} ranks)")
    setup_axes(ax, "busbw (GB/s, GB = 10⁹ B)")
    ax.set_title(f"bus bandwidth: {names[0]} (solid) and {names[1]} (dashed)")
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _peaks_table(rows_a: list[dict], rows_b: list[dict], names: tuple[str, str]) -> str:
    from helpers.bench.figures import by_collective, peak, size_label

    groups = [by_collective(rows) for rows in (rows_a, rows_b)]
    cell = lambda g, c: (f"{peak(g[c])['busbw']:.3g} GB/s at {size_label(peak(g[c])['bytes'])}"
                         if c in g else "—")
    lines = [f"<tr><td>{html.escape(c)}</td><td>{cell(groups[0], c)}</td>"
             f"<td>{cell(groups[1], c)}</td></tr>"
             for c in dict.fromkeys([*groups[0], *groups[1]])]
    return (f"<table class='peaks'><tr><th>collective</th><th>{html.escape(names[0])} peak"
            f"</th><th>{html.escape(names[1])} peak</th></tr>{''.join(lines)}</table>")


def _records_section(a: Machine, b: Machine) -> str:
    files = sorted({p.name for m in (a, b) for p in m.results.glob("*.json")} - {BANDWIDTH})
    parts, same = [], 0
    for name in files:
        ra, rb = dict(records(a.load(name))), dict(records(b.load(name)))
        for where in dict.fromkeys([*ra, *rb]):
            if where not in ra or where not in rb:
                only = a.name if where in ra else b.name
                parts.append(f"<h3>{html.escape(name)} · {html.escape(where)}</h3>"
                             f"<p>only in {html.escape(only)}</p>")
                continue
            diffs = rank_differences(ra[where], rb[where])
            if not diffs:
                same += 1
                continue
            rows = "".join(
                f"<tr><td>{rank}</td><td><code>{html.escape(json.dumps(sa))}</code></td>"
                f"<td><code>{html.escape(json.dumps(sb))}</code></td></tr>"
                for rank, sa, sb in diffs)
            sizes = (f"world size {ra[where].get('world_size')} vs "
                     f"{rb[where].get('world_size')}")
            parts.append(f"<h3 class='differs'>{html.escape(name)} · {html.escape(where)} "
                         f"({sizes})</h3><table><tr><th>rank</th><th>{html.escape(a.name)}"
                         f"</th><th>{html.escape(b.name)}</th></tr>{rows}</table>")
    return (f"<p>{same} record(s) hold the same values on every rank on both machines.</p>"
            + "".join(parts))


def _bench_section(a: Machine, b: Machine) -> str:
    def scalars(machine: Machine) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for path in sorted(machine.bench.glob("*.json")) if machine.bench else []:
            def walk(value: Any, key: str) -> None:
                if isinstance(value, dict):
                    for k, v in value.items():
                        walk(v, f"{key}.{k}")
                elif isinstance(value, (int, float, str, bool)) or value is None:
                    found[key] = value
            walk(json.loads(path.read_text()), path.stem)
        return found

    sa, sb = scalars(a), scalars(b)
    if not sa and not sb:
        return "<p>No bench/*.json on either machine (<code>make bench</code> writes them).</p>"
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(sa.get(k, '—')))}</td>"
                   f"<td>{html.escape(str(sb.get(k, '—')))}</td></tr>"
                   for k in dict.fromkeys([*sa, *sb]))
    return (f"<table><tr><th>figure</th><th>{html.escape(a.name)}</th>"
            f"<th>{html.escape(b.name)}</th></tr>{rows}</table>")


STYLE = """body{font-family:system-ui,sans-serif;max-width:70rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #d0d7de;padding:.2rem .5rem;
text-align:left;vertical-align:top}code{font-size:.8rem;word-break:break-all}
img{max-width:100%}h3.differs{color:#b42318}"""


def compare_page(a: Machine, b: Machine) -> str:
    names = (a.name, b.name)
    rows_a, rows_b = a.load(BANDWIDTH) or [], b.load(BANDWIDTH) or []
    if rows_a or rows_b:
        png = base64.b64encode(busbw_figure(rows_a, rows_b, names)).decode()
        bandwidth = (f'<img alt="busbw of both machines" src="data:image/png;base64,{png}">'
                     + _peaks_table(rows_a, rows_b, names))
    else:
        bandwidth = f"<p>Neither machine has results/{BANDWIDTH} (notebook 11).</p>"
    title = f"{html.escape(a.name)} and {html.escape(b.name)}"
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}"
            f"</title><style>{STYLE}</style></head><body><h1>Two machines: {title}</h1>"
            f"<h2>Bus bandwidth</h2>{bandwidth}"
            f"<h2>Records whose per-rank values differ</h2>{_records_section(a, b)}"
            f"<h2>Benchmarks</h2>{_bench_section(a, b)}</body></html>\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="first build folder (or its results/)")
    parser.add_argument("b", type=Path, help="second build folder (or its results/)")
    parser.add_argument("--names", nargs=2, metavar=("NAME_A", "NAME_B"),
                        help="how to call the two machines (default: the folder names)")
    parser.add_argument("--out", type=Path, default=Path("build/compare.html"))
    args = parser.parse_args(argv)
    names = args.names or (None, None)
    a, b = Machine(args.a, names[0]), Machine(args.b, names[1])
    if a.name == b.name:
        a.name, b.name = f"A ({a.name})", f"B ({b.name})"
    from helpers.runtime.files import atomic_write

    atomic_write(args.out, compare_page(a, b))
    print(f"open {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
