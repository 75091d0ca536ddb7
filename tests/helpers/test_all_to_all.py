"""helpers.collectives.all_to_all (notebook 08) without engines: the exchange matrices,
their transpose, the figure."""
from __future__ import annotations

import copy

import matplotlib

matplotlib.use("Agg")

import pytest

from helpers.collectives import all_to_all, examples


def model_record(collective: str, world_size: int, params: dict | None = None) -> dict:
    befores = examples.example_befores(collective, world_size, params)
    afters = examples.model_after(collective, befores, params)
    return {"collective": collective, "backend": "gloo", "world_size": world_size,
            "dtype": "float32", "params": {},
            "ranks": [{"rank": r, "device": "cpu", "before": b, "after": a}
                      for r, (b, a) in enumerate(zip(befores, afters))]}


@pytest.mark.parametrize("world_size", [2, 3, 5])
@pytest.mark.parametrize("collective", ["all_to_all", "all_to_all_single"])
def test_exchange_matrices_are_transposes(collective, world_size):
    record = model_record(collective, world_size)
    sent, received = all_to_all.sent_matrix(record), all_to_all.received_matrix(record)
    assert sent[1][0] == [11.0, 11.0] and received[0][1] == [11.0, 11.0]
    assert received == all_to_all.transpose(sent) and all_to_all.is_transpose(record)
    assert all_to_all.uniform_length(sent, received) == 2     # every cell: 2 elements


def test_uneven_splits_are_cut_by_the_recorded_sizes():
    params = {"input_split_sizes": [[j + 1 for j in range(3)]] * 3}
    record = model_record("all_to_all_single", 3, params)
    assert record["ranks"][0]["before"]["input_split_sizes"] == [1, 2, 3]
    sent, received = all_to_all.sent_matrix(record), all_to_all.received_matrix(record)
    assert sent[0] == [[1.0], [2.0, 2.0], [3.0, 3.0, 3.0]]
    assert received[2] == [[3.0] * 3, [13.0] * 3, [23.0] * 3]
    assert all_to_all.is_transpose(record)
    assert all_to_all.uniform_length(sent, received) is None  # cells of 1, 2 and 3 elements
    assert all_to_all.chunk_text([13.0] * 3) == "13 ×3" and all_to_all.chunk_text([]) == "—"
    assert all_to_all.chunk_text([1.0, 2.0]) == "1,2" and all_to_all.chunk_text([7.0, 7.0], False) == "7"


def test_a_wrong_delivery_is_not_a_transpose():
    record = model_record("all_to_all", 3)
    bad = copy.deepcopy(record)
    bad["ranks"][1]["after"]["output_tensor_list"][2] = [99.0, 99.0]
    assert not all_to_all.is_transpose(bad)
    assert all_to_all.received_matrix(bad) != all_to_all.transpose(all_to_all.sent_matrix(bad))


def test_matrix_input_errors():
    with pytest.raises(ValueError, match="not an all_to_all record"):
        all_to_all.sent_matrix(model_record("all_gather", 2))
    with pytest.raises(ValueError, match="must be 2 sizes adding up to 4"):
        all_to_all.split_sizes({"input_split_sizes": [1, 2]}, "input_split_sizes", 4, 2)
    with pytest.raises(ValueError, match="split evenly"):
        all_to_all.split_sizes({}, "input_split_sizes", 5, 2)


def test_plot_exchange_draws_both_matrices_in_plot_record_colours():
    from helpers.figures import panels

    record = model_record("all_to_all", 3)
    fig = all_to_all.plot_exchange(record)
    cells = {p.get_gid(): p.get_facecolor() for ax in fig.axes for p in ax.patches}
    assert len(cells) == 2 * 9
    colors = panels.record_colors(panels.build_panels(record))
    from matplotlib.colors import to_rgba
    assert cells["sent[1][0]=11"] == cells["received[0][1]=11"] == to_rgba(colors("11"))
    assert cells["sent[2][1]=22"] == cells["received[1][2]=22"] == to_rgba(colors("22"))
    assert "transposed ✓" in fig.texts[0].get_text()
