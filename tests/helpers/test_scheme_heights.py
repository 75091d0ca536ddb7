"""Each page's scheme picture (the `scheme` cell, 4 ranks) fits the first screen at 1280 × 800
under the title and "What you will learn": at most 370 px tall as displayed (the PNG the
inline backend prints, bbox_inches="tight" at dpi 100, scaled to the column where wider),
and it passes the figure audit at 2, 3 and 4 ranks."""
from __future__ import annotations

import io
import struct
from typing import Callable

import matplotlib
import pytest
from matplotlib.figure import Figure

from helpers.figures.audit import audit
from helpers.figures.column import COLUMN_PX

MAX_SHOWN_PX = 370


def _mesh(n: int) -> Figure:
    from helpers.training import two_d
    from helpers.training.mesh import mesh_shape

    dp, tp = mesh_shape(n)
    return two_d.plot_mesh(dp, tp, f"{n} ranks as a {dp} × {tp} mesh")


def _drawings() -> dict[str, Callable[[int], Figure]]:
    """The scheme cells' calls (notebooks 14, 16–20, 22–25), by world size."""
    from helpers.fitting import accumulation as acc
    from helpers.fitting.accumulation_figures import draw_scheme
    from helpers.fitting.schedules_figures import draw_plans
    from helpers.scale.algorithms_figures import draw_schemes
    from helpers.training.schemes import draw_groups, draw_zero
    from helpers.training.schemes_split import draw_schedules, draw_tensor_parallel
    from helpers.transformer.experts_figures import draw_moe
    from helpers.transformer.sequence_parallel_figures import draw_block_split

    return {"14 draw_groups": draw_groups, "16 draw_zero": draw_zero,
            "17 draw_tensor_parallel": draw_tensor_parallel,
            "18 draw_schedules": lambda n: draw_schedules(n, 8),
            "19 plot_mesh": _mesh, "20 draw_block_split": draw_block_split,
            "22 draw_moe": draw_moe, "23 draw_scheme": lambda n: draw_scheme(n, acc.K_STEPS),
            # interleaved 1F1B needs m a multiple of p: 8 at 2 and 4 ranks (the page's), 6 at 3
            "24 draw_plans": lambda n: draw_plans(n, 8 if 8 % n == 0 else 2 * n),
            "25 draw_schemes": draw_schemes}


NAMES = list(_drawings())


def shown_height(fig: Figure) -> float:
    """The figure's height in px on the page: its PNG as the inline backend prints it,
    scaled down to the column where it is wider."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight", dpi=100)
    width, height = struct.unpack(">II", buffer.getvalue()[16:24])
    return height * min(1.0, COLUMN_PX / width)


def test_the_height_is_the_png_s_scaled_to_the_column():
    import matplotlib.pyplot as plt

    heights = {}
    for inches in (4, 16):
        fig = plt.figure(figsize=(inches, 3), dpi=100)
        fig.add_subplot().plot([0, 1])
        plt.close(fig)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", bbox_inches="tight", dpi=100)
        png = struct.unpack(">II", buffer.getvalue()[16:24])
        heights[inches] = png, shown_height(fig)
    (width, height), shown = heights[4]
    assert width < COLUMN_PX and shown == height                  # shown at its own size
    (width, height), shown = heights[16]
    assert width > COLUMN_PX and shown == pytest.approx(height * COLUMN_PX / width)
    assert shown < 0.7 * height                                   # scaled to the column


@pytest.mark.parametrize("name", NAMES)
def test_the_scheme_at_4_ranks_fits_the_first_screen(name):
    fig = _drawings()[name](4)
    assert shown_height(fig) <= MAX_SHOWN_PX, (name, shown_height(fig))


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("name", NAMES)
def test_the_scheme_reads_at_2_3_and_4_ranks(name, n):
    matplotlib.use("Agg")
    result = audit(_drawings()[name](n))
    assert not result.problems(), (name, n, result.problems())
