"""README.md's quick start in Chinese: README.zh-CN.md, from the `readme` catalog.

    section = quick_start(README.read_text())     # "## Quick start ..." up to the next "## "
    text, missing = chinese()                     # what README.zh-CN.md holds

README is not a page of the site, so Sphinx does not extract it: `catalogs.extract` writes
readme.pot from the section's blocks, parsed as the notebooks' markdown is
(tools.i18n.cells.units), and `python -m tools.i18n update` keeps readme.po in step like
every other catalog. The file opens with two lines of the site catalog (marked N_ here).
"""
from __future__ import annotations

from helpers.paths import REPO_ROOT
from tools.i18n import po
from tools.i18n.cells import _MD, translate_cell
from tools.i18n.strings import N_, translated

README = REPO_ROOT / "README.md"
README_ZH = REPO_ROOT / "README.zh-CN.md"
STEM = "readme"                                  # its catalog: locales/<language>/readme.po
HEADING = "Quick start"                          # the section's heading starts with it
TITLE = N_("nccl-notebooks: NCCL collectives, rank by rank (Chinese edition)")
OPENING = N_("A Jupyter tutorial series on the collective operations of NCCL, taught "
             "through PyTorch's `torch.distributed`; this file is README.md's quick start in "
             "Chinese, written by `python -m tools.i18n readme` (`make i18n-update` runs it) "
             "from README.md and its catalog `locales/zh_CN/LC_MESSAGES/readme.po`: edit "
             "those, not this file. The notebooks in Chinese: `make lab-zh`; the Chinese "
             "site: `build/html/zh_CN/index.html`, which `make html` writes; the terms: "
             "[docs/glossary-zh.md](docs/glossary-zh.md).")


def quick_start(text: str) -> str:
    """The section of `text` whose "## " heading starts with HEADING, up to the next "## "
    heading (a line in a code block is no heading), with one final newline."""
    lines = text.split("\n")
    starts = [tok.map[0] for tok in _MD.parse(text)
              if tok.type == "heading_open" and tok.tag == "h2" and tok.map]
    begin = next((at for at in starts if lines[at].startswith(f"## {HEADING}")), None)
    if begin is None:
        raise ValueError(f"README.md has no section headed '## {HEADING}'")
    end = next((at for at in starts if at > begin), len(lines))
    return "\n".join(lines[begin:end]).rstrip() + "\n"


def chinese(language: str = po.LANGUAGE) -> tuple[str, list[str]]:
    """(README.zh-CN.md's text, the section's msgids it shows in English: no translation
    yet, or a fuzzy one)."""
    catalog = po.page_catalog(STEM, language)
    if catalog is None:
        raise SystemExit(f"no {language} catalog of the README: python -m tools.i18n "
                         f"update --add {STEM}")
    section, _, missing = translate_cell(quick_start(README.read_text(encoding="utf-8")),
                                         po.lookup(catalog))
    head = f"# {translated(TITLE, language)}\n\n{translated(OPENING, language)}\n\n"
    return head + section, missing
