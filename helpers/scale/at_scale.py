"""The "At scale (model)" box of notebooks 05–27: what each page's scheme costs on a cluster
of H100s, computed only by the series' own models from published hardware figures.

    box = box_14()                 # a Box: its columns, raw rows, the figures it used
    box.table()                    # the rows as a markdown table

The boxes of the training pages (15–27), and `boxes()`, every page's box by its
notebook's number, are in helpers.scale.at_scale_training.

Every number is a MODEL: notebook 11's α-β (`planner.call_us` on `planner.link_fits`), the
ring model of `nccl_tests.model_sent`, notebook 27's planner (collectives, memory, FLOP),
notebook 25's crossover and notebook 24's bubble formulas. Nothing here is timed.
`tools.at_scale` writes each box into its notebook.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from helpers.bench import nccl_tests
from helpers.scale import planner
from helpers.scale.planner import LLAMA3_8B, LLAMA3_70B, Shapes


@dataclass(frozen=True)
class Figure:
    """A hardware or software figure the boxes use, as the box shows it, and its source."""
    name: str
    value: float               # in the unit the models take (GB/s, µs, FLOP/s, B, s, share)
    shown: str
    source: str
    assumed: bool = False      # our assumption (labelled as such), not a published figure


NVLINK = Figure("NVLink 4, each way per H100", 450.0, "450 GB/s",
                "NVIDIA's Hopper architecture page, 900 GB/s bidirectional per GPU, halved "
                "(<https://www.nvidia.com/en-sg/technologies/hopper-architecture/>)")
INFINIBAND = Figure("InfiniBand NDR, one port per GPU", 50.0, "50 GB/s",
                    "400 Gb/s a port, NVIDIA's QM97xx Quantum-2 switch manual "
                    "(<https://docs.nvidia.com/networking/display/QM97X0PUB/Interfaces>); one "
                    "port per GPU is our assumption")
ALPHA = Figure("α, the cost of one step", 5.0, "5 µs", "our assumption, as notebook 27's",
               assumed=True)
PEAK = Figure("H100 SXM dense BF16", 989e12, "989 TFLOP/s",
              "NVIDIA's H100 datasheet, BF16 Tensor Core 1,979 TFLOPS with sparsity, half "
              "without (<https://www.nvidia.com/en-us/data-center/h100/>, Specifications)")
MFU = Figure("the share of that peak reached", 0.4, "40 %", "our assumption, as notebook 27's",
             assumed=True)
HBM = Figure("H100 SXM memory", 80e9, "80 GB",
             "NVIDIA's H100 datasheet (<https://www.nvidia.com/en-us/data-center/h100/>)")
NCCL_TIMEOUT = Figure("torch's default NCCL timeout", 600.0, "10 min",
                      "torch 2.13, torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp:157, "
                      "`kProcessGroupNCCLDefaultTimeout = std::chrono::milliseconds(10 * 60 * "
                      "1000)`, which `_get_default_timeout` in distributed_c10d.py returns "
                      "for NCCL")
LINKS = {"NVLink": NVLINK, "InfiniBand": INFINIBAND}
NODE, PODS = (8, "NVLink"), (64, "InfiniBand")     # a node of 8; 64 across 8 nodes
GiB, MiB = 1 << 30, 1 << 20


@dataclass(frozen=True)
class Box:
    """One page's box: columns (header, kind), raw rows, the figures and models it used."""
    stem: str
    intro: str
    columns: tuple[tuple[str, str], ...]
    rows: tuple[tuple[Any, ...], ...]
    figures: tuple[Figure, ...]
    model: str

    def table(self) -> str:
        """The rows as a markdown table, each value formatted by its column's kind."""
        head = "| " + " | ".join(h for h, _ in self.columns) + " |"
        rule = "|" + "|".join(":--" if k == "text" else "--:" for _, k in self.columns) + "|"
        body = ["| " + " | ".join(fmt(v, k) for v, (_, k) in zip(row, self.columns)) + " |"
                for row in self.rows]
        return "\n".join([head, rule, *body])


def fmt(value: Any, kind: str) -> str:
    """A value as the box prints it: text, bytes (B, kB, MB, GB, TB; 10³), time (from µs),
    share, GB/s, GPU-hours, a count or a ratio."""
    if value is None:
        return "never"
    if kind == "text":
        return str(value)
    value = float(f"{value:.3g}") if kind in ("bytes", "time") else value
    if kind == "bytes":
        for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if value >= scale:
                return f"{value / scale:.3g} {unit}"
        return f"{value:.3g} B"
    if kind == "time":
        for unit, scale in (("s", 1e6), ("ms", 1e3)):
            if value >= scale:
                return f"{value / scale:.3g} {unit}"
        return f"{value:.3g} µs"
    if kind == "share":
        return f"{value:.1%}"
    if kind == "gbps":
        return f"{value:.3g} GB/s"
    if kind == "hours":
        return f"{value:.3g} GPU-h"
    if kind == "count":
        return f"{value:,}"
    if kind == "ratio":
        return f"{value:.2f} ×"
    raise ValueError(f"unknown column kind {kind!r}")


