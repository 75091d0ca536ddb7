"""`make compare`: two machines' result folders of different world sizes on one page."""
from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys

import pytest

from conftest import REPO


def _row(collective: str, world_size: int, backend: str, size: int, busbw: float) -> dict:
    """A row in the format of helpers.bench.measurement.measure (notebook 11's sweep)."""
    return {"collective": collective, "world_size": world_size, "backend": backend,
            "dtype": "float32", "op": "sum", "root": 0, "bytes": size, "count": size // 4,
            "time_us": 10.0, "algbw": busbw / 2, "busbw": busbw}


def _record(world_size: int, after: list[float]) -> dict:
    return {"collective": "all_reduce", "backend": "gloo", "world_size": world_size,
            "dtype": "float32", "params": {"op": "SUM"},
            "ranks": [{"rank": r, "device": "cpu",
                       "before": {"tensor": {"values": [r + 1.0]}},
                       "after": {"tensor": {"values": after}}} for r in range(world_size)]}


def _machine(folder, world_size: int, backend: str, peak_busbw: float, bench: dict):
    results = folder / "results"
    results.mkdir(parents=True)
    sizes = [1024, 65536, 4194304]
    rows = [_row(c, world_size, backend, s, peak_busbw * (i + 1) / len(sizes) * k)
            for k, c in ((1.0, "all_reduce"), (0.5, "all_gather"))
            for i, s in enumerate(sizes)]
    (results / "11_bandwidth.json").write_text(json.dumps(rows))
    total = float(sum(range(1, world_size + 1)))
    (results / "05_all_reduce.json").write_text(json.dumps(_record(world_size, [total])))
    same = {"collective": "barrier", "world_size": 2,
            "ranks": [{"rank": r, "before": {}, "after": {"ok": True}} for r in range(2)]}
    (results / "00_ranks_and_world.json").write_text(json.dumps({"barrier": same}))
    (folder / "bench").mkdir()
    (folder / "bench" / "notebook_vs_torchrun.json").write_text(json.dumps(bench))


def _compare(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "tools.compare", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_two_world_sizes_on_one_page(tmp_path):
    _machine(tmp_path / "laptop", 2, "gloo", 1.5, {"busbw_ratio": 0.97})
    _machine(tmp_path / "gpu", 4, "nccl", 150.0, {"busbw_ratio": 0.99})
    out = tmp_path / "compare.html"
    done = subprocess.run(["make", "--no-print-directory", "compare",
                           f"A={tmp_path / 'laptop'}", f"B={tmp_path / 'gpu'}",
                           "NAMES=laptop gpu-node", f"OUT={out}", f"ENV_DIR={sys.prefix}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    page = out.read_text()

    # Both machines' curves on one figure: every legend entry names machine and world size.
    png = re.search(r'src="data:image/png;base64,([^"]+)"', page)
    assert png, "no busbw figure"
    from matplotlib.image import imread
    assert imread(io.BytesIO(base64.b64decode(png.group(1))), format="png").shape[1] >= 800
    peaks = re.search(r"<table class='peaks'>(.*?)</table>", page, flags=re.S).group(1)
    assert "<td>all_reduce</td><td>1.5 GB/s at 4 MiB</td><td>150 GB/s at 4 MiB</td>" in peaks
    assert "<td>all_gather</td><td>0.75 GB/s at 4 MiB</td><td>75 GB/s at 4 MiB</td>" in peaks

    # The all_reduce record differs on every rank (3 vs 10, and ranks 2, 3 only on B);
    # the barrier record is the same on both and is not listed.
    section = page.split("Records whose per-rank values differ", 1)[1].split("<h2>")[0]
    assert "05_all_reduce.json" in section and "world size 2 vs 4" in section
    ranks = re.findall(r"<tr><td>(\d+)</td>", section)
    assert ranks == ["0", "1", "2", "3"], ranks
    assert "[3.0]" in section and "[10.0]" in section and "null" in section
    assert "00_ranks_and_world" not in section and "1 record(s) hold the same" in section

    bench = page.split("<h2>Benchmarks</h2>", 1)[1]
    assert "notebook_vs_torchrun.busbw_ratio</td><td>0.97</td><td>0.99" in bench


@pytest.mark.parametrize("problem", ["missing", "empty", "not-json"])
def test_bad_folders_are_named(tmp_path, problem):
    good = tmp_path / "good"
    _machine(good, 2, "gloo", 1.0, {})
    bad = tmp_path / "bad"
    if problem != "missing":
        (bad / "results").mkdir(parents=True)
    if problem == "not-json":
        (bad / "results" / "05_all_reduce.json").write_text("{half")
    done = _compare(good, bad, "--out", tmp_path / "c.html")
    assert done.returncode != 0 and str(bad) in done.stderr, done.stderr
    assert not (tmp_path / "c.html").exists()
