"""The "At scale (model)" boxes (helpers.scale.at_scale): each box's numbers recomputed here
from the closed forms of the series' models, at both of its configurations, so that a box
cannot drift from the α-β model, the ring model, the planner or the bubble formulas."""
from __future__ import annotations

import json
import math
import re

import pytest

from conftest import NOTEBOOKS
from helpers.scale import at_scale as A
from helpers.scale import planner
from helpers.scale.at_scale_training import boxes
from tools import series
from helpers.scale.planner import LLAMA3_8B, LLAMA3_70B, LLAMA3_405B

BOXES = {stem: make() for stem, make in boxes().items()}
ALPHA, GIB = 5.0, 1 << 30
BETA = {"NVLink": 450.0, "InfiniBand": 50.0}           # GB/s = 1e3 bytes per µs
PEAK_US = 0.4 * 989e12 / 1e6                           # FLOP per µs at 40 % of the peak
PSI8, PSI70 = LLAMA3_8B.parameters(), LLAMA3_70B.parameters()


def ring_all_reduce_us(size: float, n: int, link: str) -> float:
    return ALPHA * 2 * (n - 1) + 2 * (n - 1) / n * size / (BETA[link] * 1e3)


def ring_half_us(size: float, n: int, link: str) -> float:     # all_gather, reduce_scatter
    return ALPHA * (n - 1) + (n - 1) / n * size / (BETA[link] * 1e3)


def rows(stem: str) -> list[tuple]:
    return list(BOXES[stem].rows)


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    return a == pytest.approx(b, rel=rel)


def test_there_is_a_box_for_every_page_from_05_on():
    assert sorted(BOXES) == [stem[:2] for stem in series.load() if stem >= "05"]


@pytest.mark.parametrize("stem", sorted(BOXES))
def test_every_box_is_small_and_shows_at_least_two_configurations(stem):
    box = BOXES[stem]
    assert 2 <= len(box.rows) <= 6 and len(box.columns) <= 5, (len(box.rows), box.columns)
    assert all(len(row) == len(box.columns) for row in box.rows)
    assert len({row[:2] for row in box.rows}) == len(box.rows), "two rows say the same"
    assert box.stem == stem and box.model


def test_the_figures_show_the_values_the_models_use():
    shown = {A.NVLINK: 450.0, A.INFINIBAND: 50.0, A.ALPHA: 5.0, A.PEAK: 989e12 / 1e12,
             A.MFU: 40.0, A.HBM: 80.0, A.NCCL_TIMEOUT: 10.0}
    scale = {A.PEAK: 1e12, A.MFU: 0.01, A.HBM: 1e9, A.NCCL_TIMEOUT: 60.0}
    for figure, number in shown.items():
        assert float(figure.shown.split()[0]) == number, figure
        assert figure.value == pytest.approx(number * scale.get(figure, 1.0)), figure


@pytest.mark.parametrize("stem,kind,half", [("05", "all_reduce", False),
                                            ("06", "all_gather", True),
                                            ("07", "reduce_scatter", True),
                                            ("08", "all_to_all", True)])
def test_one_collective_at_8_over_nvlink_and_64_over_infiniband(stem, kind, half):
    for row in rows(stem):
        n, link = (8, "NVLink") if "8 H100s" in row[1] else (64, "InfiniBand")
        size = {"1 GiB": GIB}.get(row[0], 2 * PSI8 if "Llama-3-8B" in row[0]
                                  else 8192 * 8192 * 2)
        factor = (n - 1) / n * (1 if half else 2)
        expected = ring_half_us(size, n, link) if half else ring_all_reduce_us(size, n, link)
        assert close(row[2], factor * size) and close(row[3], expected), row
        if kind in ("all_gather", "reduce_scatter"):
            assert close(row[4], expected / ring_all_reduce_us(size, n, link))
            assert 0.45 < row[4] < 0.55


def test_09_a_send_is_alpha_plus_s_over_beta():
    for row in rows("09"):
        shapes = LLAMA3_8B if "8B" in row[0] else LLAMA3_70B
        size = 8192 * shapes.hidden * 2
        assert close(row[2], size) and close(row[3], ALPHA + size / (BETA[row[1]] * 1e3))


def test_10_the_ring_pays_alpha_2_n_minus_1_times():
    for row, (n, link) in zip(rows("10"), [(8, "NVLink"), (64, "InfiniBand"),
                                           (512, "InfiniBand")]):
        assert row[1] == 2 * (n - 1) and close(row[2], 2 * (n - 1) / n * GIB)
        assert close(row[3], ring_all_reduce_us(1 << 20, n, link))
        assert close(row[4], ring_all_reduce_us(GIB, n, link))


def test_11_busbw_is_near_the_link_and_algbw_is_not():
    for kind, where, t, algbw, busbw in rows("11"):
        n, link = (8, "NVLink") if "8 H100s" in where else (64, "InfiniBand")
        expected = (ring_all_reduce_us if kind == "all_reduce" else ring_half_us)(GIB, n, link)
        factor = 2 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n
        assert close(t, expected) and close(algbw, GIB / t / 1e3)
        assert close(busbw, algbw * factor) and 0.95 * BETA[link] < busbw < BETA[link]


