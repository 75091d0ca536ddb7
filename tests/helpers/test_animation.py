"""Step-through animations (helpers.figures): they step, start at the recorded `before`,
end at the recorded `after` (read back from the drawn artists), and load nothing remote."""
from __future__ import annotations

import copy
import json

import matplotlib
import numpy as np
import pytest

from animation_checks import FRAME, REMOTE, players, ring_texts, written_texts
from helpers.figures.animate_records import animate_record
from helpers.figures.animate_ring import animate_ring
from helpers.figures.animate_timeline import animate_barrier, animate_timeline
from helpers.figures.animation import read_frame, show_animation
from helpers.figures.animate_routes import SENT, WRITTEN, pieces, routes
from helpers.collectives.arrays import reduce_arrays
from helpers.collectives.examples import example_befores, model_after
from helpers.formatting import format_value
from helpers.collectives.models import UNSPECIFIED
from helpers.figures.panels import flatten
from helpers.collectives.ring import example_data, ring_model

matplotlib.use("Agg")
# Most tests step through frames without rendering them to a page: matplotlib warns.
pytestmark = pytest.mark.filterwarnings("ignore:Animation was deleted")

CASES = [("scatter", {"src": 1}), ("gather", {"dst": 1}), ("broadcast", {"src": 1}),
         ("reduce", {"dst": 1, "op": "SUM"}), ("all_reduce", {"op": "MAX"}),
         ("all_gather", {}), ("all_gather_single", {}), ("reduce_scatter", {"op": "SUM"}),
         ("reduce_scatter_single", {"op": "PRODUCT"}), ("all_to_all", {}),
         ("all_to_all_single", {}), ("send_recv", {"src": 1, "dst": 0})]


def model_record(collective: str, world_size: int, params: dict | None = None) -> dict:
    """A record as a notebook saves it, made by the NumPy models (no cluster)."""
    params = dict(params or {})
    befores = example_befores(collective, world_size, params)
    afters = model_after(collective, befores, params)
    for b, a in zip(befores, afters):         # reduce's non-dst ranks: keep what was there
        for name, value in a.items():
            if value is UNSPECIFIED:
                a[name] = copy.deepcopy(b[name])
    if collective == "all_to_all_single":
        params.pop("input_split_sizes", None)   # recorded with each rank instead
    return {"collective": collective, "backend": "model", "world_size": world_size,
            "dtype": "float32", "params": params,
            "ranks": [{"rank": r, "device": "cpu", "before": b, "after": a}
                      for r, (b, a) in enumerate(zip(befores, afters))]}


def texts(value) -> list[str]:
    return [] if value is None else [format_value(v) for v in flatten(value)]


def all_frames(anim) -> list:
    return [read_frame(anim, i) for i in range(anim.frame_count)]


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("collective, params", CASES, ids=[c for c, _ in CASES])
def test_record_animation_steps_from_before_to_the_recorded_after(collective, params,
                                                                   world_size):
    record = model_record(collective, world_size, params)
    frames = all_frames(animate_record(record))
    assert len(frames) > 2
    for i in range(1, len(frames)):
        assert frames[i] != frames[i - 1], f"frame {i} repeats frame {i - 1}"
    first, last = frames[0], frames[-1]
    sent, written = SENT[collective], WRITTEN[collective]
    for r, rank in enumerate(record["ranks"]):
        assert first["ranks"][r]["sent"] == texts(rank["before"].get(sent))
        assert first["ranks"][r]["written"] == texts(rank["before"].get(written))
        assert last["ranks"][r]["written"] == written_texts(record, r, written)
    assert first["moving"] == [] and last["moving"] == []
    assert any(f["moving"] for f in frames[1:-1]), "nothing ever moves"
    matplotlib.pyplot.close("all")


def test_the_last_frame_is_the_record_not_the_model():
    record = model_record("all_gather", 3)
    record["ranks"][2]["after"]["tensor_list"][0] = [999.0, 998.0]   # a wrong delivery
    last = read_frame(animate_record(record), -1 % 6)
    assert last["ranks"][2]["written"][:2] == ["999", "998"]
    matplotlib.pyplot.close("all")


def test_pieces_in_flight_carry_the_sent_values_towards_their_receiver():
    record = model_record("scatter", 4, {"src": 2})
    anim = animate_record(record)
    early, landed = read_frame(anim, 1)["moving"], read_frame(anim, 4)["moving"]
    assert sorted(t for *_, t in early) == sorted(texts(
        record["ranks"][2]["before"]["scatter_list"]))
    # landed: each piece sits on its receiver's row, one row per rank
    rows = sorted({round(y, 1) for _, y, _ in landed})
    assert len(rows) == 4
    matplotlib.pyplot.close("all")


