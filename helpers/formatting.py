"""Numbers as text and tensors as plain data: one way each, for every helper.

- `format_value`: a number in a figure's cell or a ring table (ints without ".0");
- `one_line`: a whole value (nested lists) in a ✓/✗ line;
- `to_plain`: torch tensors, NumPy arrays, devices → JSON-able lists and dicts (on the
  engines for `cluster.pull`, in the notebook for the models' answers).
Used by notebooks 01-12 through checks, plots, p2p, ring and the runtime's engine code.
"""
from __future__ import annotations

import math
import sys
from typing import Any


def format_value(value: Any) -> str:
    """Compact cell text: ints without ".0", floats with up to 3 decimals."""
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
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):  # NumPy
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        items = [one_line(v, limit) for v in value]
        if len(items) > limit:
            items = items[:3] + ["..."] + items[-2:]
        return "[" + ", ".join(items) + "]"
    if isinstance(value, float):
        return f"{value:.1f}" if value.is_integer() and abs(value) < 1e7 else f"{value:.4g}"
    return repr(value)


def to_plain(value: Any) -> Any:
    """Tensors become {"values", "dtype", "device"}, NumPy arrays lists; containers inside."""
    torch = sys.modules.get("torch")        # never imported here: a tensor means it is loaded
    if torch is not None and isinstance(value, torch.Tensor):
        return {
            "values": value.detach().cpu().tolist(),
            "dtype": str(value.dtype).removeprefix("torch."),
            "device": str(value.device),
        }
    if torch is not None and isinstance(value, torch.device):
        return str(value)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value
