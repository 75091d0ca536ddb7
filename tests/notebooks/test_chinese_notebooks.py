"""A Chinese notebook (make notebooks-zh) runs the English code to the same checks: written
from the catalog into a folder of its own, executed for real on gloo."""
from __future__ import annotations

import json

import nbformat
import pytest
from conftest import NOTEBOOKS
from notebook_runner import assert_records_match_model, execute
from reports import assert_all_pass

from tools.i18n import catalogs
from tools.i18n.cells import translate_notebook

STEM = "01_scatter"


@pytest.mark.notebook
def test_the_chinese_notebook_computes_what_the_english_one_does(tmp_path, monkeypatch):
    english = nbformat.read(NOTEBOOKS / f"{STEM}.ipynb", as_version=4)
    chinese, _, missing = translate_notebook(
        english, catalogs.read(catalogs.catalog_dir() / f"{STEM}.po"))
    assert not missing
    folder = tmp_path / "zh_CN" / "notebooks"
    folder.mkdir(parents=True)
    nbformat.write(chinese, folder / f"{STEM}.ipynb")
    monkeypatch.setenv("TUTORIAL_RESULTS_DIR", str(tmp_path / "results"))

    nb = execute(folder / f"{STEM}.ipynb", tmp_path, n_ranks=3)

    records = json.loads((tmp_path / "results" / f"{STEM}.json").read_text())
    records = records if isinstance(records, list) else [records]
    assert {r["collective"] for r in records} == {"scatter"}
    assert_records_match_model(records, 3)
    assert_all_pass(nb, 3)
