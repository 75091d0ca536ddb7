"""tools/install.py: uv installs what pip would, with pip's settings; pip where uv cannot."""
from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tools import install

LISTING = """\
global.find-links='/opt/wheels'
global.extra-index-url='file:///a/simple file:///b/simple'
global.timeout='30'
install.timeout='60'
:env:.timeout='90'
:env:.disable-pip-version-check='1'
"""


def test_pip_settings_keep_pips_precedence():
    """PIP_* variables over [install] over [global]; several values stay one string."""
    assert install.parse_pip_config(LISTING) == {
        "find-links": "/opt/wheels", "extra-index-url": "file:///a/simple file:///b/simple",
        "timeout": "90", "disable-pip-version-check": "1"}


def test_uv_gets_every_place_pip_would_look_and_how_it_chooses():
    options, variables = install.uv_settings(install.parse_pip_config(LISTING))
    assert options == ["--extra-index-url", "file:///a/simple",
                       "--extra-index-url", "file:///b/simple",
                       "--find-links", "/opt/wheels",
                       "--index-strategy", "unsafe-best-match"]
    assert variables == {"UV_HTTP_TIMEOUT": "90"}


@pytest.mark.parametrize("config, expected", [
    ({"no-index": "1", "pre": "yes"}, ["--no-index", "--prerelease", "allow"]),
    ({"no-index": "0", "pre": "off"}, []),
    ({"constraint": "/etc/c.txt", "only-binary": ":all:"},
     ["--constraint", "/etc/c.txt", "--only-binary", ":all:"]),
])
def test_switches_and_lists(config, expected):
    assert install.uv_settings(config)[0] == expected


@pytest.mark.parametrize("name", ["user", "target", "compile", "break-system-packages"])
def test_a_setting_uv_cannot_follow_is_named(name):
    assert install.uv_settings({"find-links": "/w", name: "1"}) == (
        f"pip's setting {name!r} has no uv equivalent here")


# --- a real install into a new environment, of a wheel that only a PIP_FIND_LINKS folder holds

def _wheel(folder: Path, name: str = "nccl_probe_pkg") -> Path:
    """A one-module wheel, written by hand (no index, no build tool)."""
    files = {f"{name}/__init__.py": "VALUE = 42\n",
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                               "Version: 1.0\n",
             f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\n"
                                           "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    files[f"{name}-1.0.dist-info/RECORD"] = "\n".join(record + [f"{name}-1.0.dist-info/RECORD,,"])
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture(scope="module")
def environment(tmp_path_factory) -> Path:
    """A new environment with pip (tools.install reads pip's settings with it)."""
    if importlib.util.find_spec("uv") is None:   # make install puts it here
        (pytest.fail if os.environ.get("CI") else pytest.skip)("uv is not installed here")
    folder = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "venv", str(folder / "env")], check=True,
                   capture_output=True, timeout=120)
    _wheel(folder)
    return folder


def _install(folder: Path, **variables: str) -> subprocess.CompletedProcess:
    python = str(folder / "env" / "bin" / "python")
    script = ("import sys; from tools import install; sys.exit(install.install("
              "sys.argv[1], ['nccl_probe_pkg==1.0'], uv=[sys.argv[2], '-m', 'uv']))")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(folder), **variables}
    return subprocess.run([sys.executable, "-c", script, python, sys.executable],
                          cwd=Path(install.__file__).parents[1], env=env,
                          capture_output=True, text=True, timeout=120)


def _installed_by(folder: Path) -> tuple[str, int]:
    """Who installed the probe package, and how many bytecode files it got."""
    site = next((folder / "env" / "lib").glob("python*/site-packages"))
    installer = (site / "nccl_probe_pkg-1.0.dist-info" / "INSTALLER").read_text().strip()
    return installer, len(list((site / "nccl_probe_pkg").rglob("*.pyc")))


def test_uv_installs_from_where_pips_variables_point_and_compiles(environment):
    done = _install(environment)
    assert done.returncode == 0, done.stderr
    assert _installed_by(environment) == ("uv", 1)


def test_a_setting_uv_cannot_follow_leaves_the_install_to_pip(environment):
    """PIP_COMPILE=false (--no-compile) has no uv equivalent: pip installs, and honours it."""
    subprocess.run([str(environment / "env" / "bin" / "python"), "-m", "pip", "uninstall",
                    "-q", "-y", "nccl_probe_pkg"], capture_output=True, timeout=120)
    done = _install(environment, PIP_COMPILE="false")
    assert done.returncode == 0, done.stderr
    assert "pip installs (pip's setting 'compile' has no uv equivalent here)" in done.stderr
    assert _installed_by(environment) == ("pip", 0)
