"""A normal (unprivileged) account for the tests that must run something as one, made
when the tests run as root (`make lab` as a normal user; py-spy's permissions)."""
from __future__ import annotations

import subprocess

NORMAL_USER = "nccl-lab-test"


def normal_user() -> str:
    """NORMAL_USER, created (a system account with a home) if it does not exist; root only."""
    import pwd

    try:
        pwd.getpwnam(NORMAL_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--create-home", "--shell", "/bin/bash",
                        NORMAL_USER], check=True, capture_output=True, timeout=60)
    return NORMAL_USER
