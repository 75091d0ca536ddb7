"""helpers.collectives.support_figures: notebook 12's survey grids hold the survey's cases."""
from __future__ import annotations

import pytest
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

from helpers.collectives.support_figures import CHANGED, STATUS, layout, plot_support, show_support
from helpers.collectives.support_tables import movement_table, reduction_table

DTYPES = ["float32", "int64"]


def survey() -> dict:
    """A survey as helpers.collectives.support builds it: two reducing collectives that
    differ in one case, one that moves data."""
    cases = []
    for collective in ("all_reduce", "reduce_scatter"):
        for op in ("SUM", "BAND"):
            for dtype in DTYPES:
                case = {"collective": collective, "dtype": dtype, "op": op, "status": "ok"}
                if op == "BAND" and dtype == "float32":
                    case.update(status="refused", error="RuntimeError: Cannot use BAND")
                    if collective == "reduce_scatter":
                        case["changed"] = [0, 1]
                cases.append(case)
    cases += [{"collective": "broadcast", "dtype": "float32", "op": None, "status": "ok"},
              {"collective": "broadcast", "dtype": "int64", "op": None, "status": "wrong",
               "note": "rank(s) 1 disagree with the model"}]
    return {"backend": "gloo", "reducing": ["all_reduce", "reduce_scatter"],
            "collectives": ["all_reduce", "reduce_scatter", "broadcast"], "dtypes": DTYPES,
            "ops": ["SUM", "BAND"], "cases": cases}


def cells(fig) -> list[tuple[str, str, tuple, str, str | None]]:
    """(row label, dtype, fill, text, hatch) of each case of the grid, top to bottom."""
    ax = fig.axes[0]
    rows = {round(t.get_position()[1] - 0.5, 2): t.get_text() for t in ax.get_yticklabels()}
    dtypes = [t.get_text() for t in ax.get_xticklabels()]
    texts = {(round(t.get_position()[0] - 0.5), round(t.get_position()[1] - 0.5, 2)):
             t.get_text() for t in ax.texts}
    found = []
    for p in ax.patches:
        if isinstance(p, Rectangle):
            x, y = round(p.get_x() - 0.04), round(p.get_y() - 0.06, 2)
            found.append((rows[y], dtypes[x], p.get_facecolor(), texts[(x, y)], p.get_hatch()))
    return found


def test_each_case_is_a_cell_of_its_status_and_mark():
    fig = plot_support(reduction_table(survey()))
    got = cells(fig)
    assert len(got) == 2 * 2 * 2                  # two groups (they differ), two ops, two dtypes
    ok, refused = to_rgba(STATUS["ok"][0]), to_rgba(STATUS["refused"][0])
    assert [(label, dtype) for label, dtype, *_ in got[:4]] == [
        ("SUM", "float32"), ("SUM", "int64"), ("BAND", "float32"), ("BAND", "int64")]
    assert [c[2:] for c in got] == [(ok, "✓", None)] * 2 + [(refused, "no (1)", None)] \
        + [(ok, "✓", None)] * 3 + [(refused, "no* (1)", "///"), (ok, "✓", None)]
    names = [t.get_text() for t in fig.axes[0].texts]
    assert names.count("all_reduce") == 1 and names.count("reduce_scatter") == 1
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == [STATUS["ok"][1], STATUS["refused"][1], CHANGED]


def test_the_rows_follow_the_table_and_the_dtypes_are_the_columns():
    table = movement_table(survey())
    fig = plot_support(table)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == DTYPES
    assert [t.get_text() for t in ax.get_yticklabels()] == ["broadcast"]
    got = cells(fig)
    assert got[1][:4] == ("broadcast", "int64", to_rgba(STATUS["wrong"][0]), "WRONG (1)")
    rows, groups = layout(reduction_table(survey()))
    assert [label for _, label, _ in rows] == ["SUM", "BAND"] * 2 and len(groups) == 2
    assert rows[0][0] > groups[0][0] and rows[2][0] > groups[1][0] > rows[1][0]


@pytest.mark.parametrize("make", [reduction_table, movement_table])
def test_show_prints_the_errors_the_cells_number(make, capsys, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", shown.append)
    table = make(survey())
    show_support(table)
    printed = capsys.readouterr().out
    assert printed == ("\n".join(table.legend()) + "\n" if table.legend() else "")
    assert printed.startswith("(1) ") and len(shown) == 1 and shown[0].axes