def test_12_float32_sends_twice_the_bytes_of_bfloat16():
    by = {(r[0], r[1]): r for r in rows("12")}
    for where in ("8 H100s, NVLink", "64 H100s, InfiniBand"):
        fp32, bf16 = by["float32", where], by["bfloat16", where]
        assert close(fp32[2], 4 * PSI8) and close(bf16[2], 2 * PSI8)
        assert close(fp32[3], 2 * bf16[3])


def test_13_a_hang_holds_every_gpu_for_the_nccl_default_timeout():
    for row, (n, link) in zip(rows("13"), [(8, "NVLink"), (64, "InfiniBand")]):
        assert row[1] == 10 and close(row[2], n * 10 / 60)
        assert row[3] == int(600e6 / ring_all_reduce_us(2 * PSI8, n, link))


def test_13_the_timeout_is_torchs_own_default():
    header = A.NCCL_TIMEOUT.source
    assert "ProcessGroupNCCL.hpp:157" in header and "10 * 60 * 1000" in header


def test_14_the_hierarchy_sends_an_eighth_across_nodes():
    size = 2 * PSI8
    for flat, hier in zip(rows("14")[::2], rows("14")[1::2]):
        n = int(flat[0].split()[0])
        nodes = n // 8
        assert close(flat[2], 2 * (n - 1) / n * size)
        assert close(flat[3], ring_all_reduce_us(size, n, "InfiniBand"))
        assert close(hier[2], 2 * (nodes - 1) / nodes * size / 8)
        assert close(hier[3], ring_half_us(size, 8, "NVLink") * 2
                     + ring_all_reduce_us(size / 8, nodes, "InfiniBand"))
        assert hier[3] < flat[3]


def test_15_ddp_all_reduce_against_6n_plus_attention_compute():
    for row in rows("15"):
        shapes = LLAMA3_8B if "8B" in row[0] else LLAMA3_70B
        n, link = (8, "NVLink") if "8 H100s" in row[0] else (64, "InfiniBand")
        psi, s, h = shapes.parameters(), shapes.seq, shapes.hidden
        flops = (6 * psi + 12 * shapes.layers * s * h) * shapes.batch * s
        assert close(row[1], 2 * (n - 1) / n * 2 * psi)
        assert close(row[2], ring_all_reduce_us(2 * psi, n, link))
        assert close(row[3], flops / n / PEAK_US) and close(row[4], row[2] / row[3])


def test_16_the_zero_papers_memory_and_the_ring_bytes():
    for (stage, mem8, sent8, mem70, sent70), zero in zip(rows("16"), range(4)):
        for shapes, n, mem, sent in ((LLAMA3_8B, 8, mem8, sent8), (LLAMA3_70B, 64, mem70, sent70)):
            psi = shapes.parameters()
            p, g, o = [(1, 1, 1), (1, 1, n), (1, n, n), (n, n, n)][zero]
            rel = 1e-9 if zero < 3 else 1e-3              # ZeRO-3: FSDP2's padded rows
            assert close(mem, 2 * psi / p + 2 * psi / g + 12 * psi / o, rel), (stage, n)
            ring = (n - 1) / n * 2 * psi
            # ZeRO-3 as FSDP2 runs it: every unit gathered forward, the layers (not the
            # root's embedding and output layer) again backward, then reduce_scattered
            layers = (n - 1) / n * 2 * shapes.layers * sum(
                math.prod(s) for s in shapes.layer_shapes())
            expected = [2 * ring, 3 * ring, 2 * ring, 2 * ring + layers][zero]
            assert close(sent, expected, 1e-9 if zero < 1 else 1e-3), (stage, n)


def test_17_seven_all_reduces_a_layer_inside_a_node_and_across():
    for row in rows("17"):
        shapes = LLAMA3_8B if "8B" in row[0] else LLAMA3_70B
        link = "NVLink" if "NVLink" in row[0] else "InfiniBand"
        act = 8192 * shapes.hidden * 2
        per_layer = sum(math.prod(s) for s in shapes.layer_shapes())
        flops = (6 * per_layer + 12 * 8192 * shapes.hidden) * 8192 / 8
        assert row[1] == 7 and close(row[2], 7 * 2 * 7 / 8 * act)
        assert close(row[3], 7 * ring_all_reduce_us(act, 8, link))
        assert close(row[4], flops / PEAK_US)


def test_18_the_1f1b_bubble():
    step = (6 * PSI70 + 12 * 80 * 8192 * 8192) * 512 * 8192 / 64 / PEAK_US
    for m, b8, b16, t in rows("18"):
        assert close(b8, 7 / (m + 7)) and close(b16, 15 / (m + 15))
        assert close(t, step * (m + 15) / m)


