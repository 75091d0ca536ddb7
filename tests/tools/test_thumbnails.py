"""The index cards' pictures (tools.thumbnails): per-rank results, notebook 13's diagnosis."""
from __future__ import annotations

import io
import json

from matplotlib.image import imread

from tools.thumbnails import WIDTH_PX, diagnosis_figure, thumbnail


def _record(world_size: int) -> dict:
    return {"collective": "all_reduce", "backend": "gloo", "world_size": world_size,
            "dtype": "float32", "params": {"op": "SUM"},
            "ranks": [{"rank": r, "device": "cpu",
                       "before": {"tensor": {"values": [r + 1.0], "dtype": "float32",
                                             "device": "cpu"}},
                       "after": {"tensor": {"values": [10.0], "dtype": "float32",
                                            "device": "cpu"}}} for r in range(world_size)]}


def test_a_saved_record_gives_its_rank_panels_without_the_diagram(tmp_path):
    from helpers.figures.plots import plot_record

    (tmp_path / "05_all_reduce.json").write_text(json.dumps({"all_reduce": _record(4)}))
    image = imread(io.BytesIO(thumbnail("05_all_reduce", tmp_path)), format="png")
    panels_only = plot_record(_record(4))
    assert [ax.get_gid() for ax in panels_only.axes] == [f"rank{r}" for r in range(4)]
    assert image.shape[1] == WIDTH_PX
    ratio = panels_only.get_figheight() / panels_only.get_figwidth()
    assert abs(image.shape[0] / image.shape[1] - ratio) < 0.01


def test_notebook_13_gets_its_diagnosis_by_rank(tmp_path):
    history = [{"failed": [{"rank": 0, "meaning": "a peer rank went away", "survives": False,
                            "error": "RuntimeError: reset"}],
                "skipped": [], "absent": [], "group_usable": False},
               {"failed": [{"rank": 1, "meaning": "it waited the whole timeout",
                            "survives": False, "error": "RuntimeError: Timed out"}],
                "skipped": [2, 3], "absent": [], "group_usable": False}]
    (tmp_path / "13_debugging.json").write_text(json.dumps(history))
    assert imread(io.BytesIO(thumbnail("13_debugging", tmp_path)), format="png").shape[1] \
        == WIDTH_PX
    texts = [t.get_text() for ax in diagnosis_figure(history).axes for t in ax.texts]
    assert [t for t in texts if t.startswith("rank ")] == [f"rank {r}" for r in range(4)]
    assert texts.count("did not\nrun the cell") == 2 and "ran it" in texts   # rank 0 ran it
    assert "✗ failed\nit waited the\nwhole timeout" in texts


def test_no_saved_results_means_the_page_plot(tmp_path):
    assert thumbnail("00_ranks_and_world", tmp_path) is None
    (tmp_path / "14_groups.json").write_text("{not json")
    assert thumbnail("14_groups", tmp_path) is None
    # results with per-rank rows that are not a collective's record (notebooks 14-19)
    (tmp_path / "15_dp.json").write_text(json.dumps({"ranks": [{"rank": 0, "loss": 1.0}]}))
    assert thumbnail("15_dp", tmp_path) is None
