"""Where the repository, the build folder and the saved results are."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def build_dir() -> Path:
    """build/ in the repository, or $TUTORIAL_BUILD_DIR."""
    return Path(os.environ.get("TUTORIAL_BUILD_DIR") or REPO_ROOT / "build")


def results_dir() -> Path:
    """build/results, or $TUTORIAL_RESULTS_DIR."""
    return Path(os.environ.get("TUTORIAL_RESULTS_DIR") or build_dir() / "results")