def test_19_tp_over_nvlink_wins_and_its_time_is_the_ring_models():
    for shapes, (inside, across) in zip((LLAMA3_8B, LLAMA3_70B),
                                        zip(rows("19")[::2], rows("19")[1::2])):
        act = 8192 * shapes.hidden * 2
        tp_calls = 7 * shapes.layers * shapes.batch // 8
        assert close(inside[2], tp_calls * ring_all_reduce_us(act, 8, "NVLink"))
        assert close(across[2], tp_calls * ring_all_reduce_us(act, 8, "InfiniBand"))
        grads = 2 * shapes.parameters(tp=8)
        assert close(inside[3], ring_all_reduce_us(grads, 8, "InfiniBand"))
        assert inside[4] < across[4]


def test_20_sequence_parallelism_calls_and_bytes():
    for row in rows("20"):
        shapes = LLAMA3_8B if "8B" in row[0] else LLAMA3_70B
        act = 8192 * shapes.hidden * 2
        if row[1] == "TP":
            assert row[2] == 7 and close(row[3], 7 * 2 * 7 / 8 * act)
        else:   # per region (2) and pass (2): an all_gather and a reduce_scatter
            assert row[2] == 8 and close(row[3], 8 * 7 / 8 * act)
            assert close(row[4], 8 * ring_half_us(act, 8, "NVLink"))


def test_21_ring_attention_passes_k_and_v_3_cp_minus_1_times_a_layer():
    for row in rows("21"):
        cp, link = (8, "NVLink") if "CP 8" in row[0] else (16, "InfiniBand")
        block = 2 * (131072 // cp) * 8 * 128 * 2          # K and V, 8 kv heads of 128, bf16
        assert close(row[1], block) and close(row[2], 3 * (cp - 1) * block)
        assert close(row[3], 3 * (cp - 1) * (ALPHA + block / (BETA[link] * 1e3)))
        assert row[3] < row[4]


def test_22_expert_parallelism_two_all_to_alls_each_way():
    for row in rows("22"):
        shapes = LLAMA3_8B if "8B" in row[0] else LLAMA3_70B
        n, link = (8, "NVLink") if "EP 8 " in row[0] else (64, "InfiniBand")
        act = 8192 * shapes.hidden * 2
        assert row[1] == 4 and close(row[2], 4 * (n - 1) / n * act)
        assert close(row[3], 4 * ring_half_us(act, n, link))


def test_23_no_sync_and_bf16_save_k_times_and_half():
    for row in rows("23"):
        n, link = (8, "NVLink") if "8 H100s" in row[0] else (64, "InfiniBand")
        calls, element = (8, 4) if "every" in row[1] else (1, 4 if "fp32" in row[1] else 2)
        size = element * PSI8
        assert close(row[2], calls * 2 * (n - 1) / n * size)
        assert close(row[3], calls * ring_all_reduce_us(size, n, link))


def test_24_the_schedules_bubble_formulas():
    for schedule, m, b8, b16 in rows("24"):
        work = {"1F1B": 1, "interleaved, v = 2": 2, "ZB-H1": 3}[schedule]
        assert close(b8, 7 / (work * m + 7)) and close(b16, 15 / (work * m + 15))


def test_25_crossovers_from_the_steps_and_bytes_of_each_algorithm():
    def ab(n):                     # (steps, bytes/S) of ring, binary tree, double tree
        height = n.bit_length() - 1
        down = sum(2 if 2 ** (d + 1) < n else 1 for d in range(height))
        return {"ring": (2 * (n - 1), 2 * (n - 1) / n), "binary tree": (2 * height, height + down),
                "double binary tree": (4 * height, height + down)}
    for col, (n, link) in ((1, (8, "NVLink")), (2, (64, "InfiniBand"))):
        terms = ab(n)
        for row in rows("25")[:2]:
            other = row[0].split(" / ")[1]
            (sr, br), (so, bo) = terms["ring"], terms[other]
            assert close(row[col], ALPHA * BETA[link] * 1e3 * (sr - so) / (bo - br))
        assert rows("25")[2][col] is None    # halving-doubling: fewer steps, the same bytes


def test_26_a_checkpoint_holds_14_bytes_a_parameter():
    for (name, n, whole, shard), shapes in zip(rows("26"), (LLAMA3_8B, LLAMA3_70B, LLAMA3_405B)):
        assert name == shapes.name and close(whole, 14 * shapes.parameters())
        assert close(shard, whole / n, 2e-3)            # FSDP2 pads rows to a multiple of n


def test_27_the_box_is_notebook_27s_own_choice():
    """Run notebook 27's own GPU cell (pure planner code) and hold the box's 70B row to it."""
    nb = json.loads((NOTEBOOKS / "27_planning.ipynb").read_text())
    code = "".join(next(c for c in nb["cells"] if c.get("id") == "p27-gpu-code")["source"])
    scope = {"planner": planner, "print": lambda *a, **k: None}
    exec(code, scope)
    chosen = scope["chosen"]
    row = next(r for r in rows("27") if r[0].startswith("Llama-3-70B"))
    assert row[1] == chosen["config"]
    assert close(row[2] / 1e6, chosen["time_s"]) and close(row[3] / 1e9, chosen["memory_gb"])
    small = next(r for r in rows("27") if r[0].startswith("Llama-3-8B"))
    assert small[3] <= 80e9 and re.search(r"dp\d", small[1])