# ---------------------------------------------------------------- the models, as used here

def fits(link: str) -> dict:
    """notebook 11's ring α-β models of every collective over `link` (NVLink / InfiniBand)."""
    return planner.link_fits(ALPHA.value, LINKS[link].value)


def call(kind: str, size: float, n: int, link: str) -> float:
    """µs of one call of S = size bytes on n GPUs over `link` (`planner.call_us`)."""
    return planner.call_us(fits(link), kind, size, n)


def where(n: int, link: str) -> str:
    return f"{n} H100s, {link}"


def grads(shapes: Shapes, element_bytes: int = 2) -> float:
    """Bytes of a model's gradients (one per parameter)."""
    return shapes.parameters() * element_bytes


def compute_us(flops: float) -> float:
    """µs a GPU spends on `flops` at MFU × the H100's peak (a model)."""
    return flops / (MFU.value * PEAK.value) * 1e6


def layer_flops_per_token(shapes: Shapes, causal: bool = False) -> float:
    """FLOP one token costs in ONE layer, forward and backward: 6 × the layer's parameters
    plus attention's share (`planner.attention_flops_per_token` / layers)."""
    per_layer = sum(math.prod(s) for s in shapes.layer_shapes())
    return 6 * per_layer + planner.attention_flops_per_token(shapes, causal) / shapes.layers


def per_layer(rows: list[dict], layers: int, m: int, links: dict[str, str]) -> tuple:
    """(calls, bytes sent, µs) of one layer and micro-batch, from a planner plan whose
    groups run over `links` ({group: link})."""
    calls = sum(r["calls"] for r in rows) / (layers * m)
    sent = sum(r["model"] for r in rows) / (layers * m)
    time = sum(r["calls"] * call(r["kind"], r["size"], r["group_size"], links[r["group"]])
               for r in rows) / (layers * m)
    return calls, sent, time


COLLECTIVE = (("tensor (S)", "text"), ("GPUs, link", "text"), ("each GPU sends", "bytes"),
              ("time (model)", "time"))
NET = (NVLINK, INFINIBAND, ALPHA)
ALPHA_BETA = "notebook 11's α-β (`planner.call_us`), the ring model (`nccl_tests.model_sent`)"


# ---------------------------------------------------------------- one box per page

def _collective(stem: str, kind: str, payloads: list[tuple[str, float]], intro: str) -> Box:
    ratio = kind in ("all_gather", "reduce_scatter")
    rows = []
    for label, size in payloads:
        for n, link in (NODE, PODS):
            t = call(kind, size, n, link)
            row = (label, where(n, link), nccl_tests.model_sent(kind, size, n, 0), t)
            rows.append(row + ((t / call("all_reduce", size, n, link),) if ratio else ()))
    cols = COLLECTIVE + ((("÷ all_reduce's time", "ratio"),) if ratio else ())
    return Box(stem, intro, cols, tuple(rows), NET, ALPHA_BETA)


def box_05() -> Box:
    return _collective("05", "all_reduce", [("1 GiB", GiB), (
        "Llama-3-8B's bf16 gradients", grads(LLAMA3_8B))],
        "One `all_reduce` in a node of 8 H100s over NVLink, and on 64 H100s in 8 nodes, "
        "the ring priced at its slowest link, InfiniBand.")


def box_06() -> Box:
    return _collective("06", "all_gather", [("1 GiB", GiB), (
        "Llama-3-8B's bf16 parameters, gathered", grads(LLAMA3_8B))],
        "One `all_gather` (S: the gathered output) in a node of 8 H100s and on 64 across "
        "nodes: each GPU sends half of what an `all_reduce` of S sends.")


def box_07() -> Box:
    return _collective("07", "reduce_scatter", [("1 GiB", GiB), (
        "Llama-3-8B's bf16 gradients", grads(LLAMA3_8B))],
        "One `reduce_scatter` (S: each GPU's whole input) in a node of 8 H100s and on 64 "
        "across nodes: half of an `all_reduce`, the other half being the `all_gather`.")


def box_08() -> Box:
    act = 8192 * LLAMA3_70B.hidden * 2
    return _collective("08", "all_to_all", [("1 GiB", GiB), (
        "one 8,192-token sequence of Llama-3-70B bf16 activations", act)],
        "One `all_to_all` (S: each GPU's whole input, n pieces) in a node of 8 H100s and "
        "on 64 across nodes; its time modelled as an `all_gather`'s (`planner.call_us`).")


