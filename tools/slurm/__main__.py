"""python -m tools.slurm install | start [--hosts N] | status [FOLDER] | stop [FOLDER | --all]

`start` prints the folder and the `export SLURM_CONF=...` line Slurm's commands need;
`stop` without a folder stops the one $SLURM_CONF names, or the only one there is.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from tools.slurm import local


def _watch(pid: int, folder: Path) -> None:
    """Stop the Slurm in `folder` once process `pid` is gone (or the folder is)."""
    while local._alive(pid) and folder.exists():
        time.sleep(0.5)
    if folder.exists():
        local.stop(folder)


def _folder_argument(raw: str | None) -> Path:
    if raw:
        return Path(raw)
    conf = Path(os.environ.get("SLURM_CONF", "/"))
    if conf.parent.name.startswith(local.FOLDER_PREFIX):
        return conf.parent
    folders = local.all_folders()
    if len(folders) == 1:
        return folders[0]
    raise SystemExit(f"name the folder (or --all): {len(folders)} local Slurm folders: "
                     + ", ".join(map(str, folders)))


def _status(folder: Path) -> int:
    if not folder.exists():
        print(f"{folder}: not running (no folder)")
        return 1
    slurm = local.LocalSlurm(folder, ())
    names = local._daemon_names(folder)
    alive = {name: local._pid(folder, name) for name in names}
    print(f"{folder}: " + ", ".join(f"{n} {'pid ' + str(p) if p else 'not running'}"
                                    for n, p in alive.items()))
    with contextlib.suppress(Exception):
        print(f"nodes {' '.join(slurm.node_states())}, jobs {slurm.jobs() or 'none'}")
    return 0 if all(alive.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.slurm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("install", help=f"apt-get install {' '.join(local.PACKAGES)} (as root)")
    start = sub.add_parser("start", help="start one; prints its folder and SLURM_CONF")
    start.add_argument("--hosts", type=int, default=0,
                       help="nodes in network namespaces of their own (default: one node)")
    for name in ("status", "stop"):
        one = sub.add_parser(name)
        one.add_argument("folder", nargs="?")
        if name == "stop":
            one.add_argument("--all", action="store_true", help="every local Slurm here")
    watch = sub.add_parser("watch", help=argparse.SUPPRESS)
    watch.add_argument("pid", type=int)
    watch.add_argument("folder")
    args = parser.parse_args(argv)

    if args.action == "install":
        local.install()
    elif args.action == "watch":
        _watch(args.pid, Path(args.folder))
    elif args.action == "start":
        started = time.monotonic()
        try:
            slurm = local.start(hosts=args.hosts)
        except local.SlurmUnavailable as err:
            print(f"tools.slurm: {err}", file=sys.stderr)
            return 2
        print(f"local Slurm up in {time.monotonic() - started:.1f} s: nodes "
              f"{','.join(slurm.nodes)}, partition {slurm.partition}, interface "
              f"{slurm.interface}, folder {slurm.folder}")
        print(f"export SLURM_CONF={slurm.conf}")
    elif args.action == "stop":
        for folder in local.all_folders() if args.all else [_folder_argument(args.folder)]:
            local.stop(folder)
            print(f"stopped {folder}")
    else:
        return _status(_folder_argument(args.folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
