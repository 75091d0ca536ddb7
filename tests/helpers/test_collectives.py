"""The registry's call arguments (helpers.collectives.registry.tensor_arguments, call_keywords)."""
from __future__ import annotations

import inspect

import pytest
import torch
import torch.distributed as dist

from helpers.collectives.registry import (COLLECTIVES, LIST_ARGS, REDUCING, ROOT, call_keywords,
                                 tensor_arguments)


def arguments(collective: str, rank: int, world_size: int, params: dict | None = None) -> dict:
    def piece(j: int) -> torch.Tensor:
        return torch.full((2,), 10.0 * rank + j + 1)
    def zeros(pieces: int) -> torch.Tensor:
        return torch.zeros(2 * pieces)
    return tensor_arguments(collective, rank, world_size, piece, zeros, torch.cat, params)


@pytest.mark.parametrize("collective", [c for c in COLLECTIVES if c != "send_recv"])
def test_the_names_are_torch_keywords(collective):
    accepted = inspect.signature(getattr(dist, collective)).parameters
    names = list(arguments(collective, 0, 3)) + list(call_keywords(collective, op="SUM"))
    assert [n for n in names if n not in accepted] == []
    assert ("op" in names) == (collective in REDUCING)
    assert (ROOT.get(collective) in names) == (collective in ROOT)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_roles_give_the_shapes_torch_expects(world_size):
    for rank in range(world_size):
        a = arguments("all_gather", rank, world_size)
        assert len(a["tensor_list"]) == world_size
        assert a["tensor"].tolist() == [10.0 * rank + 1] * 2
        a = arguments("all_to_all_single", rank, world_size)
        assert a["output"].shape == a["input"].shape == (2 * world_size,)
        assert a["input"][-1] == 10.0 * rank + world_size
        for collective in [c for c in COLLECTIVES if world_size > 1 or c != "send_recv"]:
            for name, value in arguments(collective, rank, world_size).items():
                assert (isinstance(value, list)) == (name in LIST_ARGS and value is not None)


def test_only_the_root_passes_its_list_and_broadcast_receives_into_zeros():
    ranks = [arguments("scatter", r, 3, {"src": 2}) for r in range(3)]
    assert [a["scatter_list"] is None for a in ranks] == [True, True, False]
    assert [a["tensor"].tolist() for a in ranks] == [[0.0, 0.0]] * 3
    ranks = [arguments("gather", r, 3) for r in range(3)]                  # dst defaults to 0
    assert [a["gather_list"] is None for a in ranks] == [False, True, True]
    ranks = [arguments("broadcast", r, 3, {"src": 1}) for r in range(3)]
    assert [a["tensor"].tolist() for a in ranks] == [[0.0, 0.0], [11.0, 11.0], [0.0, 0.0]]
    ranks = [arguments("send_recv", r, 3, {"src": 2, "dst": 0}) for r in range(3)]
    assert [None if a["tensor"] is None else a["tensor"].tolist() for a in ranks] == \
        [[0.0, 0.0], None, [21.0, 21.0]]


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        arguments("allreduce", 0, 2)
    with pytest.raises(ValueError, match="two different ranks"):
        arguments("send_recv", 0, 2, {"src": 1, "dst": 1})
    with pytest.raises(ValueError, match="no single torch.distributed call"):
        call_keywords("send_recv")
    assert call_keywords("reduce", root=2, op="MAX") == {"dst": 2, "op": "MAX"}
    assert call_keywords("all_gather", op="MAX") == {}