def test_reductions_show_the_contributions_then_the_recorded_result():
    record = model_record("all_reduce", 3, {"op": "SUM"})
    frames = all_frames(animate_record(record))
    combining = frames[-2]["ranks"][0]["written"]
    assert combining == ["1+11+21"] * 2
    assert frames[-1]["ranks"][0]["written"] == ["33", "33"]
    matplotlib.pyplot.close("all")


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.parametrize("collective, params", CASES, ids=[c for c, _ in CASES])
def test_routes_move_each_piece_where_the_model_puts_it(collective, params, world_size):
    """Applying the routes to `before` gives what the NumPy model expects after the call."""
    record = model_record(collective, world_size, params)
    befores = [r["before"] for r in record["ranks"]]
    sent, written = SENT[collective], WRITTEN[collective]
    def cut(arg: str, r: int) -> list:
        return pieces(collective, arg, befores[r].get(arg), r, world_size, befores[r],
                      record["params"])
    moved = [np.array(flatten(b.get(written)), dtype=float) if b.get(written) is not None
             else None for b in befores]
    for path in routes(collective, world_size, record["params"],
                       [cut(sent, r) for r in range(world_size)],
                       [cut(written, r) for r in range(world_size)]):
        parts = [np.array(flatten(befores[q][sent]), dtype=float)[s] for q, s in path.sources]
        moved[path.dst_rank][path.dst] = reduce_arrays(parts, params.get("op", "SUM"))
    for r, rank in enumerate(record["ranks"]):
        after = rank["after"].get(written)
        expected = None if after is None else np.array(flatten(after), dtype=float)
        assert (moved[r] is None) == (expected is None)
        if expected is not None:
            np.testing.assert_allclose(moved[r], expected)


def test_uneven_all_to_all_single_is_cut_by_the_recorded_split_sizes():
    record = model_record("all_to_all_single", 3, {"input_split_sizes": [[1, 2, 1]] * 3})
    last = all_frames(animate_record(record))[-1]
    for r in range(3):
        assert last["ranks"][r]["written"] == written_texts(record, r, "output")
    assert len(last["ranks"][1]["written"]) == 6        # 2 elements from each of 3 ranks
    matplotlib.pyplot.close("all")


def test_bad_records_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="unknown collective"):
        animate_record({"collective": "shuffle", "world_size": 1, "ranks": [{"rank": 0}]})
    big = model_record("all_reduce", 2)
    for rank in big["ranks"]:
        rank["before"]["tensor"] = rank["after"]["tensor"] = [1.0] * 100
    with pytest.raises(ValueError, match="at most 48"):
        animate_record(big)
    with pytest.raises(ValueError, match="travel_frames"):
        animate_record(model_record("scatter", 2), travel_frames=0)


@pytest.mark.parametrize("n, chunk_len", [(2, 1), (3, 2), (4, 1), (6, 1)])
def test_ring_animation_is_one_frame_per_step_from_the_measured_states(n, chunk_len):
    trace = ring_model(example_data(n, chunk_len))
    measured = trace.tensors()
    frames = all_frames(animate_ring(trace, measured))
    per_step = 2 if n <= 4 else 1
    assert len(frames) == 1 + per_step * 2 * (n - 1)
    for i in range(1, len(frames)):
        assert frames[i] != frames[i - 1]

    assert frames[0]["ranks"] == ring_texts(measured[0], n)
    assert frames[-1]["ranks"] == ring_texts(measured[-1], n)
    if per_step == 2:     # in flight: every rank's sent chunk, n tokens
        assert len(frames[1]["moving"]) == n
    matplotlib.pyplot.close("all")


def test_ring_animation_shows_measured_values_and_refuses_missing_steps():
    trace = ring_model(example_data(3))
    measured = trace.tensors().copy()
    measured[-1, 1, 0] = 7.0                      # what a buggy ring would have kept
    assert read_frame(animate_ring(trace, measured), 8)["ranks"][1][0] == "7"
    with pytest.raises(ValueError, match="every step kept"):
        animate_ring(trace, measured[:, :2])
    with pytest.raises(ValueError, match="every step kept"):
        animate_ring(trace, measured[:1])


