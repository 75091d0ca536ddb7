"""The gloo cases of the ledger for notebook 24 (see claim_cases.py for the conventions:
a case runs on every disposable rank as case(rank, world_size); its expectation gets every
rank's outcome and the world size, and fails when torch or gloo behave otherwise)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from claim_cases import _returned, case, expect  # noqa: F401

if TYPE_CHECKING:   # a case's `torch` is the disposable rank's own global
    import torch


@case("24-torch-multi-stage-schedules", sizes=(2, 4))
def torch_multi_stage_schedules(rank, world_size):
    """torch's four multi-stage schedules on 2p one-layer stages, m = 2p: the order each
    runs on this rank (F, B, I, W per stage.micro-batch), the most stage inputs held for a
    backward, and the gradients against the unsplit model."""
    import torch.distributed.pipelining as pipelining
    from helpers.fitting.schedules import (TORCH_SCHEDULES, V_SHAPED, Spans, compute_order,
                                           record_stages, stages_of_rank)
    p, n = world_size, 2 * world_size
    torch.manual_seed(0)
    x, y = torch.randn(4 * n, 8, dtype=torch.float64), torch.randn(4 * n, 8,
                                                                    dtype=torch.float64)
    loss_fn = torch.nn.functional.mse_loss

    def model():
        torch.manual_seed(1)
        return [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).double()
                for _ in range(n)]

    whole = torch.nn.Sequential(*model())
    loss_fn(whole(x), y).backward()
    seen = {}
    for name in TORCH_SCHEDULES:
        every = model()
        mine = stages_of_rank(rank, p, 2, "V" if name in V_SHAPED else "loop")
        stages = [pipelining.PipelineStage(every[s], s, n, torch.device("cpu")) for s in mine]
        schedule = getattr(pipelining, name)(stages, n_microbatches=n, loss_fn=loss_fn)
        spans = Spans()
        with record_stages(stages, spans) as held:
            schedule.step(*((x,) if 0 in mine else ()),
                          **({"target": y} if n - 1 in mine else {}))
        diff = max((a.grad - b.grad).abs().max().item() for s in mine
                   for a, b in zip(every[s].parameters(), whole[s].parameters()))
        seen[name] = {"order": compute_order(spans.events), "peak": max(held),
                      "stages": mine, "grad_diff": diff}
    return seen


@expect("24-torch-multi-stage-schedules")
def _(outcomes, n):
    p, m = n, 2 * n
    for o in outcomes:
        seen, r = _returned(o), o.rank
        for name, got in seen.items():
            assert got["grad_diff"] < 1e-12, (name, got["grad_diff"])
            order = got["order"]
            kinds = [a[0] for a in order]
            assert kinds.count("F") == 2 * m and kinds.count("B") + kinds.count("I") == 2 * m
            assert kinds.count("I") == kinds.count("W")
            first_back = next(k for k, a in enumerate(order) if a[0] in "BI")
            if name == "ScheduleInterleaved1F1B":
                assert got["stages"] == [r, r + p]
                assert kinds.count("I") == 0
                warm = 2 * (p - r - 1) + p + 1
                assert first_back == warm, (r, order)
                steady = order[warm - 1:warm - 1 + 2 * (2 * m - warm)]
                assert [a[0] for a in steady] == ["F", "B"] * (2 * m - warm)
                assert got["peak"] == warm
            elif name == "ScheduleInterleavedZeroBubble":
                assert got["stages"] == [r, r + p]
                assert kinds.count("B") == 0 and first_back == 2 * p - r, (r, order)
                assert got["peak"] == 2 * p
            elif name == "ScheduleZBVZeroBubble":
                assert got["stages"] == [r, 2 * p - 1 - r]
                assert kinds.count("B") == 0 and first_back == 2 * p, (r, order)
                assert order[first_back] == f"I{2 * p - 1 - r}.0"
                assert got["peak"] == 2 * p
            else:                                          # ScheduleDualPipeV
                assert got["stages"] == [r, 2 * p - 1 - r]
                assert first_back == 2 * p + (r == p - 1), (r, order)
                assert kinds.count("B") > kinds.count("I") > 0
                b_at = [k for k, a in enumerate(kinds) if a == "B"]
                assert kinds[-1] == "W" and "B" not in kinds[b_at[-1] + 1:]
                assert set(kinds[b_at[-1] + 1:]) == {"I", "W"}
                assert got["peak"] == 2 * p + 1
