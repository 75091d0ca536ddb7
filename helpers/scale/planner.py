"""Notebook 27's planner: a model by its shapes and a configuration → every collective of
one training step with its bytes per rank, the memory per rank, and a predicted step time.

    shapes = TOY                                      # or LLAMA3_8B, LLAMA3_70B, LLAMA3_405B
    config = Config(dp=2, tp=2)                       # pp, m, cp, ep, zero, sp
    rows = collectives(shapes, config, rank=0)        # kind, group, calls, S, bytes (model)
    memory(shapes, config)                            # parameters, gradients, optimizer, acts
    comm_us(rows, fits)                               # α-β time of every call (µs)

Every byte figure here is a MODEL: the ring model of `helpers.bench.nccl_tests.model_sent`
for each call, with the call counts of the configuration as notebooks 15–24 (and torch's
`parallelize_module` / `fully_shard`) issue them. The notebook checks them against gloo.
Ranks are laid out pp-major, then dp, then cp, tp fastest (Megatron-LM's order).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from helpers.bench.alpha_beta import Fit, terms
from helpers.bench.nccl_tests import model_sent
from helpers.training.measured import as_gloo_runs
from helpers.training.zero import padded_rows, zero_formula
from helpers.transformer import block as toy_block

STAGE_NAMES = {0: "DP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


@dataclass(frozen=True)
class Shapes:
    """A decoder-only transformer by its shapes. `batch`: sequences per step (global)."""
    name: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    seq: int
    batch: int
    vocab: int = 0              # 0: no embedding / output layer (the toy block)
    kv_heads: int | None = None  # grouped-query attention (None: as many as heads)
    gated: bool = False         # SwiGLU: three ffn matrices (Llama), else two
    biases: bool = False        # a bias on every Linear (the toy), none (Llama)
    norm_params: int = 1        # per norm and feature: 2 for LayerNorm, 1 for RMSNorm
    element_bytes: int = 2      # parameters, activations and collectives' dtype
    source: str = ""

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_width(self) -> int:
        return (self.kv_heads or self.heads) * self.head_dim

    def layer_matrices(self) -> list[tuple[str, int, int, str]]:
        """(name, out features, in features, "col"/"row") of one layer's Linears."""
        h, kv = self.hidden, self.kv_width
        mlp = [("mlp.gate", self.ffn, h, "col")] if self.gated else []
        return [("attn.q", h, h, "col"), ("attn.k", kv, h, "col"), ("attn.v", kv, h, "col"),
                ("attn.o", h, h, "row"), *mlp, ("mlp.up", self.ffn, h, "col"),
                ("mlp.down", h, self.ffn, "row")]

    def layer_shapes(self, tp: int = 1) -> list[tuple[int, ...]]:
        """The shapes of one layer's parameters on one of `tp` tensor-parallel ranks
        (column layers split by rows, row layers by columns; norms and the biases of row
        layers replicated)."""
        out: list[tuple[int, ...]] = []
        for _name, rows, cols, style in self.layer_matrices():
            if style == "col":
                out.append((rows // tp, cols))
                out += [(rows // tp,)] if self.biases else []
            else:
                out.append((rows, cols // tp))
                out += [(rows,)] if self.biases else []
        out += [(self.hidden,)] * (2 * self.norm_params)
        return out

    def parameters(self, tp: int = 1, pp: int = 1, stage: int = 0) -> int:
        """Parameters one rank holds: its layers' shards, the embedding on the first stage,
        the output layer and final norm on the last (vocab split over tp)."""
        per_layer = sum(math.prod(s) for s in self.layer_shapes(tp))
        total = per_layer * (self.layers // pp)
        if self.vocab:
            total += (self.vocab // tp) * self.hidden * ((stage == 0) + (stage == pp - 1))
            total += self.norm_params * self.hidden * (stage == pp - 1)
        return total


# The toy block of notebooks 20–22 (helpers.transformer.block), float64, one layer.
TOY = Shapes("toy block", layers=1, hidden=toy_block.D_MODEL, heads=toy_block.N_HEADS,
             ffn=toy_block.D_FF, seq=toy_block.SEQ, batch=toy_block.BATCH, biases=True,
             norm_params=2, element_bytes=8, source="helpers/transformer/block.py")
_LLAMA3 = ("Llama Team, AI @ Meta (2024), The Llama 3 Herd of Models, arXiv 2407.21783, "
           "table 3; the vocabulary, 128,256, from "
           "meta-llama/llama-models models/llama3_1/api/sku_list.py VOCAB_SIZE (the table "
           "rounds it to 128,000)")
LLAMA3_8B = Shapes("Llama-3-8B", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                   vocab=128256, seq=8192, batch=512, gated=True, source=_LLAMA3)
LLAMA3_70B = Shapes("Llama-3-70B", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                    vocab=128256, seq=8192, batch=512, gated=True, source=_LLAMA3)
LLAMA3_405B = Shapes("Llama-3-405B", layers=126, hidden=16384, heads=128, kv_heads=8,
                     ffn=53248, vocab=128256, seq=8192, batch=2048, gated=True,
                     source=_LLAMA3)


@dataclass(frozen=True)
class Config:
    """How the ranks split the work: data (dp, with ZeRO stage `zero`), tensor (tp, with
    sequence parallelism `sp`), pipeline (pp stages, m micro-batches), context (cp), and
    expert (ep, over the dp ranks) parallelism."""
    dp: int = 1
    tp: int = 1
    pp: int = 1
    m: int = 1
    cp: int = 1
    ep: int = 1
    zero: int = 0
    sp: bool = False

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    def label(self) -> str:
        parts = [f"{k}{v}" for k, v in (("dp", self.dp), ("tp", self.tp), ("pp", self.pp),
                                        ("cp", self.cp), ("ep", self.ep)) if v > 1]
        parts += [f"m{self.m}"] if self.pp > 1 else []
        parts += [STAGE_NAMES[self.zero]] if self.zero and self.dp > 1 else []
        parts += ["sp"] if self.sp else []
        return " ".join(parts) or "one rank"


def check(shapes: Shapes, config: Config, world_size: int | None = None) -> None:
    """ValueError naming the first problem: a product that is not the world size, or a
    size that the configuration does not split evenly."""
    c = config
    for name in ("dp", "tp", "pp", "m", "cp", "ep"):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if c.zero not in STAGE_NAMES:
        raise ValueError(f"zero must be 0, 1, 2 or 3, got {c.zero!r}")
    if world_size is not None and c.world_size != world_size:
        raise ValueError(f"dp × tp × pp × cp = {c.dp} × {c.tp} × {c.pp} × {c.cp} = "
                         f"{c.world_size}, not the world size {world_size}")
    kv = shapes.kv_heads or shapes.heads
    for what, total, parts in (("heads", shapes.heads, c.tp), ("kv heads", kv, c.tp),
                               ("ffn", shapes.ffn, c.tp), ("layers", shapes.layers, c.pp),
                               ("batch", shapes.batch, c.dp * c.m),
                               ("seq", shapes.seq, c.cp * (c.tp if c.sp else 1)),
                               ("vocab", shapes.vocab, c.tp), ("dp ranks", c.dp, c.ep)):
        if total % parts:
            raise ValueError(f"{shapes.name}: {what} = {total} does not split into {parts} "
                             f"equal parts ({config.label()})")


def coordinates(rank: int, config: Config) -> dict[str, int]:
    """This rank's stage, dp, cp and tp index (tp fastest)."""
    c = config
    return {"pp": rank // (c.dp * c.cp * c.tp), "dp": rank // (c.cp * c.tp) % c.dp,
            "cp": rank // c.tp % c.cp, "tp": rank % c.tp}


def _row(phase: str, group: str, kind: str, calls: int, size: float, n: int,
         rank_in_group: int = 0) -> dict[str, Any]:
    per_call = model_sent(kind, size, n, rank_in_group) if n > 1 else 0.0
    return {"phase": phase, "group": group, "kind": kind, "calls": calls, "size": int(size),
            "group_size": n, "model": calls * per_call}


def collectives(shapes: Shapes, config: Config, rank: int = 0,
                recompute: bool = False) -> list[dict[str, Any]]:
    """Every collective of one step on `rank`: phase, group, kind, calls, S (bytes per
    call), group size and `model` (bytes this rank sends, ring model, all calls).

    TP (torch's ColwiseParallel / RowwiseParallel per Linear): per layer and micro-batch,
    an all_reduce of the activations after each row layer forward, and of the input
    gradient of each column layer backward (q, k, v, and gate/up separately); with SP
    (`planner_runs.sp_plan`, notebook 20's), per region (attention, MLP) an all_gather of its
    input and a reduce_scatter of its row layer's output forward, and the same two backward
    (checked against torch with the fake process group, tests/helpers/test_planner.py).
    PP: per micro-batch a send of the activations to the next stage and of their gradient to
    the previous. CP (model only, not checked against a run): the ring of notebook 21, cp − 1
    sends of K and V per layer forward, twice that backward. EP (model only): two
    all_to_all per layer forward, two backward. DP: one flat all_reduce of the gradients
    (ZeRO-1: then an all_gather of the parameters; ZeRO-2: reduce_scatter + all_gather);
    ZeRO-3 as FSDP2 runs it: an all_gather of each unit's (padded) parameters
    forward and again backward (not the root's), and a reduce_scatter of its gradients.
    `recompute`: full activation recomputation runs each layer's forward again in backward,
    so its TP, CP and EP collectives come again (phase "recompute")."""
    check(shapes, config)
    c, e = config, shapes.element_bytes
    where = coordinates(rank, c)
    layers = shapes.layers // c.pp
    micro = shapes.batch // (c.dp * c.m)
    act = micro * (shapes.seq // c.cp) * shapes.hidden * e         # one micro-batch
    rows: list[dict[str, Any]] = []
    if c.tp > 1:
        col = sum(1 for *_x, s in shapes.layer_matrices() if s == "col")
        row = len(shapes.layer_matrices()) - col
        n_fwd, n_bwd = layers * c.m * row, layers * c.m * col
        if c.sp:    # one gather per region (attention, MLP), one scatter after its row layer
            for phase in ("forward", "backward"):
                rows.append(_row(phase, "tp", "all_gather", n_fwd, act, c.tp))
                rows.append(_row(phase, "tp", "reduce_scatter", n_fwd, act, c.tp))
        else:
            rows.append(_row("forward", "tp", "all_reduce", n_fwd, act, c.tp))
            rows.append(_row("backward", "tp", "all_reduce", n_bwd, act, c.tp))
    if c.cp > 1:
        kv = 2 * micro * (shapes.seq // c.cp) * shapes.kv_width // c.tp * e
        rows.append(_row("forward", "cp", "send", layers * c.m * (c.cp - 1), kv, c.cp))
        rows.append(_row("backward", "cp", "send", 2 * layers * c.m * (c.cp - 1), kv, c.cp))
    if c.ep > 1:
        for phase in ("forward", "backward"):
            rows.append(_row(phase, "ep", "all_to_all", 2 * layers * c.m, act, c.ep))
    if c.pp > 1:
        stage = where["pp"]
        pp_act = act // c.tp if c.sp else act
        if stage < c.pp - 1:
            rows.append(_row("forward", "pp", "send", c.m, pp_act, c.pp))
        if stage > 0:
            rows.append(_row("backward", "pp", "send", c.m, pp_act, c.pp))
    if recompute:
        rows += [{**r, "phase": "recompute"} for r in rows
                 if r["phase"] == "forward" and r["group"] in ("tp", "cp", "ep")]
    if c.dp > 1:
        rows += _data_parallel(shapes, c, where["pp"])
    return rows


def sharded_shapes(shapes: Shapes, config: Config, stage: int = 0) -> list[tuple[int, ...]]:
    """The parameter shapes one rank holds before ZeRO: its stage's layers, tp-sharded."""
    c = config
    out = shapes.layer_shapes(c.tp) * (shapes.layers // c.pp)
    if shapes.vocab:
        out += [(shapes.vocab // c.tp, shapes.hidden)] * ((stage == 0) + (stage == c.pp - 1))
        out += [(shapes.hidden,)] * (shapes.norm_params * (stage == c.pp - 1))
    return out


def _data_parallel(shapes: Shapes, c: Config, stage: int) -> list[dict[str, Any]]:
    """The dp group's calls. Stages 0–2 as notebook 16 builds them: their bytes sum to
    `helpers.training.zero.comm_formula` (tests/helpers/test_planner.py). ZeRO-3 as FSDP2
    runs it, which gathers each unit's whole parameters again backward (comm_formula, for
    notebook 16's hand-built stage, regathers only the weights)."""
    e = shapes.element_bytes
    held = sharded_shapes(shapes, c, stage)
    full = sum(math.prod(s) for s in held) * e

    def padded(shapes_: Sequence[tuple[int, ...]]) -> float:   # to a multiple of dp rows
        return sum(padded_rows(s[0], c.dp) * c.dp * math.prod(s[1:]) * e for s in shapes_)
    if c.zero == 0:
        return [_row("grad sync", "dp", "all_reduce", 1, full, c.dp)]
    if c.zero == 1:
        return [_row("grad sync", "dp", "all_reduce", 1, full, c.dp),
                _row("optimizer", "dp", "all_gather", 1, padded(held), c.dp)]
    if c.zero == 2:
        return [_row("grad sync", "dp", "reduce_scatter", 1, padded(held), c.dp),
                _row("optimizer", "dp", "all_gather", 1, padded(held), c.dp)]
    # One unit per layer when the model has several (fully_shard per layer, then the root,
    # which holds the embedding, output layer and final norm, if any), else the root alone.
    units = shapes.layers // c.pp if shapes.layers > 1 else 0
    per_unit = padded(shapes.layer_shapes(c.tp)) if units else 0
    root = padded(held) - per_unit * units
    rows = [_row("forward", "dp", "all_gather", units, per_unit, c.dp),
            _row("backward", "dp", "all_gather", units, per_unit, c.dp),
            _row("backward", "dp", "reduce_scatter", units, per_unit, c.dp)]
    if root:
        rows += [_row("forward", "dp", "all_gather", 1, root, c.dp),
                 _row("backward", "dp", "reduce_scatter", 1, root, c.dp)]
    return [r for r in rows if r["calls"]]


def totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """{kind: calls} and the bytes this rank sends, over all rows."""
    calls: dict[str, int] = {}
    for r in rows:
        calls[r["kind"]] = calls.get(r["kind"], 0) + r["calls"]
    return {"calls": calls, "model": sum(r["model"] for r in rows)}


def gloo_bytes(rows: Sequence[Mapping[str, Any]]) -> float:
    """The model bytes as gloo runs the calls: a reduce_scatter writes an all_reduce's."""
    return sum(as_gloo_runs(r["kind"], r["model"]) for r in rows)


def memory(shapes: Shapes, config: Config, rank: int = 0, grad_bytes: int | None = None,
           optimizer_bytes: int | None = None, recompute: bool = False) -> dict[str, float]:
    """Bytes one rank holds: parameters, gradients and optimizer state by the ZeRO paper's
    formulas (`helpers.training.zero.zero_formula`) applied to the parameters this rank's
    tp shard and pp stage hold (FSDP2's padding included at ZeRO-3), and the activations a
    layer keeps for backward (Korthikanti et al. 2022, arXiv 2205.05198: s·b·h·(34 +
    5·a·s/h) bytes for a 16-bit GPT layer, /tp with SP; with full recomputation only each
    layer's input, 2·s·b·h bytes), scaled to the element size, for the micro-batches in
    flight. Defaults: the element size for parameters and gradients, Adam's two states at the
    element size, except mixed precision (2-byte elements): 12 bytes (fp32 copy, momentum,
    variance)."""
    c, e = config, shapes.element_bytes
    stage = coordinates(rank, c)["pp"]
    held = sharded_shapes(shapes, c, stage)
    psi = sum(math.prod(s) for s in held)
    if c.zero == 3 and c.dp > 1:      # FSDP2's shards hold the padded rows
        psi = sum(padded_rows(s[0], c.dp) * c.dp * math.prod(s[1:]) for s in held)
    grad = e if grad_bytes is None else grad_bytes
    opt = (12 if e == 2 else 2 * e) if optimizer_bytes is None else optimizer_bytes
    stage_name = STAGE_NAMES[c.zero] if c.dp > 1 else "DP"
    out = zero_formula(psi, c.dp, stage_name, param_bytes=e, grad_bytes=grad,
                       optimizer_bytes=opt)
    s, b = shapes.seq // c.cp, shapes.batch // (c.dp * c.m)
    per_layer = s * b * shapes.hidden * (2 if recompute else
                                         34 + 5 * shapes.heads * s / shapes.hidden)
    per_layer = per_layer / c.tp if c.sp else per_layer
    in_flight = min(c.m, c.pp) if c.pp > 1 else 1      # 1F1B keeps ≤ p micro-batches
    out["activations"] = per_layer * (shapes.layers // c.pp) * in_flight * e / 2
    return out


def attention_flops_per_token(shapes: Shapes, causal: bool = False,
                              recompute: bool = False) -> float:
    """FLOP one token spends, over all layers, in the two products of attention that have
    no parameters (and so are not in 6 × parameters): the scores Q·Kᵀ and the scores times
    V. Forward, per layer, each is 2 · s · h (the token's query, h = heads × head_dim wide,
    against s keys; then s values): 4 · s · h. Backward twice that, so 12 · L · s · h
    forward and backward; with full recomputation a second forward, 16 · L · s · h.

    `causal=False` counts every key, as the model FLOPs of MFU do (PaLM's 6N + 12·L·H·Q·T,
    karpathy/nanoGPT model.py `estimate_mfu`). `causal=True` counts only the keys a causal
    mask lets the token see, (s + 1)/2 of them on average (token i sees i + 1): about half,
    the work a kernel that skips the masked blocks does. A MODEL: nothing here is timed."""
    keys = (shapes.seq + 1) / 2 if causal else shapes.seq
    passes = 4 if recompute else 3          # forward, backward (2 forwards), a recomputed one
    return passes * 4 * shapes.layers * keys * shapes.heads * shapes.head_dim


def flops_per_token(shapes: Shapes, causal: bool = False, recompute: bool = False) -> float:
    """FLOP one token costs in a training step, a MODEL: 6 × parameters (2 forward, 4
    backward: a multiply and an add per parameter, Kaplan et al. 2020's C ≈ 6N, which leaves
    out the terms that grow with the context), 8 × with full recomputation (the forward
    again), plus `attention_flops_per_token`. Every parameter counts, the embedding's too
    (a lookup, no product: 0.5 % of Llama-3-405B)."""
    return (8 if recompute else 6) * shapes.parameters() + attention_flops_per_token(
        shapes, causal=causal, recompute=recompute)


def step_flops(shapes: Shapes, causal: bool = False, recompute: bool = False) -> float:
    """FLOP of one step: `flops_per_token` × batch × seq tokens (a MODEL)."""
    return flops_per_token(shapes, causal=causal, recompute=recompute) * shapes.batch * shapes.seq


def call_us(fits: Mapping[str, Fit], kind: str, size: float, n: int) -> float:
    """α-β time (µs) of one call: the fitted collective's own model; a send is one step of
    S bytes (all_reduce's α and β); a reduce_scatter without its own fit is timed as the
    all_reduce gloo runs for it; all_to_all as an all_gather of S."""
    if n < 2:
        return 0.0
    if kind == "send":
        fit = fits["all_reduce"]
        return fit.alpha_us + size / (fit.beta_gbps * 1e3)
    use = {"reduce_scatter": "all_reduce", "all_to_all": "all_gather"}.get(kind, kind)
    use = kind if kind in fits else use
    fit = fits[use]
    steps, per_byte = terms(use, n, fit.algorithm)
    return fit.alpha_us * steps + per_byte * size / (fit.beta_gbps * 1e3)


def comm_us(rows: Sequence[Mapping[str, Any]], fits: Mapping[str, Fit]) -> float:
    """The α-β time of every call in `rows`, one after the other (no overlap)."""
    return sum(r["calls"] * call_us(fits, r["kind"], r["size"], r["group_size"])
               for r in rows)


def link_fits(alpha_us: float, beta_gbps: float, n: int = 2) -> dict[str, Fit]:
    """Ring α-β models of every collective from a link's latency and bandwidth (a MODEL:
    e.g. a cluster's published link bandwidth), in the form `comm_us` takes."""
    return {k: Fit(k, "ring", (n,), alpha_us, beta_gbps, 0.0, 0.0, 0.0, 0)
            for k in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")}


def toy(layers: int, batch: int) -> Shapes:
    """The toy block of notebooks 20–22 stacked `layers` deep, `batch` sequences a step."""
    return Shapes(f"toy stack of {layers}", layers=layers, hidden=TOY.hidden, heads=TOY.heads,
                  ffn=TOY.ffn, seq=TOY.seq, batch=batch, biases=True, norm_params=2,
                  element_bytes=8, source=TOY.source)
