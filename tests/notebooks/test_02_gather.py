"""Notebook 02 (gather), executed for real at 2, 3 and 4 ranks on gloo:
its records match the NumPy model, every rank is checked ✓
(tests/support/collective_notebooks.py)."""
from __future__ import annotations

from collective_notebooks import notebook_test

test_gather_notebook = notebook_test("02_gather", {"gather"})
