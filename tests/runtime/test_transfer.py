"""helpers.runtime.transfer: the one data format between the engines and the notebook,
through ipyparallel's own serialisation (what `cluster.pull` sends). (The runtime layer's
rule that it imports nothing from the rest of helpers: tests/tools/test_architecture.py.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from ipyparallel.serialize import deserialize_object, serialize_object

from helpers.runtime.transfer import decode, encode


def _over_the_wire(value):
    """encode on the "engine", ipyparallel's serialisation, decode in the "notebook"."""
    buffers = [bytes(b) for b in serialize_object(encode(value))]
    received, _ = deserialize_object(buffers)
    return decode(received)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bfloat16,
                                   torch.bool])
def test_a_tensor_arrives_as_a_cpu_tensor_of_its_dtype(dtype):
    sent = (torch.arange(6) % 3).to(dtype).reshape(2, 3)
    got = _over_the_wire(sent)
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.device.type == "cpu"
    assert got.shape == (2, 3) and torch.equal(got, sent)


def test_encode_detaches_copies_and_names_devices():
    weight = torch.ones(4, requires_grad=True)
    whole = torch.arange(1000.0)
    view = whole[10:12]
    encoded = encode({"w": weight, "view": view, "where": torch.device("cuda", 1),
                      "cpu": torch.device("cpu")})
    assert not encoded["w"].requires_grad and encoded["w"].grad_fn is None
    assert encoded["where"] == "cuda:1" and encoded["cpu"] == "cpu"
    # a copy of the view alone: not the 1000-element storage behind it, not shared
    assert encoded["view"].untyped_storage().nbytes() == 2 * 4
    whole[10] = -1.0
    assert encoded["view"].tolist() == [10.0, 11.0]


def test_containers_keep_their_nesting():
    sent = {"before": {"tensor": torch.zeros(2), "scatter_list": [torch.ones(2), None]},
            "pair": (torch.tensor([1, 2]), "x"), "by_rank": {3: [[torch.tensor(True)]]}}
    got = _over_the_wire(sent)
    assert set(got) == {"before", "pair", "by_rank"}
    assert torch.equal(got["before"]["tensor"], torch.zeros(2))
    assert torch.equal(got["before"]["scatter_list"][0], torch.ones(2))
    assert got["before"]["scatter_list"][1] is None
    assert isinstance(got["pair"], list) and got["pair"][1] == "x"      # a tuple: a list
    assert got["pair"][0].tolist() == [1, 2] and got["by_rank"][3][0][0].item() is True


def test_values_without_tensors_come_back_as_they_were():
    sent = {"rank": 2, "loss": 0.25, "name": "all_reduce", "none": None, "flag": False,
            "nested": {"calls": [1, 2, {"measured": None}]}, "inf": float("inf")}
    assert _over_the_wire(sent) == sent


def test_numpy_arrays_arrive_as_writable_arrays():
    sent = {"big": np.arange(100_000.0), "small": [np.ones(3, dtype=np.int32)]}
    got = _over_the_wire(sent)
    for array, original in ((got["big"], sent["big"]), (got["small"][0], sent["small"][0])):
        assert isinstance(array, np.ndarray) and array.dtype == original.dtype
        assert np.array_equal(array, original) and array.flags.writeable
    got["big"][0] = -1.0                      # decode copied the read-only message view
