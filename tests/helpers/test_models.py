"""Tests of helpers.collectives.models: hand-computed cases, validation, and the model
checked against what torch.distributed (gloo, CPU) really does."""

from __future__ import annotations

import copy
import json
import pickle
from typing import TYPE_CHECKING

import numpy as np
import pytest

from helpers.collectives import registry
from helpers import checks
from helpers.collectives import model_check
from helpers.collectives.model_check import check
from helpers.collectives.examples import example_befores, model_after
from helpers.collectives.arrays import reduce_arrays
from helpers.collectives.models import UNSPECIFIED, expected_after
from helpers.collectives.registry import COLLECTIVES, REDUCE_OPS
from notebook_runner import printed

if TYPE_CHECKING:   # _run_cases's `torch` and `dist` are the disposable rank's own globals
    import torch
    import torch.distributed as dist


report = printed(model_check.report)


FLOAT_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG")
INT_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
ALL_DTYPES = ("float64", "float32", "float16", "bfloat16",
              "int8", "uint8", "int32", "int64", "bool")


def record(collective, befores, params=None, afters=None, dtype="float32"):
    """A record as the notebooks write it."""
    afters = afters or [{}] * len(befores)
    return {"collective": collective, "backend": "gloo", "world_size": len(befores),
            "dtype": dtype, "params": params or {},
            "ranks": [{"rank": r, "device": "cpu", "before": b, "after": a}
                      for r, (b, a) in enumerate(zip(befores, afters))]}


def plain(exp):
    return [{k: (v if v is UNSPECIFIED or v is None else
                 [x.tolist() for x in v] if isinstance(v, list) else v.tolist())
             for k, v in e.items()} for e in exp]


# ------------------------------------------------------------ hand-computed cases

def test_scatter_of_the_blog_post():
    befores = [{"tensor": [0.0, 0.0], "scatter_list": [[1.0, 1.0], [5.0, 5.0]]},
               {"tensor": [0.0, 0.0], "scatter_list": None}]
    exp = plain(expected_after(record("scatter", befores, {"src": 0})))
    assert exp == [{"tensor": [1.0, 1.0], "scatter_list": [[1.0, 1.0], [5.0, 5.0]]},
                   {"tensor": [5.0, 5.0], "scatter_list": None}]


def test_reduce_of_ranks_0_to_3_gives_6_on_dst_only():
    befores = [{"tensor": [float(r)]} for r in range(4)]
    exp = expected_after(record("reduce", befores, {"dst": 2, "op": "SUM"}))
    assert exp[2]["tensor"].tolist() == [6.0]
    assert [e["tensor"] is UNSPECIFIED for e in exp] == [True, True, False, True]
    # gloo leaves partial sums elsewhere: that must not count as wrong
    afters = [{"tensor": [1.0]}, {"tensor": [3.0]}, {"tensor": [6.0]}, {"tensor": [3.0]}]
    assert check(record("reduce", befores, {"dst": 2}, afters)) == [True] * 4
    afters[2] = {"tensor": [5.0]}
    assert check(record("reduce", befores, {"dst": 2}, afters)) == [True, True, False, True]


def test_reduce_scatter_of_the_blog_post():
    single = [{"output": [0], "input": [1, 2]}, {"output": [0], "input": [3, 4]}]
    assert [a["output"] for a in model_after("reduce_scatter_single", single, {}, "int64")] == [[4], [6]]
    lists = [{"output": [0], "input_list": [[1], [2]]}, {"output": [0], "input_list": [[3], [4]]}]
    assert [a["output"] for a in model_after("reduce_scatter", lists, {"op": "SUM"}, "int64")] == [[4], [6]]


