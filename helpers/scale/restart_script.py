"""The training script of notebook 26 for `torchrun --max-restarts` (one process per rank).

    python -m torch.distributed.run --standalone --nproc-per-node 2 --max-restarts 2 \\
        -m helpers.scale.restart_script FOLDER

Trains the FSDP2 toy of helpers.scale.checkpoints for TOTAL_STEPS steps with Adam, saving a
DCP checkpoint in FOLDER after its first SAVE_AT steps; on the first attempt only
(TORCHELASTIC_RESTART_COUNT = 0) the last rank ends its process in the middle of step
KILL_AT. Every attempt starts from the checkpoint when there is one. Each line it prints
starts with "@@" so that the notebook can read it back from torchrun's output.
"""
from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.rendezvous import rendezvous

from helpers.scale import checkpoints as ck
from helpers.training.toy import loss_fn

TIMEOUT_S = 30   # generous: a restart on a busy machine is slow; a dead peer is seen at once


def say(**fields: object) -> None:
    print("@@" + json.dumps(fields), flush=True)


def main(folder: str) -> None:
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    timeout = timedelta(seconds=TIMEOUT_S)
    # torchrun's env:// store, with this attempt's own keys. The store is the agent's and
    # outlives a restart (torch/distributed/rendezvous.py, _create_c10d_store: a client of
    # the agent's store when TORCHELASTIC_USE_AGENT_STORE), and init_process_group's keys
    # carry no attempt number: without the prefix a restarted rank can read a dead peer's
    # address and fail with "Gloo connectFullMesh failed ... Connection refused".
    store, rank, world_size = next(rendezvous("env://", timeout=timeout))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt-{attempt}", store),
                            rank=rank, world_size=world_size, timeout=timeout)
    mesh = init_device_mesh("cpu", (world_size,))
    model, optimizer = ck.make_sharded(mesh)
    x, y = ck.batch_of(rank, world_size)
    saved = Path(folder) / f"step{ck.SAVE_AT}"
    first = 0
    if (saved / ".metadata").exists():
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(saved))
        set_state_dict(model, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        first = ck.SAVE_AT
    say(attempt=attempt, rank=rank, pid=os.getpid(), starts_at=first)
    step, start = first, time.monotonic()
    try:
        for step in range(first, ck.TOTAL_STEPS):
            start = time.monotonic()
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            if attempt == 0 and step == ck.KILL_AT and rank == world_size - 1:
                os._exit(1)
            loss.backward()
            optimizer.step()
            whole = loss.detach().clone()
            dist.all_reduce(whole, op=dist.ReduceOp.AVG)
            say(attempt=attempt, rank=rank, step=step, loss=whole.item())
            if step + 1 == ck.SAVE_AT:
                model_sd, optim_sd = get_state_dict(model, optimizer)
                dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(saved))
    except RuntimeError as err:
        say(attempt=attempt, rank=rank, step=step, error=str(err).split(". This is")[0],
            seconds=time.monotonic() - start)
        raise
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
