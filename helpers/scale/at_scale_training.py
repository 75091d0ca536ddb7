"""The "At scale (model)" boxes of the training pages, notebooks 15–27 (helpers.scale.at_scale
holds the figures, the models as used and the boxes of 05–14), and `boxes()`, all of them by
notebook number. Every number is a MODEL."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from helpers.bench import nccl_tests
from helpers.fitting.schedules import formula_bubble
from helpers.scale import at_scale, planner
from helpers.scale.algorithms import NAMES, predicted_crossover
from helpers.scale.at_scale import (ALPHA, ALPHA_BETA, HBM, LINKS, MFU, NCCL_TIMEOUT, NET, NODE,
                                    PEAK, PODS, Box, Figure, call, compute_us, fits, grads,
                                    layer_flops_per_token, per_layer, where)
from helpers.scale.planner import LLAMA3_8B, LLAMA3_70B, LLAMA3_405B, Config, Shapes


def box_15() -> Box:
    rows = []
    for shapes in (LLAMA3_8B, LLAMA3_70B):
        for n, link in (NODE, PODS):
            plan = planner.collectives(shapes, Config(dp=n))
            comm = planner.comm_us(plan, fits(link))
            compute = compute_us(planner.step_flops(shapes) / n)
            rows.append((f"{shapes.name}, {where(n, link)}", planner.totals(plan)["model"],
                         comm, compute, comm / compute))
    return Box("15", "DDP's gradient all_reduce per step against the step's compute, "
               "512 sequences of 8,192 tokens a step (memory aside: notebook 16).",
               (("model, GPUs, link", "text"), ("each GPU sends", "bytes"),
                ("all_reduce (model)", "time"), ("compute (model)", "time"),
                ("all_reduce ÷ compute", "share")), tuple(rows), NET + (PEAK, MFU),
               ALPHA_BETA + "; 6 N FLOP a token + attention (`planner.step_flops`)")


def box_16() -> Box:
    rows = []
    for zero in range(4):
        row: tuple[Any, ...] = (planner.STAGE_NAMES[zero],)
        for shapes, n in ((LLAMA3_8B, 8), (LLAMA3_70B, 64)):
            config = Config(dp=n, zero=zero)
            mem = planner.memory(shapes, config)
            row += (mem["parameters"] + mem["gradients"] + mem["optimizer state"],
                    planner.totals(planner.collectives(shapes, config))["model"])
        rows.append(row)
    return Box("16", "Memory per GPU for parameters, gradients and Adam's state (bf16, K = 12), "
               "and the bytes each GPU sends a step, stage by stage; an H100 holds 80 GB.",
               (("stage", "text"), ("Llama-3-8B, 8 GPUs: memory", "bytes"), ("sent", "bytes"),
                ("Llama-3-70B, 64 GPUs: memory", "bytes"), ("sent", "bytes")),
               tuple(rows), (HBM,), "notebook 27's planner (`planner.memory`, the ZeRO "
               "paper's formulas; `planner.collectives`, the ring model)")


def _tp(shapes: Shapes, link: str, sp: bool = False) -> tuple:
    """(calls, bytes sent, µs) of one layer and one 8,192-token sequence under TP 8."""
    config = Config(tp=8, m=shapes.batch, sp=sp)     # micro-batches of one sequence
    return per_layer(planner.collectives(shapes, config), shapes.layers, config.m, {"tp": link})


def box_17() -> Box:
    rows = tuple((f"{s.name}, TP 8 over {link}", int(calls), sent, time,
                  compute_us(layer_flops_per_token(s) * s.seq / 8))
                 for s in (LLAMA3_8B, LLAMA3_70B) for link in LINKS
                 for calls, sent, time in [_tp(s, link)])
    return Box("17", "Tensor parallelism over 8 GPUs, one 8,192-token sequence, per layer: "
               "its all_reduces (forward and backward) inside a node, and if the group "
               "spanned nodes.",
               (("model, group", "text"), ("all_reduces a layer", "count"),
                ("each GPU sends a layer", "bytes"), ("their time (model)", "time"),
                ("the layer's compute (model)", "time")), rows, NET + (PEAK, MFU),
               ALPHA_BETA + "; the planner's TP calls; 6 × the layer's parameters + "
               "attention FLOP a token")


def box_18() -> Box:
    compute = compute_us(planner.step_flops(LLAMA3_70B) / 64)
    rows = []
    for m in (8, 32, 128):
        b8, b16 = formula_bubble("1F1B", 8, m), formula_bubble("1F1B", 16, m)
        rows.append((m, b8, b16, compute / (1 - b16)))
    return Box("18", "The 1F1B bubble (p − 1)/(m + p − 1) at p = 8 and 16 stages, and what "
               "it makes of the compute of a Llama-3-70B step on 64 H100s with 16 stages.",
               (("micro-batches m", "count"), ("bubble, p = 8", "share"),
                ("bubble, p = 16", "share"), ("70B step's compute, p = 16 (model)", "time")),
               tuple(rows), (PEAK, MFU), "the bubble formula (`schedules.formula_bubble`); "
               "`planner.step_flops`")


def box_19() -> Box:
    rows = []
    for shapes in (LLAMA3_8B, LLAMA3_70B):
        config = Config(dp=8, tp=8, m=shapes.batch // 8)
        plan = planner.collectives(shapes, config)
        for tp_link, dp_link in (("NVLink", "InfiniBand"), ("InfiniBand", "NVLink")):
            links = {"tp": tp_link, "dp": dp_link}
            t = {g: sum(r["calls"] * call(r["kind"], r["size"], r["group_size"], links[g])
                        for r in plan if r["group"] == g) for g in links}
            rows.append((shapes.name, f"TP over {tp_link}, DP over {dp_link}", t["tp"],
                         t["dp"], t["tp"] + t["dp"]))
    return Box("19", "64 H100s as an 8 × 8 mesh, TP 8 × DP 8, one step of 512 sequences: "
               "which dimension gets the node's NVLink.",
               (("model", "text"), ("layout", "text"), ("TP time a step", "time"),
                ("DP time a step", "time"), ("together (model)", "time")), tuple(rows),
               NET, ALPHA_BETA + "; the planner's calls (`planner.collectives`)")


def box_20() -> Box:
    rows = tuple((s.name, "TP + SP" if sp else "TP", int(calls), sent, time)
                 for s in (LLAMA3_8B, LLAMA3_70B) for sp in (False, True)
                 for calls, sent, time in [_tp(s, "NVLink", sp)])
    return Box("20", "TP 8 in a node, one 8,192-token sequence, per layer, with torch's plans "
               "as the planner counts them: without SP an all_reduce after each row layer "
               "forward and one per column layer backward; with SP an all_gather and a "
               "reduce_scatter per region (attention, MLP), forward and backward.",
               (("model", "text"), ("scheme", "text"), ("collectives a layer", "count"),
                ("each GPU sends a layer", "bytes"), ("their time (model)", "time")),
               rows, NET, ALPHA_BETA + "; the planner's TP and SP calls")


LONG = 131072


def box_21() -> Box:
    rows = []
    for shapes in (LLAMA3_8B, LLAMA3_70B):
        long = dataclasses.replace(shapes, seq=LONG, batch=1)
        for cp, link in ((8, "NVLink"), (16, "InfiniBand")):
            plan = planner.collectives(long, Config(cp=cp))
            _calls, sent, time = per_layer(plan, long.layers, 1, {"cp": link})
            compute = compute_us(layer_flops_per_token(long, causal=True) * LONG / cp)
            rows.append((f"{shapes.name}, CP {cp} over {link}", plan[0]["size"], sent, time,
                         compute))
    return Box("21", "Ring attention on one sequence of 131,072 tokens: the K/V blocks each "
               "GPU passes on, per layer, against the layer's causal compute they can hide under.",
               (("model, group", "text"), ("K/V block", "bytes"),
                ("each GPU sends a layer", "bytes"), ("their time (model)", "time"),
                ("the layer's compute (model)", "time")), tuple(rows), NET + (PEAK, MFU),
               ALPHA_BETA + "; the planner's CP sends; 6 × the layer's parameters + causal "
               "attention FLOP a token")


def box_22() -> Box:
    rows = []
    for shapes in (LLAMA3_8B, LLAMA3_70B):
        for n, link in (NODE, PODS):
            config = Config(dp=n, ep=n, m=shapes.batch // n)
            plan = [r for r in planner.collectives(shapes, config) if r["group"] == "ep"]
            calls, sent, time = per_layer(plan, shapes.layers, config.m, {"ep": link})
            rows.append((f"{shapes.name}-shaped MoE, EP {n} over {link}", int(calls), sent,
                         time))
    return Box("22", "Expert parallelism with an MoE layer in place of each MLP, one "
               "8,192-token sequence a GPU, each token's activations sent once each way "
               "(top-1; top-k sends k times as much).",
               (("model, group", "text"), ("all_to_alls a layer", "count"),
                ("each GPU sends a layer", "bytes"), ("their time (model)", "time")),
               tuple(rows), NET, ALPHA_BETA + "; the planner's EP calls")


def box_23() -> Box:
    k, rows = 8, []
    for n, link in (NODE, PODS):
        for scheme, element, calls in (("fp32, all_reduce every micro-batch", 4, k),
                                       ("fp32, `no_sync`: once a step", 4, 1),
                                       ("bf16 hook, once a step", 2, 1)):
            size = grads(LLAMA3_8B, element)
            rows.append((where(n, link), scheme,
                         calls * nccl_tests.model_sent("all_reduce", size, n, 0),
                         calls * call("all_reduce", size, n, link)))
    return Box("23", f"Llama-3-8B's gradients, k = {k} accumulated micro-batches a step: "
               "the bytes `no_sync` and a bf16 compression hook save.",
               (("GPUs, link", "text"), ("scheme", "text"), ("each GPU sends a step", "bytes"),
                ("time (model)", "time")), tuple(rows), NET, ALPHA_BETA)


def box_24() -> Box:
    rows = []
    for m in (16, 64):
        for name, v in (("1F1B", 1), ("interleaved", 2), ("ZB-H1", 1)):
            label = f"interleaved, v = {v}" if name == "interleaved" else name
            rows.append((label, m, formula_bubble(name, 8, m, v), formula_bubble(name, 16, m, v)))
    return Box("24", "The bubble of each schedule at p = 8 and 16 stages, by its formula "
               "(equal stage times, free transfers).",
               (("schedule", "text"), ("m", "count"), ("bubble, p = 8", "share"),
                ("bubble, p = 16", "share")), tuple(rows), (),
               "the bubble formulas (`schedules.formula_bubble`)")


def box_25() -> Box:
    rows = []
    for other in ("tree", "double_tree", "halving_doubling"):
        rows.append((f"ring / {NAMES[other]}", *(
            predicted_crossover("ring", other, n, ALPHA.value, LINKS[link].value)
            for n, link in (NODE, PODS))))
    return Box("25", "The size where the ring overtakes each of our hand-built all_reduces "
               "(below it, the other is faster; \"never\": one of them leads at every size).",
               (("pair", "text"), (where(*NODE), "bytes"), (where(*PODS), "bytes")),
               tuple(rows), NET, "notebook 25's crossover (`algorithms.predicted_crossover`)")


def box_26() -> Box:
    rows = []
    for shapes, n in ((LLAMA3_8B, 8), (LLAMA3_70B, 64), (LLAMA3_405B, 1024)):
        whole, mem = (planner.memory(shapes, c) for c in (Config(), Config(dp=n, zero=3)))
        rows.append((shapes.name, n, whole["parameters"] + whole["optimizer state"],
                     mem["parameters"] + mem["optimizer state"]))
    return Box("26", "What a checkpoint of bf16 parameters and Adam's state (K = 12) holds, "
               "and each GPU's shard of it under FSDP; bytes only (the write time is the "
               "storage's).",
               (("model", "text"), ("GPUs", "count"), ("the checkpoint", "bytes"),
                ("each GPU writes", "bytes")), tuple(rows), (),
               "`planner.memory` (the ZeRO paper's formulas, FSDP2's padding)")


def plan_gpu(shapes: Shapes, gpus: int) -> list[dict]:
    """Notebook 27's ranking of configurations on `gpus` H100s (p27-gpu-code's loop): TP
    over NVLink, DP and PP over InfiniBand, full recomputation, ZeRO-1 or 3, micro-batches of
    one sequence; fastest first."""
    options = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8):
            for zero in (1, 3):
                dp = gpus // (tp * pp)
                if dp < 1:
                    continue
                config = Config(dp=dp, tp=tp, pp=pp, m=shapes.batch // dp, zero=zero,
                                sp=tp > 1)
                try:
                    planner.check(shapes, config, gpus)
                except ValueError:
                    continue
                plan = planner.collectives(shapes, config, recompute=True)
                comm = sum(r["calls"] * call(r["kind"], r["size"], r["group_size"],
                                             "NVLink" if r["group"] == "tp" else "InfiniBand")
                           for r in plan)
                compute = (compute_us(planner.step_flops(shapes, recompute=True) / gpus)
                           * (config.m + pp - 1) / config.m)
                mem = sum(planner.memory(shapes, config, recompute=True).values())
                options.append({"config": config.label(), "time_us": compute + comm,
                                "memory": mem, "fits": mem <= HBM.value})
    return sorted(options, key=lambda o: o["time_us"])


def box_27() -> Box:
    rows = []
    for shapes, n in ((LLAMA3_8B, 8), (LLAMA3_70B, 64)):
        best = next(o for o in plan_gpu(shapes, n) if o["fits"])
        rows.append((f"{shapes.name}, {n} H100s", best["config"], best["time_us"],
                     best["memory"]))
    return Box("27", "The planner's fastest configuration that fits in 80 GB, with full "
               "recomputation, 512 sequences of 8,192 tokens a step.",
               (("model, GPUs", "text"), ("configuration", "text"), ("step (model)", "time"),
                ("memory per GPU", "bytes")), tuple(rows), NET + (PEAK, MFU, HBM),
               "notebook 27's planner and notebook 11's α-β over the links, as 27's *GPU "
               "clusters* section runs them")


FR_ENTRIES = Figure("collectives each group's Flight Recorder keeps", 2000, "2,000",
                    "torch 2.13, torch/csrc/distributed/c10d/FlightRecorder.hpp:110, "
                    "`getCvarInt({\"TORCH_FR_BUFFER_SIZE\", \"TORCH_NCCL_TRACE_BUFFER_SIZE\"}, "
                    "2000)`")


def box_28() -> Box:
    rows = tuple((n, n, n * FR_ENTRIES.value, n * NCCL_TIMEOUT.value / 3600)
                 for n in (8, 64, 1024))
    return Box("28", "One rank of the job never calls a collective: every other rank waits "
               "out the timeout, and finding the one that never came means reading one Flight "
               "Recorder dump per rank.",
               (("GPUs", "count"), ("dumps to read", "count"),
                ("entries in them (default group)", "count"),
                ("GPU time lost to the timeout", "hours")),
               rows, (NCCL_TIMEOUT, FR_ENTRIES),
               "none: counts (ranks × the buffer's entries; ranks × the timeout)")


def boxes() -> dict[str, Callable[[], Box]]:
    """Notebook number ("05" … "27") → the function that computes its box."""
    found = {**vars(at_scale), **globals()}
    return {name[4:]: found[name] for name in sorted(found) if name.startswith("box_")}
