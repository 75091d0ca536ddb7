"""The figures of notebooks 19 and 20 that replace their byte tables and plan: each draws the
values it was given (bar heights, boxes, markers, lines), and reads on the page (audit)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from helpers.figures.audit import audit  # noqa: E402
from helpers.training import two_d, two_d_figures  # noqa: E402
from helpers.training.sent_figures import plot_sent  # noqa: E402
from helpers.transformer import sequence_parallel_plots as plots  # noqa: E402


def _by_gid(fig) -> dict:
    return {a.get_gid(): a for ax in fig.axes for a in ax.get_children() if a.get_gid()}


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_plot_sent_draws_the_model_and_each_ranks_bytes():
    fig = plot_sent(["a", "b"], [100.0, 40.0], [[150, 70], [150, 71]], "t")
    bars = _by_gid(fig)
    assert bars["model:0"].get_height() == 100 and bars["model:1"].get_height() == 40
    assert [bars[f"measured:1:{r}"].get_height() for r in (0, 1)] == [70, 71]
    texts = _texts(fig)
    assert "150 B" in texts          # every rank measured the same: said once
    assert "70 B" not in texts and "71 B" not in texts    # they differ: no single value
    assert not audit(fig).problems()


def test_plot_sent_without_measured_bytes_draws_the_model_only():
    fig = plot_sent(["a"], [12_000.0], [[None], [None]], "nccl")
    bars = _by_gid(fig)
    assert "model:0" in bars and not any(k.startswith("measured") for k in bars)
    assert "12.0 kB" in _texts(fig)
    with pytest.raises(ValueError):
        plot_sent(["a", "b"], [1.0], [[1, 2]], "one model value short")


def _executed(rank: int, measured: list[int]) -> list[dict]:
    plan = two_d.planned_step(rank, 2, 2, batch=48)
    return [{**c, "model": float(c["size"]), "measured": m} for c, m in zip(plan, measured)]


def test_plan_boxes_and_step_bytes_hold_every_ranks_calls():
    plans = [two_d.planned_step(r, 2, 2, batch=48) for r in range(4)]
    gids = _by_gid(two_d_figures.plot_plan(plans, "plan"))
    assert "plan:3:0:all_reduce:768" in gids and "plan:2:1:all_reduce:256" in gids
    assert len([g for g in gids if g.startswith("plan:")]) == 20
    states = [{"rank": r, "executed": _executed(r, [1344, 832, 608, 704, 608 + r])}
              for r in range(4)]
    bars = _by_gid(two_d_figures.plot_step_bytes(states, "bytes"))
    assert bars["model:0"].get_height() == 768
    assert bars["measured:4:3"].get_height() == 611
    states[1]["executed"][0]["model"] = 1.0
    with pytest.raises(ValueError):          # a model that differs between ranks: refused
        two_d_figures.plot_step_bytes(states, "bytes")


def test_group_bytes_puts_hand_and_torch_side_by_side():
    hand = [{"tp": {"calls": 1, "model": 768.0}, "dp": {"calls": 4, "model": 448.0}}] * 2
    torch_calls = [{"tp": {"calls": 1, "model": 768.0}, "dp": {"calls": 2, "model": 448.0}}] * 2
    sent_hand = [{"tp": 1344, "dp": 2752, "other": 0}] * 2
    sent_torch = [{"tp": 1344, "dp": 1536, "other": 0}, None]
    fig = two_d_figures.plot_group_bytes(hand, torch_calls, sent_hand, sent_torch, "g")
    bars = _by_gid(fig)
    assert [bars[f"model:{g}"].get_height() for g in range(4)] == [768, 768, 448, 448]
    assert bars["measured:2:0"].get_height() == 2752
    assert bars["measured:3:0"].get_height() == 1536 and "measured:3:1" not in bars
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[2] == "column (dp): by hand\n4 calls" and labels[3].endswith("2 calls")


def test_losses_draw_every_rank_their_mean_and_the_reference():
    states = [{"rank": r, "dp_rank": r // 2, "tp_rank": r % 2,
               "losses": [0.5 - 0.01 * s + 0.1 * (r // 2) for s in range(3)]} for r in range(4)]
    ref = [0.55, 0.54, 0.53]
    fig = two_d_figures.plot_losses(states, ref, "losses")
    lines = _by_gid(fig)
    assert list(lines["loss:3"].get_ydata()) == states[3]["losses"]
    assert np.allclose(lines["loss:mean"].get_ydata(), [0.55, 0.54, 0.53])
    assert list(lines["loss:reference"].get_ydata()) == ref
    assert not audit(fig).problems()


def test_traffic_and_torch_figures_read_the_log_rows():
    def row(layer, phase, collectives, measured):
        return {"layer": layer, "phase": phase, "calls": 2, "model": 10.0,
                "measured": measured, "collectives": collectives}

    rows = [[row("TP", "forward", {"all_reduce": {"calls": 2, "size": 8, "model": 10.0,
                                                  "measured": 20 + r}}, 20 + r),
             row("TP + SP", "forward", {"all_gather_single": {"calls": 2, "size": 8,
                                                              "model": 5.0, "measured": 9},
                                        "reduce_scatter_single": {"calls": 2, "size": 8,
                                                                  "model": 5.0,
                                                                  "measured": 18}}, 27)]
            for r in range(2)]
    fig = plots.plot_traffic(rows, "t")
    bars = _by_gid(fig)
    assert [bars[f"model:{g}"].get_height() for g in range(3)] == [10, 5, 5]
    assert bars["measured:0:1"].get_height() == 21 and bars["measured:2:0"].get_height() == 18
    assert fig.axes[0].get_xticklabels()[2].get_text() == "TP + SP\nforward\n2× reduce_scatter"
    torch_rows = [[{"layer": "parallelize_module", "phase": "forward", "calls": 2,
                    "model": 10.0, "measured": 30}] for _ in range(2)]
    bars = _by_gid(plots.plot_torch_vs_hand(rows, torch_rows, "t"))
    assert bars["measured:0:0"].get_height() == 27 and bars["measured:1:1"].get_height() == 30


def test_grad_gaps_mark_every_rank_before_and_after():
    before = [{"ln1.weight": 2e-2, "q.weight": 1e-18}, {"ln1.weight": 3e-2, "q.weight": 0.0}]
    after = [{"ln1.weight": 1e-17, "q.weight": 1e-18}] * 2
    fig = plots.plot_grad_gaps(before, after, ("ln1.weight",), 1e-12, "gaps")
    points = _by_gid(fig)
    left = points["gap:as they stand, before the sum:1"].get_offsets()
    assert list(left[:, 0]) == [3e-2, plots.FLOOR]          # 0 drawn at the floor
    names = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert names == ["ln1.weight", "q.weight"]
    assert not audit(fig).problems()


def test_call_order_boxes_every_call_of_every_rank_in_order():
    ar, ag, rs = "all_reduce", "all_gather_single", "reduce_scatter_single"
    orders = [{"TP forward": [ar, ar], "TP + SP forward": [ag, rs], "TP + SP grad sync": [ar]},
              {"TP forward": [ar], "TP + SP forward": [ag, rs, ag], "TP + SP grad sync": []}]
    gids = [g for g in _by_gid(plots.plot_call_order(orders, "calls")) if g.startswith("call:")]
    assert sorted(gids) == sorted(
        ["call:0:TP:forward:0:all_reduce", "call:0:TP:forward:1:all_reduce",
         "call:0:TP + SP:forward:0:all_gather_single",
         "call:0:TP + SP:forward:1:reduce_scatter_single",
         "call:0:TP + SP:grad sync:0:all_reduce", "call:1:TP:forward:0:all_reduce",
         "call:1:TP + SP:forward:0:all_gather_single",
         "call:1:TP + SP:forward:1:reduce_scatter_single",
         "call:1:TP + SP:forward:2:all_gather_single"])


def test_wrong_group_and_wrong_heads_plot_each_ranks_values():
    import torch

    states = [{"rank": r, "right": [torch.tensor([2.0, 4.0])], "wrong": [torch.tensor([4.0, r])]}
              for r in range(2)]
    lines = _by_gid(two_d_figures.plot_wrong_group(states, 2, 4, "wrong group"))
    assert list(lines["wrong:1"].get_xdata()) == [1.0, 2.0]      # over the column: / dp
    assert list(lines["wrong:1"].get_ydata()) == [1.0, 0.25]     # over every rank: / 4
    heads = [{"torch_output": [[1.0, 2.0]], "wrong_output": [[1.5, 2.5]]},
             {"torch_output": [[1.0, 2.0]], "wrong_output": None}]
    fig = plots.plot_wrong_heads(heads, "heads")
    points = _by_gid(fig)
    assert list(points["heads:0"].get_xdata()) == [1.0, 2.0] and "heads:1" not in points
    assert list(points["heads:0"].get_ydata()) == [0.5, 0.5]     # the error: wrong − right
    assert "RuntimeError:\nno output" in _texts(fig)


def test_bench_pairs_stack_each_ranks_parts(monkeypatch):
    from helpers.bench import quote

    parts = {"compute": 10.0, "communication": 30.0, "waiting": 5.0}
    row = {"breakdown_per_rank": {"hand": [parts, {**parts, "waiting": 7.0}],
                                  "torch": [parts, parts]},
           "step_ms": {"hand": 40.0, "torch": 50.0}, "ratio": 0.8}
    monkeypatch.setattr(quote, "training_row", lambda name: (row, {}, None))
    bars = _by_gid(plots.plot_bench_pairs(["p"], "bench"))
    assert bars["p:hand:1:waiting"].get_width() == 7.0
    assert bars["p:hand:1:waiting"].get_x() == 40.0            # after compute + communication

    def missing(name):
        raise LookupError(name)

    monkeypatch.setattr(quote, "training_row", missing)
    assert plots.plot_bench_pairs(["p"], "bench") is None
