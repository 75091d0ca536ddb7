"""The taught code of a notebook, run outside Jupyter: what `make bench` times.

The hand-built versions of the series live in the notebooks' visible `%%px` cells, not in
helpers/. The training bench runs those very definitions, so that its "by hand" side is
the code a reader sees and edits, not a copy that could drift from it:

    ns = taught("15_data_parallel", rank=r, world_size=n, device=d, x=x, y=y, ...)
    ns["train_overlapped"](4096)

`taught` reads the notebook's `%%px` cells in order and executes their imports and their
function and class definitions (nothing else: no training loop, no print, no pull) in a
namespace that holds what a notebook engine holds (torch, dist, rank, world_size,
device) plus the globals given. The names a pair needs are checked: a notebook that no
longer defines one fails with its name, not with a KeyError deep in a timing loop.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Iterable

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)


def px_sources(notebook: str) -> list[str]:
    """The bodies of the notebook's `%%px` cells (the magic line cut off), in order."""
    path = NOTEBOOKS / f"{notebook}.ipynb"
    if not path.exists():
        raise FileNotFoundError(f"no notebook {path.name} in {NOTEBOOKS}")
    cells = json.loads(path.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    return [s.split("\n", 1)[1] if "\n" in s else "" for s in sources
            if s.startswith("%%px")]


def definitions(notebook: str) -> ast.Module:
    """Every top-level import, def and class of the notebook's `%%px` cells, in order. A
    name defined twice keeps its first definition: the later one is a pitfall's variant
    (16's scatter_grad that skips a call), which the notebook puts back afterwards."""
    body: list[ast.stmt] = []
    defined: set[str] = set()
    for source in px_sources(notebook):
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                if node.name in defined:
                    continue
                defined.add(node.name)
            if isinstance(node, KEPT):
                body.append(node)
    return ast.Module(body=body, type_ignores=[])


def taught(notebook: str, needs: Iterable[str] = (), **namespace: Any) -> dict[str, Any]:
    """A namespace with the notebook's taught definitions, run over `namespace` (the
    globals they read: rank, world_size, device, the data, ...). KeyError naming the
    notebook if one of `needs` is not defined there."""
    import torch
    import torch.distributed as dist

    ns: dict[str, Any] = {"torch": torch, "dist": dist, "__name__": f"taught_{notebook}"}
    if dist.is_initialized():
        ns.update(rank=dist.get_rank(), world_size=dist.get_world_size())
    ns.update(namespace)
    code = compile(definitions(notebook), f"<{notebook}: %%px definitions>", "exec")
    exec(code, ns)
    missing = [name for name in needs if name not in ns]
    if missing:
        raise KeyError(f"notebook {notebook} no longer defines {missing} in a %%px cell: "
                       f"the bench times those definitions")
    return ns
