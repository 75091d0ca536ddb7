"""Notebook 26 (checkpoints and failures): what every rank and the notebook share.

The model is the toy MLP of notebooks 15–19 with a hidden layer of 50, so that its first
weight (50 × 8) splits unevenly: 13/13/13/11 rows at 4 ranks, 17/17/16 at 3, 25/25 at 2.
FSDP2 (`fully_shard`) shards every parameter on dim 0, Adam keeps two tensors per
parameter, and `torch.distributed.checkpoint` (DCP) saves and loads the shards.

    model, optimizer = make_sharded(mesh)           # on every rank
    rows = rows_held(model)                         # {"0.weight": (0, 13), ...}
    state = full_state(model, optimizer)            # every tensor whole (an all_gather)
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from helpers.paths import build_dir
from helpers.training.toy import make_data, make_mlp, reference_train
from helpers.training.zero import row_range

D_HIDDEN = 50         # 50 rows: uneven at 3 and 4 ranks
LR = 0.05             # Adam's learning rate
SAVE_AT = 3           # the checkpoint is written after this many steps
KILL_AT = 5           # the step a rank dies in (after SAVE_AT: the steps between are lost)
TOTAL_STEPS = 8       # the run, start to finish


def other_world_size(n: int) -> int:
    """The world size the checkpoint is loaded at: 4 after 2, else 2 (a change either way)."""
    if n < 2:
        raise ValueError(f"saving at one world size and loading at another needs 2+ ranks, "
                         f"not {n}")
    return 4 if n == 2 else 2


def checkpoint_dir(name: str = "26_checkpoints") -> Path:
    """A fresh, empty folder for the checkpoint under build/tmp (never the repo; `make clean`
    removes build/), deleted again when the process that asked for it exits, even if the
    notebook fails before its teardown."""
    root = build_dir() / "tmp"
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def run_in_session(command: list[str], timeout_s: float, env: dict[str, str] | None = None
                   ) -> tuple[int | None, str, bool]:
    """Run `command` in its own session (a process group of its own) and wait at most
    `timeout_s`: (return code or None on timeout, stdout + stderr, whether any process of
    the group is left). On timeout the whole group is killed, not only its leader: torchrun's
    agent dies with SIGKILL without ending its workers, which would live on."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        code = None
    return code, output, _group_left(proc.pid)


def _group_left(pgid: int, wait_s: float = 5.0) -> bool:
    """Whether a process of group `pgid` is still there after `wait_s` (signal 0 tests it;
    a killed process may take a moment to go)."""
    import time
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


def make_model() -> nn.Sequential:
    """Linear(8, 50) → Tanh → Linear(50, 4), float64, the same weights on every rank."""
    return make_mlp(d_hidden=D_HIDDEN)


def make_sharded(mesh: Any, lr: float = LR) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model with each Linear and the whole model under `fully_shard`, and Adam."""
    from torch.distributed.fsdp import fully_shard
    model = make_model().to(mesh.device_type)
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=lr)


def planned_rows(world_size: int) -> tuple[list[dict[str, tuple[int, int]]],
                                            dict[str, tuple[int, ...]]]:
    """The split fully_shard makes of make_model() at `world_size` ranks, computed from
    the shapes alone (torch.chunk's rule): one {parameter: (start, stop)} per rank, and
    the shapes."""
    shapes = {k: tuple(v.shape) for k, v in make_model().named_parameters()}
    return ([{k: row_range(v[0], r, world_size) for k, v in shapes.items()}
             for r in range(world_size)], shapes)


def rows_held(model: nn.Module) -> dict[str, tuple[int, int]]:
    """{parameter: (start, stop)}: the rows of dim 0 this rank's shard holds."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    held = {}
    for name, p in model.named_parameters():
        shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh,
                                                              p.placements)
        held[name] = (offset[0], offset[0] + shape[0]) if shape[0] else (p.shape[0],) * 2
    return held


def shard_bytes(model_sd: dict[str, Any], optim_sd: dict[str, Any]) -> int:
    """Bytes of the tensors this rank holds in two sharded state dicts (get_state_dict):
    its shards of the parameters and of Adam's `exp_avg` and `exp_avg_sq`; Adam's `step`,
    a scalar every rank keeps whole, is left out."""
    params = sum(t.to_local().numel() * t.element_size() for t in model_sd.values())
    return params + sum(v.to_local().numel() * v.element_size()
                        for state in optim_sd["state"].values() for v in state.values()
                        if v.dim())


def run_on_ranks(cluster: Any, code: str) -> dict | None:
    """Run `code` on every rank and wait, as a `%%px` cell does. When a rank fails or its
    engine dies, print what happened, by rank (helpers.runtime.diagnose, the summary a
    failed `%%px` cell shows), and return that diagnosis instead of raising ipyparallel's
    error, whose text names engines and tasks, not ranks. None when every rank finished."""
    from ipyparallel.error import CompositeError, RemoteError

    from helpers.runtime.diagnose import describe_diagnosis, diagnose

    try:
        cluster.run(code)
    except (CompositeError, RemoteError) as error:
        diagnosis = diagnose(error, {info.engine_id: info.rank for info in cluster.ranks})
        print(describe_diagnosis(diagnosis))
        return diagnosis
    return None


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Every tensor of the model and of Adam, whole, on every rank (DCP's get_state_dict
    with full_state_dict=True gathers the shards): {"model/0.weight": ...,
    "optim/0.weight/exp_avg": ..., "optim/0.weight/step": ...}."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(model, optimizer,
                              options=StateDictOptions(full_state_dict=True))
    flat = {f"model/{k}": v.detach().cpu().clone() for k, v in msd.items()}
    for name, per_param in osd["state"].items():
        for key, value in per_param.items():
            flat[f"optim/{name}/{key}"] = torch.as_tensor(value).detach().cpu().clone()
    return flat


