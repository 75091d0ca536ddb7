"""The command line of a `torchrun --standalone` job, one way for every caller.

    command = torchrun_command(4, "-m", "helpers.bench", "--json", log_dir=folder / "logs")

`--log-dir` is always given: left without one, torchrun makes a new `/tmp/torchelastic_*`
folder for every run and never removes it (torch/distributed/elastic/multiprocessing/api.py,
`DefaultLogsSpecs`: `tempfile.mkdtemp(prefix="torchelastic_")`). The caller owns `log_dir`
and removes it with the rest of its folder.
"""
from __future__ import annotations

import sys
from pathlib import Path


def torchrun_command(nproc: int, *args: str, log_dir: str | Path) -> list[str]:
    """`python -m torch.distributed.run --standalone` on `nproc` processes of this machine,
    then `args` (a script and its arguments, or "-m" and a module), its logs in `log_dir`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", "--log-dir", str(log_dir), *args]
