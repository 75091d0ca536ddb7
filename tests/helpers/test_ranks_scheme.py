"""Notebook 00's scheme (helpers.figures.ranks_scheme): one engine box per rank inside the
process group, rank 0's store that the other ranks connect to, as helpers.runtime starts
them; read from the drawing's gids and texts, at 3, 4 and 5 ranks, and audited."""
from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
from matplotlib.path import Path
from matplotlib.text import Text

from conftest import NOTEBOOKS
from helpers.figures.audit import audit
from helpers.figures.ranks_scheme import draw_ranks
from helpers.runtime import engine, launchers, rendezvous


def by_gid(fig) -> dict:
    return {a.get_gid(): a for ax in fig.axes for a in ax.get_children() if a.get_gid()}


def texts(fig) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def extent(patch) -> tuple[float, float, float, float]:
    b = patch.get_bbox()
    return b.x0, b.y0, b.x1, b.y1


def inside(inner, outer) -> bool:
    a, b = extent(inner), extent(outer)
    return a[0] >= b[0] and a[1] >= b[1] and a[2] <= b[2] and a[3] <= b[3]


def arrow_ends(arrow) -> tuple[np.ndarray, np.ndarray]:
    """(start, the point farthest from it): the tail and the tip of a straight arrow."""
    path = arrow.get_path()
    points = path.vertices[path.codes != Path.CLOSEPOLY]
    start = points[0]
    return start, points[np.argmax(np.hypot(*(points - start).T))]


@pytest.mark.parametrize("n", [3, 4, 5])
def test_one_engine_per_rank_in_one_group_and_rank_0_serves_the_store(n):
    fig = draw_ranks(n)
    gid = by_gid(fig)
    engines = sorted(int(k.split(":")[1]) for k in gid if k.startswith("engine:"))
    assert engines == list(range(n))
    assert all(inside(gid[f"engine:{k}"], gid["group"]) for k in engines)
    assert inside(gid["store"], gid["group"]) and not inside(gid["notebook"], gid["group"])
    lefts = [extent(gid[f"engine:{k}"])[0] for k in engines]
    assert lefts == sorted(lefts)                        # rank order, left to right
    shown = texts(fig)
    for k in engines:
        assert f"engine {k}" in shown and f"rank {k}" in shown
        assert f"device: cpu\nor cuda:{k}" in shown
    assert fig.texts[0].get_text() == f"{n} ranks: one engine = one process = one rank"
    assert f"world_size = {n}" in " ".join(shown)
    # the store sits under rank 0, which serves it; every other rank's arrow ends at it
    x0, y0, x1, y1 = extent(gid["store"])
    e0 = extent(gid["engine:0"])
    assert e0[0] <= x0 and x1 <= e0[2] and y0 >= e0[3]
    connects = sorted(int(k.split(":")[1]) for k in gid if k.startswith("connect:"))
    assert connects == list(range(1, n))
    for k in connects:
        start, tip = arrow_ends(gid[f"connect:{k}"])
        ex0, _, ex1, ey1 = extent(gid[f"engine:{k}"])
        assert ex0 < start[0] < ex1 and abs(start[1] - ey1) < 1e-6     # from rank k
        assert x1 <= tip[0] <= x1 + 0.2 and y0 < tip[1] < y1            # to the store
    _, tip = arrow_ends(gid["serve"])
    assert abs(tip[1] - y0) < 0.1 and x0 < tip[0] < x1
    assert f"ranks {', '.join(map(str, range(1, n)))} connect to it" in " ".join(shown)


@pytest.mark.parametrize("n", [3, 4, 5])
def test_the_scheme_reads_at_1280_px(n):
    found = audit(draw_ranks(n))
    assert found.problems() == []
    assert found.min_text_px >= 9.0


@pytest.mark.docs
def test_the_picture_says_what_the_runtime_does():
    """127.0.0.1 is the local launcher's rendezvous host and open_store's default; the
    store is a TCPStore; init_process_group gets the backend, the store, the rank and the
    world size (helpers.runtime.rendezvous.join)."""
    shown = " ".join(texts(draw_ranks(4)))
    assert launchers.LOOPBACK == "127.0.0.1"
    assert inspect.signature(engine.open_store).parameters["host"].default == "127.0.0.1"
    assert "TCPStore\non 127.0.0.1" in shown
    join = inspect.getsource(rendezvous.join)
    assert "dist.TCPStore(" in join
    assert "dist.init_process_group(backend, store=store, rank=rank, world_size=world_size" \
        in join
    assert "init_process_group(backend, store, rank, world_size)" in shown


def test_other_world_sizes_are_refused():
    for n in (2, 6):
        with pytest.raises(ValueError, match="3 to 5 ranks"):
            draw_ranks(n)


@pytest.mark.docs
def test_notebook_00_draws_it_for_4_ranks_under_its_title():
    cells = json.loads((NOTEBOOKS / "00_ranks_and_world.ipynb").read_text())["cells"]
    scheme, text = cells[1], cells[2]
    assert (scheme["id"], text["id"]) == ("scheme", "scheme-text")
    assert "scheme" in scheme["metadata"]["tags"]
    assert "draw_ranks(4)" in "".join(scheme["source"])
    assert "".join(text["source"]).startswith("## What the picture shows")
    assert "4 ranks" in "".join(text["source"])
