"""helpers.formatting shows a pulled tensor (or an array) as its values, as the lists
records hold are shown."""
from __future__ import annotations

import numpy as np
import torch

from helpers.formatting import format_value, one_line


def test_one_line_shows_tensors_and_arrays_as_their_values():
    for values in ([1.0, 2.5], [[1, 2], [3, 4]], [True, False]):
        assert one_line(torch.tensor(values)) == one_line(np.array(values)) == one_line(values)
    assert one_line(torch.tensor(3.0)) == one_line(3.0) == "3.0"
    assert one_line([torch.tensor([1.0]), None]) == "[[1.0], None]"
    assert one_line(torch.arange(20.0)) == "[0.0, 1.0, 2.0, ..., 18.0, 19.0]"


def test_format_value_of_a_tensor():
    assert format_value(torch.tensor(2.0)) == format_value(2.0) == "2"
    assert format_value(torch.tensor(0.125)) == "0.125"
    assert format_value(torch.tensor([1.0, 2.5])) == "[1.0, 2.5]"
    assert format_value(np.float32(0.25)) == "0.25" and format_value(np.int64(7)) == "7"