def box_09() -> Box:
    rows = []
    for shapes in (LLAMA3_8B, LLAMA3_70B):
        act = shapes.seq * shapes.hidden * shapes.element_bytes
        for link in LINKS:
            rows.append((f"{shapes.name}, one sequence", link, act, call("send", act, 2, link)))
    return Box("09", "One `send` of a pipeline stage's bf16 output activations (one "
               "8,192-token sequence) to the next stage: in the same node, and to another node.",
               (("activation", "text"), ("link", "text"), ("S", "bytes"),
                ("time, α + S/β (model)", "time")), tuple(rows), NET, ALPHA_BETA)


def box_10() -> Box:
    rows = []
    for n, link in (NODE, PODS, (512, "InfiniBand")):
        steps = int(planner.terms("all_reduce", n)[0])
        rows.append((where(n, link), steps, nccl_tests.model_sent("all_reduce", GiB, n, 0),
                     call("all_reduce", MiB, n, link), call("all_reduce", GiB, n, link)))
    return Box("10", "The ring all_reduce as it grows: 2(n − 1) steps, each paying α, while "
               "the bytes each GPU sends stay under 2 S.",
               (("GPUs, link", "text"), ("steps", "count"), ("each GPU sends, S = 1 GiB",
                "bytes"), ("time, S = 1 MiB", "time"), ("time, S = 1 GiB", "time")),
               tuple(rows), NET, ALPHA_BETA)


def box_11() -> Box:
    rows = []
    for n, link in (NODE, PODS):
        for kind in ("all_reduce", "all_gather"):
            t = call(kind, GiB, n, link)
            rows.append((kind, where(n, link), t, nccl_tests.algbw(kind, GiB, t / 1e6),
                         nccl_tests.busbw(kind, GiB, t / 1e6, n)))
    return Box("11", "What nccl-tests would print for S = 1 GiB if the α-β model were the "
               "whole truth: busbw comes out near the link's β, whatever n; algbw does not.",
               (("collective", "text"), ("GPUs, link", "text"), ("time (model)", "time"),
                ("algbw", "gbps"), ("busbw", "gbps")), tuple(rows), NET,
               ALPHA_BETA + ", nccl-tests' algbw and busbw (`helpers.bench.nccl_tests`)")


def box_12() -> Box:
    rows = []
    for dtype in ("float32", "bfloat16"):
        size = grads(LLAMA3_8B, nccl_tests.DTYPE_SIZES[dtype])
        for n, link in (NODE, PODS):
            rows.append((dtype, where(n, link), size,
                         nccl_tests.model_sent("all_reduce", size, n, 0),
                         call("all_reduce", size, n, link)))
    return Box("12", "The dtype a backend accepts sets the bytes: Llama-3-8B's gradients "
               "all_reduced in float32 and in bfloat16.",
               (("dtype", "text"), ("GPUs, link", "text"), ("S", "bytes"),
                ("each GPU sends", "bytes"), ("time (model)", "time")),
               tuple(rows), NET, ALPHA_BETA)


def box_13() -> Box:
    rows = []
    for n, link in (NODE, PODS):
        held = NCCL_TIMEOUT.value * 1e6 / call("all_reduce", grads(LLAMA3_8B), n, link)
        rows.append((where(n, link), int(NCCL_TIMEOUT.value // 60), n * NCCL_TIMEOUT.value / 3600,
                     int(held)))
    return Box("13", "One rank never calls the collective: the others wait for it, with "
               "torch's defaults at least the NCCL timeout, every GPU of the job idle.",
               (("GPUs, link", "text"), ("timeout (min)", "count"),
                ("GPU time lost", "hours"),
                ("Llama-3-8B gradient all_reduces that time holds", "count")),
               tuple(rows), NET + (NCCL_TIMEOUT,), ALPHA_BETA)


def box_14() -> Box:
    size, rows = grads(LLAMA3_8B), []
    for nodes in (2, 8):
        n = 8 * nodes
        rows.append((where(n, "8 a node"), "flat ring (every step at InfiniBand's β)",
                     nccl_tests.model_sent("all_reduce", size, n, 0),
                     call("all_reduce", size, n, "InfiniBand")))
        rows.append((where(n, "8 a node"), "hierarchical: reduce_scatter in the node, "
                     "all_reduce across, all_gather in the node",
                     nccl_tests.model_sent("all_reduce", size / 8, nodes, 0),
                     call("reduce_scatter", size, 8, "NVLink")
                     + call("all_reduce", size / 8, nodes, "InfiniBand")
                     + call("all_gather", size, 8, "NVLink")))
    return Box("14", "Llama-3-8B's bf16 gradients all_reduced across nodes: one flat ring, "
               "or notebook 14's hierarchy on a (nodes × 8) mesh.",
               (("GPUs", "text"), ("scheme", "text"),
                ("each GPU sends across nodes", "bytes"), ("time (model)", "time")),
               tuple(rows), NET, ALPHA_BETA)
