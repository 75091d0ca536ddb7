"""The gloo cases of the ledger for notebook 21 (see claim_cases.py for the conventions:
a case runs on every disposable rank as case(rank, world_size); its expectation gets every
rank's outcome and the world size, and fails when torch or gloo behave otherwise)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _returned, case, expect  # noqa: F401

if TYPE_CHECKING:   # a case's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist  # noqa: F401  (the cases use torch only)


@case("21-context-parallel-on-gloo", sizes=(2, 4))
def context_parallel_on_gloo(rank, world_size):
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.experimental import context_parallel
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mesh = init_device_mesh("cpu", (world_size,))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 12, 24, 4, generator=g, dtype=torch.float64) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v)
    size = 24 // (2 * world_size)                     # zig-zag: chunks rank and 2n − 1 − rank
    zigzag = [*range(rank * size, (rank + 1) * size),
              *range((2 * world_size - 1 - rank) * size, (2 * world_size - rank) * size)]
    seen = {}
    bufs = [t.clone() for t in (q, k, v)]
    with CommDebugMode() as comm:
        with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2]):
            seen["my q rows are the zig-zag's"] = torch.equal(bufs[0], q[:, :, zigzag])
            with sdpa_kernel(SDPBackend.MATH):
                out = F.scaled_dot_product_attention(*bufs, is_causal=False)
    seen["MATH, not causal: collectives"] = {str(op): c for op, c in
                                             comm.get_comm_counts().items()}
    seen["MATH, not causal: equals SDPA"] = (out - want[:, :, zigzag]).abs().max().item() < 1e-12
    seen["buffers restored"] = torch.equal(bufs[0], q)
    # causal: torch's own choice of kernel, then each SDPA kernel named; inside
    # context_parallel, and the same call alone on the whole sequence
    import contextlib
    for name in ("default", "FLASH_ATTENTION", "MATH", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION",
                 "OVERRIDEABLE"):
        for where in ("context_parallel", "alone"):
            bufs = [t.clone() for t in (q, k, v)]
            sharded = (context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2])
                       if where == "context_parallel" else contextlib.nullcontext())
            kernel = (sdpa_kernel(getattr(SDPBackend, name)) if name != "default"
                      else contextlib.nullcontext())
            try:
                with sharded, kernel:
                    F.scaled_dot_product_attention(*bufs, is_causal=True)
                seen[f"{name}, causal, {where}"] = "ran"
            except Exception as err:               # each kernel's own error, whatever its type
                seen[f"{name}, causal, {where}"] = (f"{type(err).__name__}: "
                                                    f"{str(err).splitlines()[0]}")
    return seen


@expect("21-context-parallel-on-gloo")
def _(outcomes, n):
    for o in outcomes:
        seen = _returned(o)
        assert seen["my q rows are the zig-zag's"] and seen["buffers restored"], seen
        assert seen["MATH, not causal: collectives"] == {
            "c10d_functional.all_gather_into_tensor": 2}, seen
        assert seen["MATH, not causal: equals SDPA"], seen
        # the CPU's two kernels: both compute causal attention alone, both raise inside
        # context_parallel; torch's own choice is the flash one
        no_strategy = ("NotImplementedError: Operator aten._scaled_dot_product_flash_attention"
                       "_for_cpu.default does not have a sharding strategy registered.")
        for name in ("default", "FLASH_ATTENTION", "MATH"):
            assert seen[f"{name}, causal, alone"] == "ran", seen
        assert seen["default, causal, context_parallel"] == no_strategy, seen
        assert seen["FLASH_ATTENTION, causal, context_parallel"] == no_strategy, seen
        assert seen["MATH, causal, context_parallel"] == (
            "RuntimeError: aten.add.Tensor got mixed torch.Tensor and DTensor, need to convert "
            "all torch.Tensor to DTensor before calling distributed operators!"), seen
        # the memory-efficient, cuDNN and overrideable (PrivateUse1) kernels do not run on the
        # CPU, context_parallel or not: the CPU has the two above
        for name in ("EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "OVERRIDEABLE"):
            for where in ("context_parallel", "alone"):
                assert seen[f"{name}, causal, {where}"].startswith(
                    "RuntimeError: No viable backend for scaled_dot_product_attention"), seen
