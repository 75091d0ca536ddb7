"""`python -m tools.install PIP_ARGS...` (make install, make install-mpi): pip's install, by uv.

uv resolves and installs the same versions as pip from the same places, faster: a fresh
environment from requirements.txt, nothing cached, took 34 and 51 s against pip's 78 and 97 s
on 2 cores (pip compiles the bytecode one file at a time: 36 s of it). uv does not read pip's
configuration, so this reads it (`pip config list`: the config files and PIP_* variables) and
passes on each setting that decides what is installed or from where. Where a setting has no uv equivalent here, or
uv cannot be installed, pip does the install itself, as before, and says why.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Sequence

UV = "uv==0.13.9"

# pip setting -> uv option; the listed settings may hold several values, space-separated.
_OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
            "find-links": "--find-links", "constraint": "--constraint",
            "trusted-host": "--allow-insecure-host", "only-binary": "--only-binary",
            "no-binary": "--no-binary"}
_SWITCHES = {"no-index": ["--no-index"], "pre": ["--prerelease", "allow"]}
# pip setting -> the variable uv reads for it (set only where the caller has not set it).
_VARIABLES = {"cert": "SSL_CERT_FILE", "client-cert": "SSL_CLIENT_CERT",
              "timeout": "UV_HTTP_TIMEOUT", "default-timeout": "UV_HTTP_TIMEOUT",
              "proxy": "HTTPS_PROXY"}
# Settings about pip's own output, cache or checks: they change nothing that is installed.
_PIP_ONLY = {"disable-pip-version-check", "quiet", "verbose", "progress-bar", "no-color",
             "no-input", "retries", "cache-dir", "no-cache-dir", "root-user-action",
             "require-virtualenv", "log", "exists-action"}
# pip reads a section named after the command over [global], and PIP_* over both.
_PRECEDENCE = ("global", "install", ":env:")


def parse_pip_config(listing: str) -> dict[str, str]:
    """`pip config list`'s lines (`section.name='value'`) as {name: value}, with pip's
    precedence: PIP_* variables over an [install] section over [global]."""
    found: dict[str, dict[str, str]] = {}
    for line in listing.splitlines():
        key, sep, value = line.partition("=")
        section, dot, name = key.rpartition(".")
        if not (sep and dot) or section not in _PRECEDENCE:
            continue
        found.setdefault(section, {})[name] = ast.literal_eval(value)
    merged: dict[str, str] = {}
    for section in _PRECEDENCE:
        merged.update(found.get(section, {}))
    return merged


def pip_config(python: str) -> dict[str, str]:
    """The pip configuration that `python -m pip install` would use."""
    listing = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True,
                             text=True, check=True, timeout=60).stdout
    return parse_pip_config(listing)


def _true(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on"}


def uv_settings(config: dict[str, str]) -> tuple[list[str], dict[str, str]] | str:
    """uv's options and variables for pip's settings, or why uv cannot follow them."""
    options: list[str] = []
    variables: dict[str, str] = {}
    for name, value in sorted(config.items()):
        if name in _OPTIONS:
            for item in value.split():
                options += [_OPTIONS[name], item]
        elif name in _SWITCHES:
            options += _SWITCHES[name] if _true(value) else []
        elif name in _VARIABLES:
            variables[_VARIABLES[name]] = value
        elif name not in _PIP_ONLY:
            return f"pip's setting {name!r} has no uv equivalent here"
    if "--index-url" in options or "--extra-index-url" in options or "--find-links" in options:
        # pip takes the best version across all its indexes; uv's default stops at the first.
        options += ["--index-strategy", "unsafe-best-match"]
    return options, variables


def _pip(python: str, args: Sequence[str]) -> int:
    command = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    return subprocess.run([*command, *args]).returncode


def install(python: str, args: Sequence[str], uv: Sequence[str] | None = None) -> int:
    """Install `args` (pip install's arguments) into `python`'s environment with the `uv`
    command given, else with a uv that pip installs there first; the exit status."""
    settings = uv_settings(pip_config(python))
    if isinstance(settings, str):
        print(f"tools.install: pip installs ({settings})", file=sys.stderr)
        return _pip(python, args)
    if uv is None:
        if _pip(python, [UV]) != 0:
            print(f"tools.install: pip installs ({UV} could not be installed)", file=sys.stderr)
            return _pip(python, args)
        uv = [python, "-m", "uv"]
    options, variables = settings
    command = [*uv, "pip", "install", "--quiet", "--python", python, "--compile-bytecode",
               *options, *args]
    environment = {**variables, **os.environ}
    return subprocess.run(command, env=environment).returncode


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m tools.install PIP_INSTALL_ARGS... (e.g. -r requirements.txt)")
    sys.exit(install(sys.executable, sys.argv[1:]))
