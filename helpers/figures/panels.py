"""What a record figure shows, before any drawing: per rank, one row per argument.

A panel per rank lists its arguments (torch parameter names, one row per list element)
with the cells before and after the call; `record_colors` gives every value one colour
across the record.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import matplotlib
import matplotlib.colors as mcolors

from helpers.collectives.registry import ARGS, LIST_ARGS, ROOT, SPLIT_ARGS, UNDEFINED_OFF_ROOT
from helpers.formatting import format_value


MAX_CELLS = 24            # longer rows show head … tail
UNDEFINED_FACE = "#e4e4e4"
UNDEFINED_EDGE = "#9a9a9a"
ROOT_COLOR = "#c2410c"
ROOT_FACE = "#fff7ed"
MUTED = "#8a8a8a"


# --------------------------------------------------------------------------- values
def is_unspecified(value: Any) -> bool:
    """True for a "buffer not defined after the call" sentinel (anything that is
    neither None, a number nor a (nested) list of numbers)."""
    if value is None or isinstance(value, (bool, int, float)):
        return False
    if isinstance(value, (list, tuple)):
        return False
    return not _is_number_like(value)


def _is_number_like(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, str)


def flatten(value: Any) -> list:
    """Nested lists (any tensor shape) → flat list of scalars."""
    if isinstance(value, (list, tuple)):
        out: list = []
        for item in value:
            out.extend(flatten(item))
        return out
    return [value]


def _palette() -> list[str]:
    """Qualitative colours: light tab10 hues, then strong tab10, then tab20b/c."""
    tab10 = [c for i, c in enumerate(matplotlib.colormaps["tab10"].colors) if i != 7]
    light = [mcolors.to_hex(tuple(0.55 * x + 0.45 for x in c)) for c in tab10]
    strong = [mcolors.to_hex(c) for c in tab10]
    extra = [mcolors.to_hex(c) for name in ("tab20b", "tab20c")
             for c in matplotlib.colormaps[name].colors]
    extra = [c for c in extra if _saturation(c) > 0.15]   # greys mean "undefined"
    return light + strong + extra


def _saturation(color: str) -> float:
    r, g, b = mcolors.to_rgb(color)
    return max(r, g, b) - min(r, g, b)


def text_color_for(face: str) -> str:
    r, g, b = mcolors.to_rgb(face)
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


ZERO_FACE = "#ffffff"     # zeros are (mostly) empty buffers: no data colour


class ValueColors:
    """A stable value → colour map: colours are handed out in order of first
    appearance (inputs before outputs), keyed by the displayed text. Zero is white."""

    def __init__(self, values: Iterable[Any] = ()):
        self._palette = _palette()
        self._map: dict[str, str] = {"0": ZERO_FACE}
        for v in values:
            self.add(v)

    def add(self, value: Any) -> str:
        key = value if isinstance(value, str) else format_value(value)
        if key not in self._map:
            self._map[key] = self._palette[(len(self._map) - 1) % len(self._palette)]
        return self._map[key]

    def __call__(self, value: Any) -> str:
        return self.add(value)

    def __len__(self) -> int:
        return len(self._map)


# --------------------------------------------------------------------------- rows
@dataclass
class Side:
    cells: list[str] | None          # None: argument not passed on this side
    undefined: bool = False          # API leaves it undefined (values still shown)
    unknown: bool = False            # model sentinel: no value at all


@dataclass
class ArgRow:
    label: str
    arg: str
    before: Side
    after: Side
    group_start: bool = False
    plain: tuple[str, str] | None = None     # (before, after) text for non-tensor arguments

    @property
    def not_passed(self) -> bool:
        return self.before.cells is None and self.after.cells is None


@dataclass
class Panel:
    rank: int
    device: str
    is_root: bool
    role: str
    rows: list[ArgRow] = field(default_factory=list)


def undefined_after(collective: str, rank: int, params: Mapping[str, Any], arg: str) -> bool:
    """Buffers the torch API leaves undefined after the call (the registry says which)."""
    return (arg == UNDEFINED_OFF_ROOT.get(collective)
            and rank != params.get(ROOT[collective]))


def _side(value: Any, undefined: bool = False, like: Side | None = None) -> Side:
    if hasattr(value, "tolist"):                 # numpy arrays, torch tensors
        value = value.tolist()
    if value is None:
        return Side(None)
    if is_unspecified(value):
        n = len(like.cells) if like is not None and like.cells else 1
        return Side(["?"] * n, undefined=True, unknown=True)
    return Side([format_value(v) for v in flatten(value)], undefined=undefined)


def arg_order(collective: str, states: Iterable[Mapping[str, Any]]) -> list[str]:
    order = list(ARGS.get(collective, ()))  # torch's tensor arguments, in order
    for state in states:
        for key in state:
            if key not in order:
                order.append(key)
    return order


def build_panels(record: Mapping[str, Any]) -> list[Panel]:
    collective = record["collective"]
    params = record.get("params") or {}
    ranks = sorted(record["ranks"], key=lambda r: r["rank"])
    args = arg_order(collective, [s for r in ranks for s in (r.get("before") or {}, r.get("after") or {})])
    # The ranks to mark: src or dst of a rooted collective, both ends of a send/recv.
    keys = ("src", "dst") if collective == "send_recv" else (ROOT.get(collective),)
    marked = {params[k]: k for k in keys if k is not None and params.get(k) is not None}
    panels = []
    for info in ranks:
        rank = info["rank"]
        before, after = info.get("before") or {}, info.get("after") or {}
        role = marked.get(rank, "")
        panel = Panel(rank, str(info.get("device", "")), bool(role), role)
        for arg in args:
            if arg not in before and arg not in after:
                continue
            b, a = before.get(arg), after.get(arg)
            undef = undefined_after(collective, rank, params, arg)
            if arg in SPLIT_ARGS:                # ints, not tensors: plain text
                panel.rows.append(ArgRow(arg, arg, Side([]), Side([]), True, (repr(b), repr(a))))
                continue
            if arg in LIST_ARGS or arg.endswith("_list"):
                n = max(len(b) if isinstance(b, list) else 0, len(a) if isinstance(a, list) else 0)
                if n == 0:
                    bs = _side(b)
                    panel.rows.append(ArgRow(arg, arg, bs, _side(a, undef, bs), True))
                    continue
                for i in range(n):
                    bi = b[i] if isinstance(b, list) and i < len(b) else None
                    ai = a[i] if isinstance(a, list) and i < len(a) else (a if is_unspecified(a) else None)
                    bs = _side(bi)
                    panel.rows.append(ArgRow(f"{arg}[{i}]", arg, bs, _side(ai, undef, bs), i == 0))
            else:
                bs = _side(b)
                panel.rows.append(ArgRow(arg, arg, bs, _side(a, undef, bs), True))
        panels.append(panel)
    return panels


def record_colors(panels: Sequence[Panel]) -> ValueColors:
    colors = ValueColors()
    for side in ("before", "after"):
        for panel in panels:
            for row in panel.rows:
                s = getattr(row, side)
                if s.cells and not s.unknown:
                    for text in s.cells:
                        colors.add(text)
    return colors


def call_signature(collective: str, params: Mapping[str, Any]) -> str:
    shown = [f"{k}={v}" for k, v in params.items() if k in ("src", "dst", "op")]
    return f"{collective}({', '.join(shown)})"
