"""helpers.runtime.ipp_compat: each ipyparallel workaround is listed, found in the code,
and re-checked when ipyparallel changes."""
from __future__ import annotations

import importlib
import inspect

import pytest

from helpers.runtime import ipp_compat
from helpers.runtime.ipp_compat import WORKAROUNDS


def test_installed_ipyparallel_is_the_one_the_workarounds_were_checked_against():
    found = ipp_compat.installed()
    assert not ipp_compat.newer_than_checked(found), (
        f"ipyparallel {found} is newer than {ipp_compat.CHECKED_AGAINST}, the version "
        "helpers/runtime/ipp_compat.py's workarounds were checked against. Re-check each, "
        "drop those no longer needed, then raise CHECKED_AGAINST (and the pin in "
        "requirements.txt):\n" + ipp_compat.to_recheck())


@pytest.mark.parametrize("found, newer", [
    ("9.2.0", False), ("9.1.3", False), ("9.2.0rc1", False), ("9.2.1", True),
    ("9.3.0", True), ("10.0", True)])
def test_newer_means_a_later_release_than_the_one_checked(monkeypatch, found, newer):
    monkeypatch.setattr(ipp_compat, "CHECKED_AGAINST", "9.2.0")
    assert ipp_compat.newer_than_checked(found) is newer


@pytest.mark.parametrize("workaround", WORKAROUNDS, ids=lambda w: w.key)
def test_each_workaround_names_code_that_says_so(workaround):
    module_name, _, qualname = workaround.where.partition(":")
    module = importlib.import_module(module_name)
    target = module
    for part in qualname.split("."):
        target = getattr(target, part)   # the code it names exists
    mark = f"ipp_compat: {workaround.key}"
    if inspect.isfunction(target) or inspect.isclass(target):
        beside = inspect.getsource(target)               # in the function or class itself
    else:                                                # a constant: the lines just above it
        lines = inspect.getsource(module).splitlines()
        [at] = [i for i, line in enumerate(lines) if line.startswith(f"{qualname} =")]
        beside = "\n".join(lines[max(0, at - 6):at + 1])
    assert mark in beside, f"{workaround.where} should say `{mark}` beside the code"


def test_workaround_keys_are_unique():
    keys = [w.key for w in WORKAROUNDS]
    assert len(keys) == len(set(keys)), keys


@pytest.mark.parametrize("workaround", [w for w in WORKAROUNDS if w.still_needed],
                         ids=lambda w: w.key)
def test_the_upstream_behaviour_each_workaround_answers_is_still_there(workaround):
    assert workaround.still_needed(), (
        f"ipyparallel {ipp_compat.installed()} changed what {workaround.key} works around "
        f"({workaround.why}): {workaround.where} may go or must change; {workaround.recheck}")


def test_at_most_four_workarounds_each_with_a_probe():
    """Issue 51's bound: what the runtime does around ipyparallel stays small, and each
    piece can tell when ipyparallel no longer needs it."""
    assert 1 <= len(ipp_compat.WORKAROUNDS) <= 4
    assert all(callable(w.still_needed) for w in ipp_compat.WORKAROUNDS)
