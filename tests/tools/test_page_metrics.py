"""tools.page_metrics: a page's shares of code, output and figures, measured in Chromium on
a page of known geometry (no Sphinx: the theme's class names, fixed heights)."""
from __future__ import annotations

import base64
import struct
import zlib

import pytest

import browser
from tools.page_metrics import measure, table


def _png(width: int, height: int) -> str:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    raw = b"".join(b"\0" + b"\xff" * (3 * width) for _ in range(height))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode()


PAGE = """<!doctype html><html><body style="margin:0">
<div style="height:300px">title</div>
<article class="bd-article">
 <div class="cell_input" style="height:100px">code</div>
 <div class="cell_output"><pre style="margin:0;height:150px">out</pre>
   <img src="{img}" style="display:block;width:400px;height:200px"></div>
 <details><summary style="height:20px">folded</summary>
   <div class="cell_input" style="height:5000px">hidden code</div></details>
 <div style="height:250px">prose</div>
</article></body></html>"""


def test_shares_and_the_first_picture_on_a_page_of_known_heights(tmp_path):
    browser.require_chromium()
    (tmp_path / "index.html").write_text("<html></html>")
    (tmp_path / "05_known.html").write_text(PAGE.format(img=_png(40, 20)))
    found = measure(tmp_path)
    m = found["05_known"]
    assert m["page_px"] == pytest.approx(1020, abs=25)      # 300 + 100 + 350 + 20 + 250
    assert m["code_px"] == pytest.approx(100, abs=1)         # the folded 5000 px not counted
    assert m["output_px"] == pytest.approx(150, abs=1)       # the output less its figure
    assert m["figure_px"] == pytest.approx(200, abs=1)
    assert m["first_picture_px"] == pytest.approx(550, abs=1)    # 300 + 100 + 150
    assert "| 05 | 1,0" in table(found) and "| median |" in table(found)


def test_misses_names_each_page_and_target_it_misses():
    from tools.page_metrics import CODE_OUTPUT_MAX, FIGURES_MIN, misses

    def page(code, output, figures):
        return {"code_share": code, "output_share": output, "figure_share": figures}

    found = {"05_ok": page(0.30, CODE_OUTPUT_MAX - 0.30, FIGURES_MIN),     # on both lines
             "13_wordy": page(0.30, 0.20, 0.05), "20_thin": page(0.10, 0.10, 0.149)}
    assert misses(found) == [
        "13_wordy: code + output 50.0% of the page, over 45%",
        "13_wordy: figures 5.0% of the page, under 15%",
        "20_thin: figures 14.9% of the page, under 15%"]
