"""helpers.collectives.backend_table, notebook 12's scheme: torch's documented table of
functions per backend and device, drawn cell by cell as the data says; the figure reads at
1280 px. The notebook's own test holds gloo's CPU column against the survey it shows."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.colors import to_hex

from helpers.collectives.backend_table import (COLUMNS, DOCUMENTED, FILL, SERIES,
                                               documented, draw_backend_table)
from helpers.figures.audit import audit


def _cells(fig) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(function, backend, device) → (mark, fill colour) of every drawn cell."""
    found = {}
    for patch in fig.axes[0].patches:
        gid = patch.get_gid() or ""
        if gid.startswith("cell:"):
            _, function, backend, device, mark = gid.split(":")
            found[(function, backend, device)] = (mark, to_hex(patch.get_facecolor()))
    return found


def test_every_cell_of_the_table_is_drawn_with_its_mark_and_colour():
    fig = draw_backend_table()
    cells = _cells(fig)
    assert len(cells) == len(DOCUMENTED) * len(COLUMNS) == 11 * 6
    for (function, backend, device), (mark, colour) in cells.items():
        assert mark == documented(function, backend, device)
        assert colour == FILL[mark]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("✓") == sum(row.count("✓") for row in DOCUMENTED.values())
    assert texts.count("?") == sum(row.count("?") for row in DOCUMENTED.values()) == 10


def test_the_data_holds_the_documented_cells():
    """Cells read off torch's table by hand (docs/source/distributed.md, section Backends)."""
    assert all(len(row) == len(COLUMNS) and set(row) <= {"✓", "✘", "?"}
               for row in DOCUMENTED.values())
    assert all(documented(f, "gloo", "CPU") == "✓" for f in DOCUMENTED)
    assert all(documented(f, "nccl", "CPU") == "✘" for f in DOCUMENTED)
    assert all(documented(f, "nccl", "GPU") == "✓" for f in DOCUMENTED)
    assert [f for f in DOCUMENTED if documented(f, "gloo", "GPU") == "✘"] == [
        "send", "recv", "barrier"]
    assert documented("reduce_scatter", "mpi", "CPU") == "✘"
    assert documented("reduce_scatter", "mpi", "GPU") == "✘"
    assert documented("all_to_all", "mpi", "GPU") == "?"
    with pytest.raises(ValueError, match="not in torch's table"):
        documented("all_reduce_coalesced", "gloo", "CPU")
    with pytest.raises(ValueError, match="no column xccl GPU"):
        documented("send", "xccl", "GPU")


def test_it_says_it_is_the_documentation_outlines_the_series_and_reads_at_1280_px():
    fig = draw_backend_table()
    assert fig._suptitle.get_text().startswith("torch's documentation (not measured)")
    outlined = {p.get_gid() for p in fig.axes[0].patches
                if (p.get_gid() or "").startswith("series:")}
    assert outlined == {f"series:{b}:{d}" for b, d in SERIES} == {
        "series:gloo:CPU", "series:nccl:GPU"}
    notes = [t.get_text() for t in fig.texts]
    assert "This page probes them on its ranks." in notes
    assert audit(fig).problems() == []
    assert 250 <= fig.get_size_inches()[1] * fig.dpi <= 330
