"""Kernel start-up, old fork server (a copy of the old tools/execute.py) against the new
provisioner: seconds from KernelManager.start_kernel to a kernel that has run
`import torch, helpers`, first kernel of a process (server start included) and second.

    flock /tmp/s58/exec.lock .venv/bin/python benchmarks/kernel_start.py OLD_ROOT [RUNS]

OLD_ROOT holds tools/__init__.py and the old tools/execute.py (`git show HEAD:...`): the
old fork server imports its entry, tools.execute:forked_kernel, from its working folder.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one(module_path: str) -> list[float]:
    """In this process: two kernels one after the other, seconds to `import torch, helpers`."""
    sys.path.insert(0, str(REPO))
    spec = importlib.util.spec_from_file_location("execute_under_test", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    times = []
    for _ in range(2):
        start = time.monotonic()
        with module.private_kernel("python3") as km:
            km.start_kernel(cwd=tempfile.gettempdir())
            client = km.client()
            client.start_channels()
            client.wait_for_ready(timeout=300)
            reply = client.execute_interactive("import torch, helpers", timeout=300)
            assert reply["content"]["status"] == "ok", reply["content"]
            times.append(time.monotonic() - start)
            client.stop_channels()
    return times


def main() -> None:
    old, runs = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3
    variants = {"old": (old / "tools" / "execute.py", old),
                "new": (REPO / "tools" / "execute.py", REPO)}
    results: dict[str, list[list[float]]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, (path, cwd) in variants.items():       # alternately
            done = subprocess.run([sys.executable, __file__, "--one", str(path)], cwd=cwd,
                                  capture_output=True, text=True, timeout=600)
            if done.returncode:
                sys.exit(done.stderr[-3000:])
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    for name, rows in results.items():
        for index, label in enumerate(("first kernel", "second kernel")):
            values = sorted(row[index] for row in rows)
            print(f"{name:4s} {label}: median {values[len(values) // 2]:.2f} s "
                  f"(runs {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2])))
    else:
        main()
