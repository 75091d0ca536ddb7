"""What a start cell asks for, checked before any process starts.

Every setting comes from the start cell's argument, else an environment variable,
else a default that fits the machine. A bad value is an error naming it.

| setting   | argument    | environment          | default                          |
|-----------|-------------|----------------------|----------------------------------|
| ranks     | n_ranks     | TUTORIAL_RANKS       | one per GPU (2+ GPUs), else 4    |
| backend   | backend     | TUTORIAL_BACKEND     | auto: nccl with a GPU per rank   |
| limit     |             | TUTORIAL_MAX_RANKS   | 16                               |
| timeout   | timeout_s   | TUTORIAL_TIMEOUT     | 60 s per collective              |
| checks    | debug       | TUTORIAL_DEBUG       | off (detail: torch's DETAIL)     |

The yes/no settings (TUTORIAL_WARM_START, TUTORIAL_OFFLINE) are read by `on_off`: a value
that is neither yes nor no is an error, not a silent "off".
"""
from __future__ import annotations

import os

BACKENDS = ("auto", "nccl", "gloo")
DEBUG_MODES = ("detail", "off")
DEFAULT_CPU_RANKS = 4
DEFAULT_MAX_RANKS = 16
DEFAULT_TIMEOUT_S = 60.0
ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


class ClusterConfigError(ValueError):
    """The requested ranks/backend cannot run on this machine."""


def on_off(name: str) -> bool:
    """A yes/no setting from the environment: 1/true/yes/on, 0/false/no/off, unset = no."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value in ON:
        return True
    if not value or value in OFF:
        return False
    raise ClusterConfigError(
        f"{name} must be 1 or 0 (or true/false, yes/no, on/off), not {raw!r}")


# What a GPU driver torch could use leaves behind: NVIDIA's kernel module, ROCm's
# compute device, WSL2's GPU device. Without any of them torch sees no GPU.
GPU_DRIVER_PATHS = ("/proc/driver/nvidia", "/dev/kfd", "/dev/dxg")


def visible_gpu_count() -> int:
    """GPUs torch can see from this process (0 without CUDA).

    Without a GPU driver the answer is 0 without importing torch (1.5 s on 2 cores,
    the start cell's to pay before any engine starts).
    """
    if not any(os.path.exists(path) for path in GPU_DRIVER_PATHS):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def max_ranks() -> int:
    """The most ranks one start cell may ask for (TUTORIAL_MAX_RANKS, default 16)."""
    raw = os.environ.get("TUTORIAL_MAX_RANKS", "").strip()
    if not raw:
        return DEFAULT_MAX_RANKS
    if not raw.isdigit() or int(raw) < 1:
        raise ClusterConfigError(
            f"TUTORIAL_MAX_RANKS must be a positive whole number, not {raw!r}")
    return int(raw)


def _ranks_from_environment() -> int | None:
    raw = os.environ.get("TUTORIAL_RANKS", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ClusterConfigError(f"TUTORIAL_RANKS must be a positive whole number, not {raw!r}")
    return int(raw)


def resolve_config(n_ranks: int | None = None, backend: str | None = None,
                   gpu_count: int | None = None, multi_node: bool = False) -> tuple[int, str]:
    """Decide (world size, backend) from arguments, then environment, then hardware.

    Arguments win over TUTORIAL_RANKS / TUTORIAL_BACKEND. `auto` means NCCL when
    every rank gets a GPU of its own, gloo on CPU otherwise. With `multi_node`
    (Slurm) the GPUs are on other machines: nothing is counted here.
    """
    backend = (backend or os.environ.get("TUTORIAL_BACKEND") or "auto").strip().lower()
    if backend not in BACKENDS:
        raise ClusterConfigError(
            f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if n_ranks is None:
        n_ranks = _ranks_from_environment()
    if multi_node:
        gpus = n_ranks if n_ranks is not None else 0
    else:
        gpus = visible_gpu_count() if gpu_count is None else gpu_count
    if n_ranks is None:
        if backend == "nccl" or (backend == "auto" and gpus >= 2):
            n_ranks = gpus
        else:
            n_ranks = DEFAULT_CPU_RANKS
    if isinstance(n_ranks, bool) or not isinstance(n_ranks, int) or n_ranks < 1:
        raise ClusterConfigError(f"n_ranks must be a positive whole number, not {n_ranks!r}")
    limit = max_ranks()
    if n_ranks > limit:
        raise ClusterConfigError(
            f"{n_ranks} ranks were asked for, more than the limit of {limit} on this machine "
            "(each rank is a process). Ask for fewer, or raise TUTORIAL_MAX_RANKS.")
    if backend == "auto":
        backend = "nccl" if gpus >= n_ranks else "gloo"
    if backend == "nccl" and gpus < n_ranks:
        raise ClusterConfigError(
            f"backend 'nccl' needs one GPU per rank: {n_ranks} rank(s) were asked for "
            f"but this machine has {gpus} GPU(s). Ask for at most {gpus} rank(s) "
            "(n_ranks=... or TUTORIAL_RANKS), or use backend='gloo' "
            "(TUTORIAL_BACKEND=gloo) to run the ranks on the CPU."
            if gpus else
            f"backend 'nccl' needs one GPU per rank: {n_ranks} rank(s) were asked for "
            "but this machine has no GPU. Use backend='gloo' (TUTORIAL_BACKEND=gloo) "
            "to run the ranks on the CPU.")
    return n_ranks, backend


def resolve_timeout(timeout_s: float | None) -> float:
    """The collective timeout: the argument, else TUTORIAL_TIMEOUT, else 60 s."""
    if timeout_s is None:
        raw = os.environ.get("TUTORIAL_TIMEOUT", "").strip()
        try:
            timeout_s = float(raw) if raw else DEFAULT_TIMEOUT_S
        except ValueError:
            raise ClusterConfigError(
                f"TUTORIAL_TIMEOUT must be a number of seconds, not {raw!r}") from None
    if not timeout_s > 0:
        raise ClusterConfigError(f"the collective timeout must be positive, not {timeout_s!r}")
    return float(timeout_s)


def resolve_debug(debug: str | None) -> str:
    """"off" (as in a torchrun job) or "detail" (torch checks every collective's
    arguments across ranks first: TORCH_DISTRIBUTED_DEBUG=DETAIL)."""
    mode = (debug or os.environ.get("TUTORIAL_DEBUG") or "off").strip().lower()
    if mode not in DEBUG_MODES:
        raise ClusterConfigError(f"debug must be one of {', '.join(DEBUG_MODES)}, not {mode!r}")
    return mode
