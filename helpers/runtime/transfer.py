"""The one data format between the engines and the notebook: `encode` there, `decode` here.

    engine:   encode(value)   a tensor → a detached CPU copy (same dtype and shape),
                              a torch.device → its name ("cuda:0"), a tuple → a list;
                              dicts and lists walked, everything else as it is
    wire:     ipyparallel pickles what encode returned
    notebook: decode(value)   the same values: tensors as CPU torch tensors, NumPy arrays
                              as arrays (writable: a large one arrives as a read-only view
                              of the message), containers walked

So `cluster.pull("t")` hands the notebook `t` as a CPU tensor of the dtype the rank held,
whatever its device. Records (helpers.records) turn those tensors into JSON lists.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Mapping


def walk(value: Any, leaf: Callable[[Any], Any]) -> Any:
    """`value` with `leaf` applied to everything that is not a container: mappings and
    lists are walked (a tuple becomes a list). The one walk of the data format's code."""
    if isinstance(value, Mapping):
        return {k: walk(v, leaf) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [walk(v, leaf) for v in value]
    return leaf(value)


def _encode_leaf(value: Any) -> Any:
    torch = sys.modules.get("torch")        # never imported here: a tensor means it is loaded
    if torch is not None and isinstance(value, torch.Tensor):
        # a copy: a view would carry its whole storage, and the rank may change the
        # tensor in place after the pull
        return value.detach().to("cpu", copy=True)
    if torch is not None and isinstance(value, torch.device):
        return str(value)
    return value


def encode(value: Any) -> Any:
    """On an engine: `value` as it travels to the notebook (see the module's docstring)."""
    return walk(value, _encode_leaf)


def _decode_leaf(value: Any) -> Any:
    numpy = sys.modules.get("numpy")      # a tensor arrives as encode made it: a CPU copy
    if numpy is not None and isinstance(value, numpy.ndarray):
        return value if value.flags.writeable else value.copy()
    return value


def decode(value: Any) -> Any:
    """In the notebook: what `encode` sent (its tensors are CPU copies), arrays writable."""
    return walk(value, _decode_leaf)
