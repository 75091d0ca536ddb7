"""python -m tools.i18n update [--add PAGE ...] | notebooks | readme | status (see tools/i18n)."""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbformat

from helpers.paths import build_dir
from helpers.runtime.files import atomic_write
from tools import site
from tools.i18n import catalogs, readme
from tools.i18n.cells import translate_cell, translate_notebook


def markdown_pages(out: Path) -> list[str]:
    """The kit's page and the run page in Chinese, into `out` (kit.md, run.md)."""
    lines = []
    for stem, source in ((site.KIT_STEM, site.KIT_PAGE), (site.RUN_STEM, site.RUN_PAGE)):
        catalog = catalogs.page_catalog(stem)
        if catalog is None:
            lines.append(f"{stem:<30} no catalog yet: English only")
            continue
        text, done, missing = translate_cell(source.read_text(encoding="utf-8"),
                                             catalogs.lookup(catalog))
        atomic_write(out / f"{stem}.md", text)
        lines.append(f"{stem:<30} {done} blocks in Chinese, {len(missing)} in English")
    return lines


def notebooks(out: Path) -> list[str]:
    """The Chinese notebook of each page with a catalog, into `out`/notebooks, and the
    kit's and run pages beside it; a line per page."""
    lines = markdown_pages(out)
    out = out / "notebooks"
    written = set()
    for path in catalogs.pages():
        catalog = catalogs.page_catalog(path.stem)
        if catalog is None:
            lines.append(f"{path.stem:<30} no catalog yet: English only")
            continue
        zh, done, missing = translate_notebook(nbformat.read(path, as_version=4), catalog)
        atomic_write(out / path.name, nbformat.writes(zh) + "\n")
        written.add(path.name)
        lines.append(f"{path.stem:<30} {done} blocks in Chinese, {len(missing)} in English")
    for stale in set(p.name for p in out.glob("*.ipynb")) - written:   # a page gone since
        (out / stale).unlink()
    return lines


def status() -> list[str]:
    lines = []
    for po in sorted(catalogs.catalog_dir().glob("*.po")):
        catalog = catalogs.read(po)
        found = catalogs.problems(catalog)
        fuzzy = sum(state == "fuzzy" for state, _ in found)
        total = sum(1 for message in catalog if message.id)
        lines.append(f"{po.stem:<30} {total - len(found)}/{total} translated, {fuzzy} fuzzy, "
                     f"{len(found) - fuzzy} untranslated")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.i18n", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    update = commands.add_parser("update", help="the catalogs follow the English pages")
    update.add_argument("--add", nargs="+", default=[], metavar="PAGE",
                        help="start the catalog of these pages (05_all_reduce, kit, ...)")
    commands.add_parser("notebooks", help="build/zh_CN/notebooks/, kit.md, run.md")
    commands.add_parser("readme", help="README.zh-CN.md: README.md's quick start in Chinese")
    commands.add_parser("status", help="per catalog: translated, fuzzy, untranslated")
    args = parser.parse_args(argv)
    if args.command == "update":
        with tempfile.TemporaryDirectory(prefix="i18n-") as tmp:
            try:
                changed = catalogs.update(catalogs.extract(Path(tmp)), args.add)
            except ValueError as error:
                parser.error(str(error))
        print("\n".join(changed) if changed else "every catalog is up to date")
    elif args.command == "notebooks":
        out = build_dir() / catalogs.LANGUAGE
        print("\n".join(notebooks(out)) + f"\nwritten: {out}/notebooks, kit.md, run.md")
    elif args.command == "readme":
        text, missing = readme.chinese()
        atomic_write(readme.README_ZH, text)
        print(f"written: {readme.README_ZH.name}, {len(missing)} blocks in English"
              + "".join(f"\n  {msgid[:70]}" for msgid in missing))
    else:
        print("\n".join(status()) or "no catalog yet: python -m tools.i18n update --add PAGE")
    return 0


if __name__ == "__main__":
    sys.exit(main())