def state_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    """max |a − b| over every tensor of two flat states with the same keys."""
    if set(a) != set(b):
        raise ValueError(f"different tensors: {sorted(set(a) ^ set(b))}")
    return max((torch.as_tensor(a[k], dtype=torch.float64)
                - torch.as_tensor(b[k], dtype=torch.float64)).abs().max().item() for k in a)


def batch_of(rank: int, world_size: int, device: Any = "cpu"
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's share of the toy's 48 samples (48 splits evenly at 1, 2, 3, 4 ranks)."""
    from helpers.training.toy import shard
    X, Y = make_data()
    return shard(X, rank, world_size).to(device), shard(Y, rank, world_size).to(device)


def reference_losses(steps: int = TOTAL_STEPS, lr: float = LR,
                     restart_at: int | None = None, keep_optimizer: bool = True
                     ) -> list[float]:
    """One process, the whole batch, Adam: the loss before each step. `restart_at`: the
    run is stopped after that many steps and goes on with the same parameters and, unless
    `keep_optimizer` is False, the same Adam state (False: a fresh Adam)."""
    X, Y = make_data()
    model = make_model()
    if restart_at is None or keep_optimizer:
        return reference_train(model, X, Y, steps, lr, "adam").losses
    first = reference_train(model, X, Y, restart_at, lr, "adam").losses
    return first + reference_train(model, X, Y, steps - restart_at, lr, "adam").losses


def files_of(folder: str | os.PathLike) -> list[dict[str, Any]]:
    """The checkpoint folder's files: name and bytes, sorted by name."""
    return [{"name": p.name, "bytes": p.stat().st_size}
            for p in sorted(Path(folder).iterdir()) if p.is_file()]


def files_text(files: list[dict[str, Any]]) -> str:
    """The folder as a table: one line per file, then the total."""
    lines = [f"{f['name']:<22} {f['bytes']:>8,} B" for f in files]
    lines.append(f"{'total':<22} {sum(f['bytes'] for f in files):>8,} B")
    return "\n".join(lines)


def rows_text(rows_before: list[dict], rows_after: list[dict], name: str = "0.weight") -> str:
    """Which rows of `name` each rank held at each world size."""
    def one(rows: list[dict]) -> str:
        return ", ".join(f"rank {r}: {a}–{b - 1} ({b - a})" if b > a else f"rank {r}: none"
                         for r, (a, b) in enumerate(h[name] for h in rows))
    return (f"{name}, saved at {len(rows_before)} ranks: {one(rows_before)}\n"
            f"{name}, loaded at {len(rows_after)} ranks: {one(rows_after)}")


def torchrun_events(output: str) -> list[dict[str, Any]]:
    """The "@@{...}" lines helpers/scale/restart_script.py printed, in order (two ranks'
    lines may share a line of torchrun's output)."""
    import json
    return [json.loads(m) for m in re.findall(r"@@(\{[^{}]*\})", output)]


def torchrun_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Per attempt: the pid of each rank, the step it started at, the losses (rank 0's)
    and the errors the ranks reported."""
    attempts: dict[int, dict[str, Any]] = {}
    for e in events:
        a = attempts.setdefault(e["attempt"], {"pids": {}, "starts_at": {}, "losses": {},
                                               "errors": {}})
        if "pid" in e:
            a["pids"][e["rank"]] = e["pid"]
            a["starts_at"][e["rank"]] = e["starts_at"]
        elif "error" in e:
            a["errors"][e["rank"]] = {"step": e["step"], "seconds": e["seconds"],
                                      "error": re.sub(r"\[/\S*/", "[", e["error"])}
        elif e["rank"] == 0:
            a["losses"][e["step"]] = e["loss"]
    return {"attempts": [attempts[k] for k in sorted(attempts)]}


# torchrun's agent logs through Python's logging in glog's layout: level and date, time,
# pid, then the source file's path and line, e.g. "W1203 12:55:26.059000 10697 .venv/…/api.py:1028] ".
_AGENT_PREFIX = re.compile(r"^[WEIF]\d{4} [\d:.]+ \d+ \S+:\d+\] ")


def torchrun_lines(output: str) -> list[str]:
    """The lines of torchrun's output worth reading: the script's ("@@"), the workers' last
    error lines, and the agent's records of what it did, each without its log prefix or
    a path of this machine (the interpreter's, the source file's, gloo's build folder)."""
    kept = []
    for line in output.splitlines():
        if not (line.startswith("@@") or "SIGTERM" in line or "exitcode" in line
                or "Error" in line):
            continue
        line = _AGENT_PREFIX.sub("torchrun: ", line)
        line = re.sub(r" of binary: \S+", "", line)
        kept.append(re.sub(r"\[/\S*/", "[", line))
    return kept
