"""What a start cell may ask for: every bad value is refused, named, before any process starts."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.runtime import cluster as cl
from helpers.runtime.config import (ClusterConfigError, max_ranks, on_off, resolve_config,
                                    resolve_debug, resolve_timeout)
from helpers.runtime.warm import warm_requested


@pytest.mark.parametrize("raw", ["0", "four", "-2", "2.5", " 3x"])
def test_bad_tutorial_ranks_is_named(monkeypatch, raw):
    monkeypatch.setenv("TUTORIAL_RANKS", raw)
    with pytest.raises(ClusterConfigError, match=r"TUTORIAL_RANKS must be a positive whole number"):
        resolve_config(gpu_count=0)


def test_rank_limit_is_configurable_and_named(monkeypatch):
    monkeypatch.delenv("TUTORIAL_MAX_RANKS", raising=False)
    assert max_ranks() == 16
    assert resolve_config(16, "gloo", gpu_count=0) == (16, "gloo")
    with pytest.raises(ClusterConfigError, match=r"17 ranks .* limit of 16 .*TUTORIAL_MAX_RANKS"):
        resolve_config(17, "gloo", gpu_count=0)
    monkeypatch.setenv("TUTORIAL_MAX_RANKS", "2")
    with pytest.raises(ClusterConfigError, match="limit of 2"):
        resolve_config(3, "gloo", gpu_count=0)
    monkeypatch.setenv("TUTORIAL_MAX_RANKS", "lots")
    with pytest.raises(ClusterConfigError, match="TUTORIAL_MAX_RANKS must be"):
        resolve_config(2, "gloo", gpu_count=0)


def test_multi_node_does_not_count_local_gpus(monkeypatch):
    monkeypatch.delenv("TUTORIAL_RANKS", raising=False)
    assert resolve_config(8, "nccl", gpu_count=0, multi_node=True) == (8, "nccl")
    assert resolve_config(8, None, gpu_count=0, multi_node=True) == (8, "nccl")


def test_debug_and_timeout_values(monkeypatch):
    monkeypatch.delenv("TUTORIAL_DEBUG", raising=False)
    assert resolve_debug(None) == "off"
    assert resolve_debug("DETAIL") == "detail"
    monkeypatch.setenv("TUTORIAL_DEBUG", "loud")
    with pytest.raises(ClusterConfigError, match="debug must be one of detail, off, not 'loud'"):
        resolve_debug(None)
    assert resolve_timeout(2.5) == 2.5
    with pytest.raises(ClusterConfigError, match="positive"):
        resolve_timeout(-1)


@pytest.mark.parametrize("kwargs, message", [
    ({"launcher": "pbs"}, "pbs"),
    ({"n_ranks": 0}, "positive whole number"),
    ({"n_ranks": 2, "backend": "nccl"}, "needs one GPU per rank"),
    ({"n_ranks": 2, "launcher": "local", "interface": "eth7"}, "eth7"),
    ({"n_ranks": 2, "debug": "verbose"}, "verbose"),
    ({"n_ranks": 2, "launcher": "slurm"}, "TUTORIAL_IFNAME"),
    ({"n_ranks": 2, "launcher": "slurm", "interface": "no-such-if0"}, "no-such-if0"),
])
def test_start_cluster_refuses_before_starting_anything(kwargs, message, monkeypatch):
    started = []
    monkeypatch.setattr(cl.ipp, "Cluster", lambda *a, **k: started.append(k))
    with pytest.raises(ClusterConfigError, match=message):
        cl.start_cluster(quiet=True, **kwargs)
    assert started == []


# A bad value for every TUTORIAL_* variable of the README's table of settings.
BAD_SETTINGS = {
    "TUTORIAL_RANKS": "four",
    "TUTORIAL_BACKEND": "mpi",
    "TUTORIAL_MAX_RANKS": "lots",
    "TUTORIAL_TIMEOUT": "soon",
    "TUTORIAL_DEBUG": "loud",
    "TUTORIAL_LAUNCHER": "pbs",
    "TUTORIAL_WARM_START": "maybe",
    "TUTORIAL_WARM_IDLE": "forever",
    "TUTORIAL_OFFLINE": "maybe",
}


def readme_settings() -> set[str]:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    return set(re.findall(r"^\| `(TUTORIAL_[A-Z_]+)` \|", readme, flags=re.M))


@pytest.mark.docs
def test_every_setting_of_the_readme_has_a_bad_value_tried():
    assert readme_settings() == set(BAD_SETTINGS)


@pytest.mark.parametrize("name", sorted(BAD_SETTINGS))
def test_a_bad_setting_is_refused_by_name_before_any_process(name, monkeypatch):
    for other in BAD_SETTINGS:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, BAD_SETTINGS[name])
    started = []
    monkeypatch.setattr(cl.ipp, "Cluster", lambda *a, **k: started.append(k))
    monkeypatch.setattr(cl, "end_orphans", lambda: started.append("end_orphans"))
    for warm in (None, False):          # an argument that overrides it does not hide it
        with pytest.raises(ClusterConfigError, match=re.escape(repr(BAD_SETTINGS[name]))):
            cl.start_cluster(quiet=True, warm=warm)
    assert started == []


@pytest.mark.parametrize("raw, expected", [
    ("1", True), ("yes", True), (" ON ", True), ("True", True),
    ("0", False), ("no", False), ("off", False), ("", False), ("false", False)])
def test_on_off_reads_yes_and_no(raw, expected, monkeypatch):
    monkeypatch.setenv("TUTORIAL_WARM_START", raw)
    assert on_off("TUTORIAL_WARM_START") is expected
    assert warm_requested() is expected
    assert warm_requested(warm=not expected) is (not expected)   # the argument wins