def test_ring_animation_of_an_unfinished_exercise_shows_the_states_kept():
    trace = ring_model(example_data(4))
    kept = trace.tensors()[:4]              # phase 1 only: the all-gather not written yet
    frames = all_frames(animate_ring(trace, kept))
    assert len(frames) == 1 + 2 * 3
    assert frames[-1]["ranks"] == ring_texts(kept[-1], 4)
    assert "only 4 of 7 states kept" in frames[-1]["title"]
    matplotlib.pyplot.close("all")
    matplotlib.pyplot.close("all")


EVENTS = {"GPipe": [[("forward", 0, 0.0, 0.01), ("send", 0, 0.01, 0.012)],
                    [("recv", 0, 0.0, 0.012), ("forward", 0, 0.012, 0.02)]],
          "1F1B": [[("forward", 0, 0.0, 0.004)], [("backward", 1, 0.002, 0.03)]]}


def test_timeline_fills_in_and_ends_with_every_recorded_span():
    frames = all_frames(animate_timeline(EVENTS, title="two schedules", frames=8))
    assert len(frames) == 8
    for i in range(1, 8):
        assert frames[i] != frames[i - 1]
    assert all(rank == [] for spans in frames[0]["spans"].values() for rank in spans)
    for name, by_rank in EVENTS.items():
        for r, events in enumerate(by_rank):
            drawn = frames[-1]["spans"][name][r]
            assert [k for k, *_ in drawn] == [k for k, *_ in events]
            np.testing.assert_allclose([x for _, *x in drawn],
                                       [[b, e] for _, _, b, e in events], atol=1e-12)
    widths = [sum(x1 - x0 for spans in f["spans"].values() for rank in spans
                  for _, x0, x1 in rank) for f in frames]
    assert widths == sorted(widths) and widths[0] == 0 < widths[-1]
    matplotlib.pyplot.close("all")


def test_timeline_refuses_spans_that_cannot_be_drawn():
    with pytest.raises(ValueError, match="rank 0: a forward span from 0.2 to 0.1"):
        animate_timeline({"GPipe": [[("forward", 0, 0.2, 0.1)]]})
    with pytest.raises(ValueError, match="no timeline"):
        animate_timeline({})


def test_barrier_animation_ends_with_each_rank_leaving_when_it_did():
    timings = [{"rank": r, "arrived": 0.2 * r, "left": 0.61 + 0.001 * r} for r in range(3)]
    last = all_frames(animate_barrier(timings))[-1]["spans"]["dist.barrier()"]
    for r, t in enumerate(timings):
        ends = {kind: x1 for kind, _, x1 in last[r]}
        assert ends["waiting in dist.barrier()"] == pytest.approx(t["left"])
        if t["arrived"] > 0:
            assert ends["working"] == pytest.approx(t["arrived"])
    matplotlib.pyplot.close("all")


@pytest.mark.parametrize("make", ["all_to_all", "ring", "timeline"])
def test_shown_html_is_self_contained_light_and_says_what_its_last_frame_shows(make):
    if make == "all_to_all":
        anim = animate_record(model_record("all_to_all", 4))
    elif make == "ring":
        trace = ring_model(example_data(4))
        anim = animate_ring(trace, trace.tensors())
    else:
        anim = animate_timeline(EVENTS)
    expected_last = read_frame(anim, anim.frame_count - 1)
    page = show_animation(anim).data
    assert page.count(FRAME) == anim.frame_count          # every frame, as an embedded PNG
    assert not REMOTE.search(page) and "http://" not in page and "https://" not in page
    assert len(page.encode()) < 300 * 1024, f"{len(page.encode()) / 1024:.0f} KB"
    [player] = players(page)
    assert int(player["attrs"]["data-frames"]) == anim.frame_count
    assert int(player["attrs"]["data-frame"]) == anim.frame_count - 1     # opens on the last
    assert json.loads(player["attrs"]["data-last-frame"]) == json.loads(json.dumps(expected_last))
    assert not matplotlib.pyplot.fignum_exists(anim._fig.number)   # closed: shown once


def test_an_animation_too_heavy_for_the_page_is_refused_not_cut(monkeypatch):
    from helpers.figures import animation

    monkeypatch.setattr(animation, "EMBED_LIMIT_MB", 0.05)     # ~2 frames of this size
    anim = animate_record(model_record("all_to_all", 4))
    with pytest.raises(ValueError, match=r"only \d+ of 6 frames fit in 0.05 MB"):
        show_animation(anim)
    matplotlib.pyplot.close("all")