def test_other_collectives_by_hand():
    two = [{"tensor": [1.0, 2.0]}, {"tensor": [3.0, 5.0]}]
    assert [a["tensor"] for a in model_after("all_reduce", two, {"op": "MAX"})] == [[3.0, 5.0]] * 2
    assert [a["tensor"] for a in model_after("all_reduce", two, {"op": "AVG"})] == [[2.0, 3.5]] * 2
    assert [a["tensor"] for a in model_after("broadcast", two, {"src": 1})] == [[3.0, 5.0]] * 2
    g = model_after("gather", [{"tensor": [1], "gather_list": None},
                               {"tensor": [2], "gather_list": [[0], [0]]}], {"dst": 1}, "int64")
    assert g == [{"tensor": [1], "gather_list": None}, {"tensor": [2], "gather_list": [[1], [2]]}]
    ag = model_after("all_gather_single", [{"output_tensor": [[0, 0], [0, 0]], "input_tensor": [1, 2]},
                                           {"output_tensor": [[0, 0], [0, 0]], "input_tensor": [3, 4]}],
                     {}, "int64")
    assert ag[0]["output_tensor"] == [[1, 2], [3, 4]]  # the stack form
    a2a = model_after("all_to_all", [{"output_tensor_list": [[0], [0, 0]], "input_tensor_list": [[1], [2]]},
                                     {"output_tensor_list": [[0], [0]], "input_tensor_list": [[3, 3], [4]]}],
                      {}, "int64")
    assert [a["output_tensor_list"] for a in a2a] == [[[1], [3, 3]], [[2], [4]]]
    # like torch, scatter and gather default src/dst to 0; [] counts as "not passed"
    sc = model_after("scatter", [{"tensor": [0], "scatter_list": [[7], [8]]}, {"tensor": [0], "scatter_list": []}],
                     {}, "int64")
    assert sc == [{"tensor": [7], "scatter_list": [[7], [8]]}, {"tensor": [8], "scatter_list": []}]
    uneven = model_after("all_to_all_single",
                         [{"output": [0, 0, 0], "input": [1, 2], "input_split_sizes": [1, 1],
                           "output_split_sizes": [1, 2]},
                          {"output": [0, 0], "input": [3, 4, 5], "input_split_sizes": [2, 1],
                           "output_split_sizes": [1, 1]}], {}, "int64")
    assert [a["output"] for a in uneven] == [[1, 3, 4], [2, 5]]


def test_reduce_arrays_keeps_torch_dtype_semantics():
    s = reduce_arrays([[100, 1], [100, 2], [100, 3]], "SUM", "int8")
    assert s.dtype == np.int8 and s.tolist() == [44, 6]  # wraps like torch
    assert reduce_arrays([[200], [100]], "SUM", "uint8").tolist() == [44]
    assert reduce_arrays([[100], [100], [100]], "PRODUCT", "int32").tolist() == [1_000_000]
    assert reduce_arrays([[True, False], [False, False]], "SUM", "bool").tolist() == [True, False]
    assert reduce_arrays([[True, True], [False, True]], "PRODUCT", "bool").tolist() == [False, True]
    assert reduce_arrays([[6, 3], [5, 1]], "BXOR", "int64").tolist() == [3, 2]
    assert reduce_arrays([[6, 3], [5, 1]], "BAND", "int64").tolist() == [4, 1]
    assert reduce_arrays([[6, 3], [5, 1]], "BOR", "int64").tolist() == [7, 3]
    avg = reduce_arrays([[1.0], [2.0], [2.0]], "AVG", "float32")
    assert avg.dtype == np.float32 and avg[0] == np.float32(5 / 3)
    assert reduce_arrays([[100.0], [100.0], [100.0]], "PRODUCT", "float16").tolist() == [np.inf]
    assert reduce_arrays([[100.0], [100.0], [100.0]], "PRODUCT", "bfloat16").tolist() == [999424.0]
    assert reduce_arrays([[1.0], [2.0 ** -9]], "SUM", "bfloat16").tolist() == [1.0]  # 8 bits only
    assert reduce_arrays([[1.0], [2.0]], "ReduceOp.MIN", "torch.float64").tolist() == [1.0]


@pytest.mark.parametrize("dtype", ["int64", "int8", "uint8", "int32", "bool"])
def test_avg_needs_a_floating_dtype(dtype):
    with pytest.raises(ValueError, match=f"AVG needs a floating dtype, not {dtype}"):
        reduce_arrays([[1], [2]], "AVG", dtype)


