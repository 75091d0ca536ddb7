"""The gloo cases of the ledger for notebook 23 (see claim_cases.py for the conventions:
a case runs on every disposable rank as case(rank, world_size); its expectation gets every
rank's outcome and the world size, and fails when torch or gloo behave otherwise)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _returned, case, expect  # noqa: F401

if TYPE_CHECKING:   # a case's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist


@case("23-bf16-refused-by-name", sizes=(2, 4))
def bf16_refused_by_name(rank, world_size):
    """bf16_compress_hook refused at registration on this (CPU-only) build, on gloo; the
    same function under another name registers and runs. `build_accepts` is torch 2.13's
    own condition (DistributedDataParallel._check_comm_hook), evaluated here, and
    `condition_in_source` says that condition is still the one in torch's source."""
    import inspect

    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP
    cuda_supported = (torch.version.cuda is not None) or torch.version.hip is not None
    nccl_supported = (dist.is_available() and dist.is_nccl_available()
                      and torch.cuda.nccl.version() >= (2, 10))
    xpu_xccl_supported = (dist.is_available() and dist.is_xccl_available()
                          and torch.xpu.is_available())
    build_accepts = bool((cuda_supported and nccl_supported) or xpu_xccl_supported)
    check = " ".join(inspect.getsource(DDP._check_comm_hook).split())
    condition_in_source = all(" ".join(part.split()) in check for part in (
        'hook.__name__ in ["bf16_compress_hook", "bf16_compress_wrapper_hook"]',
        "torch.version.cuda is not None ) or torch.version.hip is not None",
        "dist.is_available() and dist.is_nccl_available() "
        "and torch.cuda.nccl.version() >= (2, 10)",
        "dist.is_available() and dist.is_xccl_available() and torch.xpu.is_available()",
        "if not ((cuda_supported and nccl_supported) or xpu_xccl_supported):"))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 3))
    try:
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
        refused = None
    except TypeError as err:
        refused = str(err)

    def renamed(state, bucket):
        return default_hooks.bf16_compress_hook(state, bucket)
    wrapped = DDP(torch.nn.Linear(4, 3))
    wrapped.register_comm_hook(None, renamed)
    torch.manual_seed(rank)
    wrapped(torch.randn(2, 4)).sum().backward()
    grad = wrapped.module.weight.grad.clone()
    gathered = [torch.empty_like(grad) for _ in range(world_size)]
    dist.all_gather(gathered, grad)
    return {"refused": refused, "same": all(torch.equal(g, grad) for g in gathered),
            "backend": dist.get_backend(), "build_accepts": build_accepts,
            "condition_in_source": condition_in_source}


@expect("23-bf16-refused-by-name")
def _(outcomes, n):
    # The notebook's claim is a CPU-only build's: on a CUDA (NCCL 2.10+) or XPU (XCCL)
    # build torch accepts the hook, on gloo too (make gpu-check: bf16-hook-gloo-cuda-build).
    for o in outcomes:
        assert _returned(o) == {
            "refused": "BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+ "
                       "or XPU and XCCL", "same": True, "backend": "gloo",
            "build_accepts": False, "condition_in_source": True}, o.result


@case("23-batched-powersgd-orthogonalize", sizes=(2, 4))
def batched_powersgd_orthogonalize(rank, world_size):
    import traceback

    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    from torch.nn.parallel import DistributedDataParallel as DDP
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(32, 32))
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                               start_powerSGD_iter=2)
    model.register_comm_hook(state, psgd.batched_powerSGD_hook)
    x = torch.randn(4, 32)
    for p in range(3):
        model.zero_grad()
        try:
            model(x).sum().backward()
        except AssertionError as err:
            frames = traceback.extract_tb(err.__traceback__)
            return {"pass": p, "in": frames[-1].name, "from": frames[-2].name}
    return "ran"


@expect("23-batched-powersgd-orthogonalize")
def _(outcomes, n):
    for o in outcomes:
        assert _returned(o) == {"pass": 2, "in": "_orthogonalize",
                                "from": "batched_powerSGD_hook"}, o.result


@case("23-reentrant-needs-grad", sizes=(2, 4))
def reentrant_needs_grad(rank, world_size):
    import warnings

    from torch.utils.checkpoint import checkpoint
    layer = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = checkpoint(layer, x, use_reentrant=True)
    try:
        out.sum().backward()
        error = None
    except RuntimeError as err:
        error = str(err)
    ok = checkpoint(layer, x.requires_grad_(True), use_reentrant=True)
    ok.sum().backward()
    non_reentrant = checkpoint(torch.nn.Linear(4, 4), torch.randn(2, 4), use_reentrant=False)
    return {"warned": [str(w.message) for w in caught], "error": error,
            "with_grad": layer.weight.grad is not None,
            "non_reentrant_grad": non_reentrant.requires_grad}


@expect("23-reentrant-needs-grad")
def _(outcomes, n):
    for o in outcomes:
        assert _returned(o) == {
            "warned": ["None of the inputs have requires_grad=True. Gradients will be None"],
            "error": "element 0 of tensors does not require grad and does not have a grad_fn",
            "with_grad": True, "non_reentrant_grad": True}, o.result
