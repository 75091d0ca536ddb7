"""helpers.scale.algorithms_maps: the drawn peer maps hold the bytes they were given."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from helpers.figures.audit import audit              # noqa: E402
from helpers.scale.algorithms_maps import plot_peer_maps   # noqa: E402

S = 1024


def test_each_cell_is_its_bytes_over_s_in_its_panel():
    ring = [[0, 0, 3 * S // 2], [3 * S // 2, 0, 0], [0, 3 * S // 2, 0]]
    tree = [[0, S, S], [0, 0, 0], [0, 0, 0]]
    fig = plot_peer_maps({"all_reduce": ring, "broadcast": tree}, S)
    texts = {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts}
    assert texts["cell:all_reduce:1:0"] == "1.50" and texts["cell:all_reduce:0:1"] == "0.00"
    assert texts["cell:broadcast:0:2"] == "1.00" and texts["cell:broadcast:2:0"] == "0.00"
    assert [ax.get_title() for ax in fig.axes] == ["gloo's all_reduce", "gloo's broadcast"]
    image = fig.axes[0].images[0].get_array()
    assert image[1][0] == 1.5 and image[0][0] == 0


def test_the_maps_read_at_1280_px():
    maps = {name: [[(i + 1) % 4 == j for j in range(4)] for i in range(4)]
            for name in ("all_reduce", "reduce", "all_gather")}
    found = audit(plot_peer_maps({k: [[v * S for v in row] for row in m]
                                  for k, m in maps.items()}, S))
    assert found.min_text_px >= 9, found


def test_tree_loads_hold_each_rank_and_outline_the_busiest():
    from helpers.scale.algorithms_maps import plot_tree_loads

    loads = {"tree": [[1, 1], [2, 1, 1]], "double_tree": [[1, 1], [1.5, 1, 1.5]]}
    fig = plot_tree_loads(loads, [2, 3])
    tree, double = fig.axes
    texts = {t.get_gid(): t.get_text() for ax in fig.axes for t in ax.texts}
    assert texts["load:tree:3:0"] == "2" and texts["load:double_tree:3:2"] == "1.5"
    assert "load:tree:2:2" not in texts                      # rank 2 of a world of 2: blank
    outlined = sorted((p.get_x() + 0.46, p.get_y() + 0.46) for p in double.patches)
    assert outlined == [(0, 0), (0, 1), (1, 0), (2, 1)]     # each row's busiest ranks
    assert audit(fig).min_text_px >= 9