@pytest.mark.parametrize("op", ["BAND", "BOR", "BXOR"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_bitwise_ops_need_integers(op, dtype):
    with pytest.raises(ValueError, match=f"{op} is bitwise.*not {dtype}"):
        reduce_arrays([[1.0], [2.0]], op, dtype)


def test_dtype_is_inferred_when_absent():
    ints = record("all_reduce", [{"tensor": [1, 2]}, {"tensor": [3, 4]}])
    del ints["dtype"]
    assert expected_after(ints)[0]["tensor"].dtype == np.int64
    floats = record("all_reduce", [{"tensor": [1, 2]}, {"tensor": [3, 4.5]}])
    del floats["dtype"]
    assert expected_after(floats)[0]["tensor"].dtype == np.float32


def test_unspecified_is_a_readable_pickleable_singleton():
    assert repr(UNSPECIFIED) == "UNSPECIFIED"
    assert pickle.loads(pickle.dumps(UNSPECIFIED)) is UNSPECIFIED
    assert type(UNSPECIFIED)() is UNSPECIFIED


# ------------------------------------------------------------ validation errors

def _scatter2():
    return record("scatter", [{"tensor": [0.0], "scatter_list": [[1.0], [5.0]]},
                              {"tensor": [0.0], "scatter_list": None}], {"src": 0})


def _bad_scatter(path, value):
    """The valid 2-rank scatter record with one entry (a key path) replaced."""
    def make():
        rec = _scatter2()
        target = rec
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return rec
    return make


def _same(collective, before, params=None, dtype="float32", ws=2):
    """A record where every rank passes the same `before`."""
    return lambda: record(collective, [before] * ws, params, dtype=dtype)


BAD = {  # name: (invalid record factory, expected message)
    "unknown collective": (_bad_scatter(["collective"], "scatterr"), "unknown collective 'scatterr'"),
    "too few ranks": (_bad_scatter(["world_size"], 3), "2 ranks but world_size is 3"),
    "rank numbers": (_bad_scatter(["ranks", 1, "rank"], 0), r"ranks must be 0..1, each once"),
    "src out of range": (_bad_scatter(["params", "src"], 2), r"src must be a rank in 0..1, got 2"),
    "src negative": (_bad_scatter(["params", "src"], -1), r"src must be a rank in 0..1"),
    "scatter_list length": (_bad_scatter(["ranks", 0, "before", "scatter_list"], [[1.0]] * 3),
                            "scatter_list on rank 0 has 3 tensors but world_size is 2"),
    "scatter_list on non-src": (_bad_scatter(["ranks", 1, "before", "scatter_list"], [[1.0], [2.0]]),
                                "scatter_list must be null on rank 1"),
    "scatter shape": (_bad_scatter(["ranks", 1, "before", "tensor"], [0.0, 0.0]), "shape mismatch"),
    "missing tensor": (_bad_scatter(["ranks", 1, "before", "tensor"], None), "rank 1 must pass tensor"),
    "unknown dtype": (_bad_scatter(["dtype"], "float8"), "unknown dtype 'float8'"),
    "dst out of range": (_same("reduce", {"tensor": [1.0]}, {"dst": 5}), r"dst must be a rank in 0..1, got 5"),
    "dst missing": (_same("reduce", {"tensor": [1.0]}), "dst must be"),
    "unknown op": (_same("all_reduce", {"tensor": [1.0]}, {"op": "MEAN"}), "unknown reduce op 'MEAN'"),
    "AVG on ints": (_same("all_reduce", {"tensor": [1]}, {"op": "AVG"}, "int64"), "AVG needs a floating dtype"),
    "all_reduce shapes": (lambda: record("all_reduce", [{"tensor": [1.0]}, {"tensor": [1.0, 2.0]}]),
                          "shape mismatch"),
    "gather_list length": (lambda: record("gather", [{"tensor": [1.0], "gather_list": [[0.0]]},
                                                     {"tensor": [1.0], "gather_list": None}], {"dst": 0}),
                           "gather_list on rank 0 has 1 tensors but world_size is 2"),
    "all_gather tensor_list": (lambda: record("all_gather", [{"tensor": [1.0], "tensor_list": [[0.0]] * 2},
                                                             {"tensor": [1.0], "tensor_list": [[0.0, 0.0]] * 2}]),
                               "shape mismatch"),
    "all_gather_single size": (_same("all_gather_single", {"output_tensor": [0.0] * 3, "input_tensor": [1.0]}),
                               "does not hold world_size=2 pieces"),
    "reduce_scatter input_list": (_same("reduce_scatter", {"output": [0.0], "input_list": [[1.0]]}),
                                  "input_list on rank 0 has 1 tensors"),
    "reduce_scatter_single divisible": (_same("reduce_scatter_single", {"output": [0.0], "input": [1.0] * 3}),
                                        "3 elements, not divisible by world_size=2"),
    "reduce_scatter_single output": (_same("reduce_scatter_single", {"output": [0.0], "input": [1.0] * 4}),
                                     "does not hold world_size=2 pieces"),
    "all_to_all lengths": (_same("all_to_all", {"output_tensor_list": [[0.0]] * 2,
                                                "input_tensor_list": [[1.0]] * 3}),
                           "input_tensor_list on rank 0 has 3 tensors"),
    "all_to_all shapes": (_same("all_to_all", {"output_tensor_list": [[0.0]] * 2,
                                               "input_tensor_list": [[1.0, 2.0]] * 2}),
                          "shape mismatch"),
    "all_to_all_single divisible": (_same("all_to_all_single", {"output": [0.0] * 3, "input": [1.0] * 3}),
                                    "divisible by world_size=2"),
    "all_to_all_single splits": (_same("all_to_all_single", {"output": [0.0] * 2, "input": [1.0] * 2,
                                                             "input_split_sizes": [1, 2]}),
                                 r"input_split_sizes \[1, 2\] on rank 0 must be 2 sizes adding up"),
    "send_recv to itself": (lambda: record("send_recv", [{"tensor": [1.0]}, {"tensor": [0.0]}],
                                           {"src": 1, "dst": 1}), "src and dst must be different"),
    "send_recv dst missing": (lambda: record("send_recv", [{"tensor": [1.0]}, {"tensor": [0.0]}],
                                             {"src": 0}), r"dst must be a rank in 0..1, got None"),
    "send_recv dst out of range": (lambda: record("send_recv", [{"tensor": [1.0]}, {"tensor": [0.0]}],
                                                  {"src": 0, "dst": 2}), r"dst must be a rank in 0..1, got 2"),
    "send_recv no buffer": (lambda: record("send_recv", [{"tensor": [1.0]}, {"tensor": None}],
                                           {"src": 0, "dst": 1}), "rank 1 must pass tensor"),
    "send_recv sizes": (lambda: record("send_recv", [{"tensor": [1.0, 2.0]}, {"tensor": [0.0]}],
                                       {"src": 0, "dst": 1}), "src 0 sends 2 elements but the recv buffer"),
    "all_to_all_single 0-d": (_same("all_to_all_single", {"output": 0.0, "input": 1.0}),
                              "at least one dimension"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_invalid_records_are_refused_clearly(name):
    make, message = BAD[name]
    with pytest.raises(ValueError, match=message):
        expected_after(make())
    with pytest.raises(ValueError):
        check(make())


# ------------------------------------------------------------ report, predictions

def test_report_prints_one_clear_line_per_rank(capsys):
    befores = [{"tensor": [float(r)]} for r in range(3)]
    afters = [{"tensor": [3.0]}, {"tensor": [9.0]}, {"tensor": [2.0]}]
    assert report(record("reduce", befores, {"dst": 0}, afters)) == [True, True, True]
    out = capsys.readouterr().out.splitlines()
    # the printed lines are the behaviour here (what a notebook's self-check shows a reader)
    assert out == ["rank 0 ✓  tensor = [3.0]",
                   "rank 1 ✓  tensor = [9.0] (not defined by reduce: only dst 0 is)",
                   "rank 2 ✓  tensor = [2.0] (not defined by reduce: only dst 0 is)"]
    afters = [{"tensor": [1.0], "scatter_list": [[1.0], [5.0]]}, {"tensor": [4.0], "scatter_list": None}]
    rec = _scatter2()
    for r, a in zip(rec["ranks"], afters):
        r["after"] = a
    assert report(rec) == [True, False]
    assert capsys.readouterr().out.splitlines() == ["rank 0 ✓  tensor = [1.0]",
                                                    "rank 1 ✗  tensor = [4.0] (model: [5.0])"]
    rec["ranks"][0]["after"]["scatter_list"] = [[1.0], [6.0]]  # an input that was overwritten
    assert report(rec) == [False, False]
    assert "scatter_list = [[1.0], [6.0]] (model: [[1.0], [5.0]])" in capsys.readouterr().out


# ------------------------------------------------------------ example inputs

def _plain_leaves(value):
    if isinstance(value, dict):
        return all(_plain_leaves(v) for v in value.values())
    if isinstance(value, list):
        return all(_plain_leaves(v) for v in value)
    return value is None or value is UNSPECIFIED or type(value) in (float, int, bool)


SENT = {"scatter": "scatter_list", "gather": "tensor", "broadcast": "tensor", "reduce": "tensor",
        "all_reduce": "tensor", "all_gather": "tensor", "all_gather_single": "input_tensor",
        "reduce_scatter": "input_list", "reduce_scatter_single": "input",
        "all_to_all": "input_tensor_list", "all_to_all_single": "input", "send_recv": "tensor"}
MULTI_PIECE = ("reduce_scatter", "reduce_scatter_single", "all_to_all", "all_to_all_single")


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_example_befores_are_readable_and_consistent(collective):
    for ws in range(2, 9):
        params = {"src": ws - 1, "dst": 0 if collective == "send_recv" else ws - 1, "op": "SUM"}
        befores = example_befores(collective, ws, params)
        assert len(befores) == ws
        afters = model_after(collective, befores, params)
        assert _plain_leaves(afters)  # plain lists, UNSPECIFIED kept
        # every piece of data is a distinct number, so it can be traced
        sent = SENT[collective]
        flat = np.concatenate([np.ravel(np.array(b[sent], dtype=float)) for b in befores
                               if b[sent] is not None])
        pieces = {"broadcast": 1, "send_recv": 1}.get(collective, ws * ws if collective in MULTI_PIECE else ws)
        assert len(set(flat.tolist()) - {0.0}) == pieces
        root, out = ws - 1, registry.OUTPUT[collective]
        for r, b in enumerate(befores):  # outputs start as zeros or are not passed
            v = b[out]
            if collective in ("reduce", "all_reduce") or (collective in ("broadcast", "send_recv")
                                                           and r == root):
                continue
            if (collective == "gather" and r != root) or (collective == "send_recv" and r not in (0, root)):
                assert v is None
            else:
                assert not np.any(np.array(v, dtype=float))
    assert example_befores("all_reduce", 2)[1] == {"tensor": [11.0, 11.0]}
    with pytest.raises(ValueError):
        example_befores(collective, 10)


# ------------------------------------------------------------ against torch

def _random_value(rng, dtype, shape, op=None):
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool).tolist()
    if dtype == "uint8":
        return rng.integers(0, 256, shape).tolist()
    if dtype == "int8":
        return rng.integers(-128, 128, shape).tolist()
    if dtype.startswith("int"):
        return rng.integers(-4, 5, shape).tolist() if op == "PRODUCT" else rng.integers(-60, 60, shape).tolist()
    return np.round(rng.standard_normal(shape) * 3, 3).tolist()


def _make_cases(ws, seed):
    """Many random calls of every collective (and the example inputs) for one group."""
    rng = np.random.default_rng(seed)
    cases = []

    def add(collective, dtype, params, make, gloo_refuses=False):
        cases.append({"collective": collective, "dtype": dtype, "params": params,
                      "befores": [make(r) for r in range(ws)], "gloo_refuses": gloo_refuses})

    def rv(dtype, shape, op=None):
        return _random_value(rng, dtype, shape, op)

    def zeros(dtype, shape):
        return np.zeros(shape, dtype=bool if dtype == "bool" else int).tolist()

    for dtype in ALL_DTYPES:  # every op on every dtype, incl. those gloo refuses
        for op in REDUCE_OPS:
            add("all_reduce", dtype, {"op": op}, lambda r: {"tensor": rv(dtype, (3,), op)})
    for dtype, ops in (("float32", FLOAT_OPS), ("int64", INT_OPS), ("int32", INT_OPS),
                       ("float64", FLOAT_OPS), ("bfloat16", ("SUM", "AVG")),
                       ("int8", ("SUM", "PRODUCT")), ("bool", ("SUM", "BXOR"))):
        for op in ops:
            k = int(rng.integers(1, 3))
            add("reduce", dtype, {"dst": int(rng.integers(ws)), "op": op},
                lambda r: {"tensor": rv(dtype, (2, k), op)})
            add("reduce_scatter", dtype, {"op": op},
                lambda r: {"output": zeros(dtype, (k,)), "input_list": [rv(dtype, (k,), op) for _ in range(ws)]})
            for stack in (False, True):  # gloo refuses the stack form
                shape = (ws, 2, k) if stack else (ws * 2, k)
                add("reduce_scatter_single", dtype, {"op": op},
                    lambda r: {"output": zeros(dtype, (2, k)), "input": rv(dtype, shape, op)},
                    gloo_refuses=stack)
    for dtype in ("float32", "int64", "bool", "bfloat16", "float16", "uint8"):
        for shape in ((), (3,), (2, 3)):
            src, dst = int(rng.integers(ws)), int(rng.integers(ws))
            add("scatter", dtype, {"src": src}, lambda r: {
                "tensor": zeros(dtype, shape),
                "scatter_list": [rv(dtype, shape) for _ in range(ws)] if r == src else None})
            add("gather", dtype, {"dst": dst}, lambda r: {
                "tensor": rv(dtype, shape),
                "gather_list": [zeros(dtype, shape) for _ in range(ws)] if r == dst else None})
            add("broadcast", dtype, {"src": src}, lambda r: {"tensor": rv(dtype, shape)})
            add("all_gather", dtype, {}, lambda r: {
                "tensor_list": [zeros(dtype, shape) for _ in range(ws)], "tensor": rv(dtype, shape)})
            stack = not shape or bool(rng.integers(2))  # gloo refuses the stack form
            out_shape = (ws, *shape) if stack else (ws * shape[0], *shape[1:])
            add("all_gather_single", dtype, {}, lambda r: {
                "output_tensor": zeros(dtype, out_shape), "input_tensor": rv(dtype, shape)},
                gloo_refuses=stack)
        k = int(rng.integers(1, 3))
        add("all_to_all", dtype, {}, lambda r: {
            "output_tensor_list": [zeros(dtype, (k,)) for q in range(ws)],
            "input_tensor_list": [rv(dtype, (k,)) for q in range(ws)]})
        sizes = rng.integers(0, 3, (ws, ws))  # sizes[q][r]: elements rank q sends to rank r
        add("all_to_all", dtype, {}, lambda r: {  # uneven: NCCL takes it, gloo does not
            "output_tensor_list": [zeros(dtype, (int(sizes[q][r]),)) for q in range(ws)],
            "input_tensor_list": [rv(dtype, (int(sizes[r][q]),)) for q in range(ws)]},
            gloo_refuses=len(set(sizes.ravel().tolist())) > 1)
        add("all_to_all_single", dtype, {}, lambda r: {
            "output": zeros(dtype, (int(sizes[:, r].sum()), 2)), "input": rv(dtype, (int(sizes[r].sum()), 2)),
            "output_split_sizes": sizes[:, r].tolist(), "input_split_sizes": sizes[r].tolist()})
        add("all_to_all_single", dtype, {"output_split_sizes": None, "input_split_sizes": None},
            lambda r: {"output": zeros(dtype, (2 * ws,)), "input": rv(dtype, (2 * ws,))})
    for dtype in ("float32", "int64", "bool", "float16", "bfloat16", "uint8"):
        for shape, recv_shape in (((), ()), ((3,), (3,)), ((2, 3), (2, 3)), ((2, 3), (6,))):
            src = int(rng.integers(ws))
            dst = int((src + rng.integers(1, ws)) % ws)  # any other rank
            add("send_recv", dtype, {"src": src, "dst": dst}, lambda r: {
                "tensor": rv(dtype, shape) if r == src else zeros(dtype, recv_shape) if r == dst
                else None})
    for collective in COLLECTIVES:  # the inputs the drawings use
        params = {registry.ROOT[collective]: 1} if collective in registry.ROOT else {}
        if collective == "send_recv":
            params = {"src": ws - 1, "dst": 1}
        if collective in registry.REDUCING:
            params["op"] = "MAX"
        if collective == "all_to_all_single":
            params = {"input_split_sizes": rng.integers(0, 3, (ws, ws)).tolist()}
        add(collective, "float32", params, lambda r: example_befores(collective, ws, params)[r])
    return cases


def _run_cases(rank, world_size, cases, split_args, list_args):
    """One disposable rank: every case on its gloo group, before and after (or the error)."""
    from helpers.runtime.transfer import encode   # copies now; lists once sent as JSON

    def to_torch(name, value, dtype):
        if value is None or name in split_args:
            return value
        if name in list_args:
            return [torch.tensor(v, dtype=dtype) for v in value]
        return torch.tensor(value, dtype=dtype)

    results = []
    for case in cases:
        dtype = getattr(torch, case["dtype"])
        args = {k: to_torch(k, v, dtype) for k, v in case["befores"][rank].items()}
        kwargs = {k: getattr(dist.ReduceOp, v) if k == "op" else v
                  for k, v in case["params"].items() if k in ("src", "dst", "op")
                  or (k in split_args and k not in args
                      and not (v and isinstance(v[0], list)))}
        before = encode(args)
        try:
            if case["collective"] == "send_recv":  # one send and its recv; others idle
                if rank == case["params"]["src"]:
                    dist.send(args["tensor"], dst=case["params"]["dst"])
                elif rank == case["params"]["dst"]:
                    dist.recv(args["tensor"], src=case["params"]["src"])
            else:
                getattr(dist, case["collective"])(**args, **kwargs)
            results.append({"rank": rank, "device": "cpu", "before": before,
                            "after": encode(args)})
        except Exception as e:
            results.append({"rank": rank, "error": f"{type(e).__name__}: {e}"})
    return results


@pytest.fixture(scope="module")
def torch_records():
    """{world_size: [(case, record)]}: two gloo groups (3 and 4 ranks) run all cases, at
    once, on disposable ranks (forked with torch imported)."""
    from helpers.runtime.disposable import start_disposable

    cases = {ws: _make_cases(ws, seed=ws) for ws in (3, 4)}
    runs = {ws: start_disposable(_run_cases, world_size=ws, timeout_s=30.0, limit_s=150.0,
                                 args={"cases": cases[ws],
                                       "split_args": sorted(registry.SPLIT_ARGS),
                                       "list_args": sorted(registry.LIST_ARGS)})
            for ws in (3, 4)}
    result = {}
    for ws, run in runs.items():
        outcomes = run.outcomes()
        for o in outcomes:
            assert o.returncode == 0 and o.error is None and len(o.result) == len(cases[ws]), \
                f"rank {o.rank} of {ws} failed: {o.summary()}"
        result[ws] = []
        for i, case in enumerate(cases[ws]):
            rec = {"collective": case["collective"], "backend": "gloo", "world_size": ws,
                   "dtype": case["dtype"], "params": case["params"],
                   "ranks": [o.result[i] for o in outcomes]}
            result[ws].append((case, json.loads(json.dumps(rec))))  # as saved by the notebooks
    return result


def _model_refuses(rec):
    try:
        expected_after({**rec, "ranks": [{"rank": r, "before": b} for r, b in enumerate(rec["befores"])]})
    except ValueError as e:
        return str(e)
    return None


@pytest.mark.parametrize("ws", [3, 4])
def test_model_matches_torch_gloo(torch_records, ws):
    failures, seen = [], set()
    for case, rec in torch_records[ws]:
        errors = [r["error"] for r in rec["ranks"] if "error" in r]
        refused = _model_refuses({**case, "world_size": ws})
        label = f"{case['collective']} {case['dtype']} {case['params']}"
        if refused:
            if len(errors) != ws:
                failures.append(f"{label}: model refuses ({refused}) but gloo ran it: {errors}")
            continue
        if case["gloo_refuses"]:  # valid for the API (NCCL), a known gloo limitation
            if len(errors) != ws:
                failures.append(f"{label}: expected gloo to refuse it, but: {errors}")
            continue
        if errors:
            failures.append(f"{label}: gloo refused it: {errors[0]}")
            continue
        ok = check(rec)
        if not all(ok):
            failures.append(f"{label}: check {ok}\n" + json.dumps(rec["ranks"])[:2000])
        seen.add((case["collective"], case["dtype"], case["params"].get("op")))
    assert not failures, "\n".join(failures)
    assert {c for c, _, _ in seen} == set(COLLECTIVES)
    assert sum(c["gloo_refuses"] for c, _ in torch_records[ws]) >= 10
    for op in FLOAT_OPS:
        for dtype in ("float32", "float64", "float16", "bfloat16"):
            assert ("all_reduce", dtype, op) in seen
        assert {("reduce", "float32", op), ("reduce_scatter", "float32", op),
                ("reduce_scatter_single", "float32", op)} <= seen
    for op in INT_OPS:
        for dtype in ("int64", "int32", "int8", "uint8", "bool"):
            assert ("all_reduce", dtype, op) in seen
        assert {("reduce", "int64", op), ("reduce_scatter", "int64", op),
                ("reduce_scatter_single", "int32", op)} <= seen


def test_gloo_refuses_what_the_model_refuses(torch_records):
    refused = [(case, rec) for case, rec in torch_records[3] if _model_refuses({**case, "world_size": 3})]
    pairs = {(c["dtype"], c["params"]["op"]) for c, _ in refused}
    assert pairs == ({(d, "AVG") for d in ("int8", "uint8", "int32", "int64", "bool")}
                     | {(d, op) for d in ("float64", "float32", "float16", "bfloat16")
                        for op in ("BAND", "BOR", "BXOR")})
    assert all("error" in r for _, rec in refused for r in rec["ranks"])


def _corrupt(value):
    """Change the first number in a nested value; return (new value, changed?)."""
    if isinstance(value, list):
        for i, v in enumerate(value):
            new, changed = _corrupt(v)
            if changed:
                return value[:i] + [new] + value[i + 1:], True
        return value, False
    if isinstance(value, bool):
        return not value, True
    if isinstance(value, (int, float)):
        return value + 1, True
    return value, False


@pytest.mark.parametrize("collective", COLLECTIVES)
def test_check_catches_a_corrupted_record(torch_records, collective, capsys):
    case, rec = next((c, r) for c, r in torch_records[4]
                     if c["collective"] == collective and c["dtype"] == "float32"
                     and not c["gloo_refuses"] and not _model_refuses({**c, "world_size": 4}))
    assert check(rec) == [True] * 4
    out = registry.OUTPUT[collective]
    exp = expected_after(rec)
    rank = next(r for r in range(4) if exp[r][out] is not UNSPECIFIED and exp[r][out] is not None
                and _corrupt(rec["ranks"][r]["after"][out])[1])
    bad = copy.deepcopy(rec)
    bad["ranks"][rank]["after"][out] = _corrupt(bad["ranks"][rank]["after"][out])[0]
    assert check(bad) == [r != rank for r in range(4)]
    assert report(bad)[rank] is False
    assert f"rank {rank} ✗  {out} = " in capsys.readouterr().out
    bad = copy.deepcopy(rec)
    del bad["ranks"][rank]["after"][out]
    assert check(bad)[rank] is False


# ------------------------------------------------------------ send_recv

def test_send_recv_by_hand(capsys):
    befores = [{"tensor": None}, {"tensor": [0.0, 0.0]}, {"tensor": [21.0, 22.0]}]
    params = {"src": 2, "dst": 1}
    exp = plain(expected_after(record("send_recv", befores, params)))
    assert exp == [{"tensor": None}, {"tensor": [21.0, 22.0]}, {"tensor": [21.0, 22.0]}]
    good = [{"tensor": None}, {"tensor": [21.0, 22.0]}, {"tensor": [21.0, 22.0]}]
    assert report(record("send_recv", befores, params, good)) == [True, True, True]
    assert capsys.readouterr().out.splitlines() == [
        "rank 0 ✓  tensor = None (not part of this send/recv)",
        "rank 1 ✓  tensor = [21.0, 22.0] (dst: received from rank 2)",
        "rank 2 ✓  tensor = [21.0, 22.0] (src: sent to rank 1, unchanged)"]
    # the buffer left as it was, a sender that changed its tensor, a bystander that got data
    for r, wrong in ((1, [0.0, 0.0]), (2, [0.0, 0.0]), (0, [21.0, 22.0])):
        afters = copy.deepcopy(good)
        afters[r]["tensor"] = wrong
        assert check(record("send_recv", befores, params, afters)) == [q != r for q in range(3)]
    # a bystander may hold a tensor of its own: it must stay as it was
    befores[0] = {"tensor": [5.0]}
    assert check(record("send_recv", befores, params, [{"tensor": [5.0]}] + good[1:])) == [True] * 3
    # the recv buffer may have another shape with the same number of elements
    rec = record("send_recv", [{"tensor": [[1, 2], [3, 4]]}, {"tensor": [0, 0, 0, 0]}],
                 {"src": 0, "dst": 1}, dtype="int64")
    assert plain(expected_after(rec))[1] == {"tensor": [1, 2, 3, 4]}


def test_send_recv_examples_and_predictions():
    assert example_befores("send_recv", 3) == [{"tensor": [1.0, 1.0]}, {"tensor": [0.0, 0.0]},
                                                {"tensor": None}]
    assert example_befores("send_recv", 2, {"src": 1}) == [{"tensor": [0.0, 0.0]},
                                                           {"tensor": [11.0, 11.0]}]
    for bad in ({"src": 1, "dst": 1}, {"src": 0, "dst": 3}):
        with pytest.raises(ValueError, match="two different ranks"):
            example_befores("send_recv", 3, bad)
    afters = model_after("send_recv", example_befores("send_recv", 4, {"src": 3, "dst": 0}),
                         {"src": 3, "dst": 0})
    assert checks.grade([[31.0] * 2, None, None, [31.0] * 2], [a["tensor"] for a in afters],
                        "tensor") == [True] * 4
