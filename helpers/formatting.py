"""Numbers and values as text: one way each, for every helper.

- `format_value`: a number in a figure's cell or a ring table (ints without ".0");
- `one_line`: a whole value (nested lists, a tensor, an array) in a ✓/✗ line.

A tensor or an array is shown as its values: `one_line(torch.tensor([1.0, 2.5]))` is
"[1.0, 2.5]", as the list it holds.
"""
from __future__ import annotations

import math
from typing import Any


def format_value(value: Any) -> str:
    """Compact cell text: ints without ".0", floats with up to 3 decimals."""
    if _has_values(value):                  # a tensor, an array or a NumPy scalar
        value = value.tolist()
        if isinstance(value, list):
            return one_line(value)
    if isinstance(value, bool):
        return "T" if value else "F"
    if isinstance(value, int):
        return str(value)
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if math.isnan(f):
        return "nan"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    if f.is_integer() and abs(f) < 1e15:
        return str(int(f))
    if abs(f) >= 1e5 or abs(f) < 1e-3:
        return f"{f:.3g}"
    return f"{f:.3f}".rstrip("0").rstrip(".")


def one_line(value: Any, limit: int = 8) -> str:
    """Compact one-line text of a value: [1.0, 2.5], [[1, 2], [3, 4]], None."""
    if _has_values(value):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        items = [one_line(v, limit) for v in value]
        if len(items) > limit:
            items = items[:3] + ["..."] + items[-2:]
        return "[" + ", ".join(items) + "]"
    if isinstance(value, float):
        return f"{value:.1f}" if value.is_integer() and abs(value) < 1e7 else f"{value:.4g}"
    return repr(value)


def _has_values(value: Any) -> bool:
    """A tensor, a NumPy array or a NumPy scalar: something `tolist` shows as values."""
    return hasattr(value, "tolist") and not isinstance(value, (list, tuple, str))
