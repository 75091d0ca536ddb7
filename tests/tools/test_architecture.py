"""docs/ARCHITECTURE.md against the code: its generated map, the rules of helpers/, its paths."""
from __future__ import annotations

import ast
import re

import nbformat
import pytest

from conftest import REPO
from tools import dependencies, series
from tools.dependencies import (MAP_BEGIN, MAP_END, NOT_IN_NOTEBOOKS, helpers_modules,
                                map_markdown, module_map, with_map)

MAX_LINES = 400
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# A path the docs name in backticks: a file or folder of the repository.
_PATH = re.compile(r"`((?:helpers|tools|tests|benchmarks|notebooks|docs|images)/[\w./*-]*)`")


def _between_markers(text: str) -> str:
    return text[text.index(MAP_BEGIN) + len(MAP_BEGIN):text.index(MAP_END)].strip("\n")


@pytest.mark.docs
def test_the_map_in_architecture_md_is_the_one_the_code_gives():
    written = _between_markers((REPO / dependencies.ARCHITECTURE).read_text())
    assert written == map_markdown(REPO), (
        "docs/ARCHITECTURE.md's notebook → module map is out of date: run "
        "`python -m tools.dependencies --write-map`")


def test_every_helpers_module_is_used_by_a_notebook_or_named_as_used_by_none():
    imports, users = module_map(REPO)
    assert set(users) == set(helpers_modules(REPO))
    assert len(imports) == len(series.load(REPO / "notebooks")) and all(imports.values()), imports
    unused = {module for module, stems in users.items() if not stems}
    assert unused == set(NOT_IN_NOTEBOOKS), (
        f"used by no notebook and not in NOT_IN_NOTEBOOKS (dead code, or name its user in "
        f"tools/dependencies.py): {sorted(unused - set(NOT_IN_NOTEBOOKS))}; "
        f"in NOT_IN_NOTEBOOKS but used by a notebook or gone: "
        f"{sorted(set(NOT_IN_NOTEBOOKS) - unused)}")


def test_the_map_follows_imports_the_registry_and_started_modules(tmp_path):
    """A tiny repository: what each column of the map counts."""
    pkg = tmp_path / "helpers"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('_WHERE = {"start": "helpers.a"}\n')
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from helpers.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "import sys\nCMD = [sys.executable, '-m', 'helpers.sub']\n")
    (pkg / "sub" / "__main__.py").write_text("from . import c\n")
    (pkg / "sub" / "c.py").write_text("RUN = torchrun_command(2, '-m', 'helpers.d')\n")
    (pkg / "d.py").write_text("")
    (pkg / "unused.py").write_text("")
    (pkg / "plotting.py").write_text("")
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    for stem, cells in {"00_one": ["from helpers import start"],
                        "01_two": ["x = 1", "%%px\nfrom helpers.plotting import draw"],
                        "02_three": ["from helpers import start"]}.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
        nbformat.write(nb, notebooks / f"{stem}.ipynb")
    imports, users = module_map(tmp_path)
    assert imports == {"00_one": ["helpers.a"], "01_two": ["helpers.plotting"],
                       "02_three": ["helpers.a"]}
    assert users == {"helpers.a": ["00_one", "02_three"], "helpers.plotting": ["01_two"],
                     "helpers.sub.b": ["00_one", "02_three"],
                     "helpers.sub.__main__": ["00_one", "02_three"],
                     "helpers.sub.c": ["00_one", "02_three"],
                     "helpers.d": ["00_one", "02_three"], "helpers.unused": []}
    table = map_markdown(tmp_path)
    assert "| `00_one` | `a` |" in table and "| `sub.c` | 00, 02 |" in table
    assert "| `unused` | none: ? |" in table
    doc = f"# x\n{MAP_BEGIN}\nold table\n{MAP_END}\nafter\n"
    assert with_map(doc, table) == f"# x\n{MAP_BEGIN}\n{table}\n{MAP_END}\nafter\n"


@pytest.mark.parametrize("stems, shown", [
    (["00_a", "01_b", "02_c", "05_d", "06_e", "09_f"], "00–02, 05, 06, 09"),
    ([f"{i:02d}_x" for i in range(20)], "00–19"),
])
def test_notebook_numbers_are_shown_as_ranges(stems, shown):
    assert dependencies._numbers(stems) == shown


def test_no_helpers_module_is_over_400_lines():
    sizes = {str(path.relative_to(REPO)): len(path.read_text().splitlines())
             for path in (REPO / "helpers").rglob("*.py")}
    assert sizes, "no helpers modules found"
    over = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert not over, f"over {MAX_LINES} lines (split where a reader would): {over}"


# Process tricks of our own that issue 51 removed: file descriptors over sockets, peer
# credentials, prctl, ctypes and forking by hand. Processes come from ipyparallel's
# launchers, subprocess or multiprocessing.
LOW_LEVEL = {"send_fds", "recv_fds", "SCM_RIGHTS", "SO_PEERCRED", "prctl", "ctypes",
             "fork", "forkpty"}


def _low_level_uses(source: str) -> list[str]:
    """The LOW_LEVEL names `source` imports or reads as an attribute."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in LOW_LEVEL:
            found.append(node.attr)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] + [getattr(node, "module", "") or ""]
            found += [name for name in names if name.split(".")[0] in LOW_LEVEL]
    return found


def test_helpers_start_processes_only_through_the_libraries():
    uses = {str(path.relative_to(REPO)): found for path in (REPO / "helpers").rglob("*.py")
            if (found := _low_level_uses(path.read_text()))}
    assert not uses, uses


def test_the_low_level_check_sees_each_trick(tmp_path):
    source = ("import ctypes\nfrom socket import send_fds\nimport os, socket\n"
              "def f(s):\n    os.fork()\n    socket.recv_fds(s, 1, 1)\n"
              "    s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED)\n")
    assert _low_level_uses(source) == ["ctypes", "send_fds", "fork", "recv_fds",
                                       "SO_PEERCRED"]


def _string_constants(source: str) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def _sources() -> dict[str, str]:
    """Every Python file of helpers, tools and benchmarks, and every notebook's code (as
    IPython runs it: magics become calls), by path."""
    from IPython.core.inputtransformer2 import TransformerManager

    found = {str(p.relative_to(REPO)): p.read_text()
             for folder in ("helpers", "tools", "benchmarks") for p in (REPO / folder).rglob("*.py")}
    for path in (REPO / "notebooks").glob("*.ipynb"):
        cells = nbformat.read(path, as_version=4).cells
        found[path.name] = "\n".join(TransformerManager().transform_cell(cell.source)
                                      for cell in cells if cell.cell_type == "code")
    return found


def test_every_torchrun_command_keeps_its_logs_in_a_folder_it_names():
    """torchrun without --log-dir leaves a new /tmp/torchelastic_* folder a run."""
    sources = _sources()
    assert len(sources) > 100
    runs = {path for path, text in sources.items() if _starts_torchrun(text)}
    assert "helpers/runtime/torchrun.py" in runs and "26_checkpoints_failures.ipynb" in runs
    assert not {path for path in runs if "--log-dir" not in _string_constants(sources[path])}
    shell = [line for path in sorted((REPO / "notebooks").glob("*.ipynb"))
             for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"
             for line in cell.source.splitlines() if re.search(r"\btorchrun\s", line)
             and (line.lstrip().startswith("!") or cell.source.startswith(("%%bash", "%%sh")))]
    assert not [line for line in shell if "--log-dir" not in line]


def _starts_torchrun(source: str) -> bool:
    """Whether `source` builds an argument list that starts torchrun: "torch.distributed.run"
    as one of its strings, or a list whose first string is "torchrun"."""
    tree = ast.parse(source)
    return "torch.distributed.run" in _string_constants(source) or any(
        isinstance(node, ast.List) and node.elts
        and isinstance(node.elts[0], ast.Constant) and node.elts[0].value == "torchrun"
        for node in ast.walk(tree))


@pytest.mark.parametrize("source, found", [
    ('cmd = [sys.executable, "-m", "torch.distributed.run", "x.py"]', True),
    ('subprocess.run(["torchrun", "--standalone", "x.py"])', True),
    ('print("torchrun")', False), ('"""torchrun --standalone -m helpers.bench"""', False)])
def test_the_torchrun_check_sees_each_argument_list_that_starts_it(source, found):
    assert _starts_torchrun(source) is found


def _imported_modules(source: str, package: str) -> list[str]:
    """The modules code of `package` imports, anywhere in it; a relative import resolved
    against `package` (`from . import x` as the module package.x)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            modules = [node.module] if node.module else [alias.name for alias in node.names]
            found += [".".join(base + [module]) for module in modules]
        elif isinstance(node, ast.ImportFrom):
            found.append(node.module)
    return found


def test_runtime_imports_nothing_else_from_helpers():
    """The rule of helpers/runtime/: what its processes load is the runtime, not the lesson."""
    files = sorted((REPO / "helpers" / "runtime").rglob("*.py"))
    assert len(files) > 10
    leaks = {f"{path.relative_to(REPO)}: {module}" for path in files
             for module in _imported_modules(path.read_text(),
                                             ".".join(path.relative_to(REPO).parent.parts))
             if (module == "helpers" or module.startswith("helpers."))
             and not (module == "helpers.runtime" or module.startswith("helpers.runtime."))}
    assert not leaks, sorted(leaks)


def test_the_runtime_import_check_sees_an_import_from_outside(tmp_path):
    leaking = tmp_path / "leak.py"
    leaking.write_text("import os\nfrom helpers.records import save_results\n"
                       "def f():\n    import helpers.paths\n    from .. import checks\n"
                       "    from . import cluster\n")
    assert _imported_modules(leaking.read_text(), "helpers.runtime") == [
        "os", "helpers.records", "helpers.paths", "helpers.checks", "helpers.runtime.cluster"]


@pytest.mark.docs
def test_no_helpers_docstring_lists_the_notebooks_that_use_it():
    """The generated map replaces such lists, which drift."""
    listed = [f"{path.relative_to(REPO)}: {line.strip()}"
              for path in sorted((REPO / "helpers").rglob("*.py"))
              for line in (ast.get_docstring(ast.parse(path.read_text())) or "").splitlines()
              if re.search(r"\b[Uu]sed by (every notebook|notebooks? \d)", line)]
    assert not listed, listed


@pytest.mark.docs
@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_the_paths_the_docs_name_exist(doc):
    named = set(_PATH.findall(doc.read_text()))
    missing = sorted(p for p in named
                     if not any(REPO.glob(p.rstrip("/"))) and not (REPO / p).exists())
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


@pytest.mark.docs
def test_the_readme_points_to_every_page_of_docs():
    readme = (REPO / "README.md").read_text()
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md"))
    assert pages, "docs/ has no pages"
    assert [p for p in pages if f"docs/{p}" not in readme] == []


def test_every_name_helpers_exports_is_imported_by_a_notebook():
    import helpers
    from tools.lint import notebook_scripts

    imported = set()
    for notebook in dependencies.notebook_files():
        kernel = notebook_scripts(notebook)[0]        # the kernel's cells, as one file
        tree = ast.parse("\n".join(kernel.lines))
        imported |= {alias.name for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module == "helpers"
                     for alias in node.names}
    assert set(helpers.__all__) == imported, (
        f"exported, imported by no notebook: {sorted(set(helpers.__all__) - imported)}; "
        f"imported, not exported: {sorted(imported - set(helpers.__all__))}")


def _engine_imports() -> set[str]:
    """The helpers modules the %%px cells of the series import."""
    from tools.lint import notebook_scripts

    found = set()
    for notebook in dependencies.notebook_files():
        engines = notebook_scripts(notebook, provided=False)[1]
        found |= {m for m in _imported_modules("\n".join(engines.lines), "")
                  if m == "helpers" or m.startswith("helpers.")}
    return found


def test_what_the_engines_import_leaves_out_matplotlib_and_ipyparallel():
    """helpers/__init__.py's promise: the code shipped to engines does not pay for them
    (matplotlib cost every engine of notebook 19 about 0.5 CPU-s: two_d imported schemes)."""
    import subprocess
    import sys

    modules = sorted(_engine_imports())
    assert "helpers.training.two_d_torch" in modules and len(modules) > 15
    probe = ("import sys\nfor m in sys.argv[1:]:\n    __import__(m)\n"
             "print(sorted(m for m in ('matplotlib', 'ipyparallel') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe, *modules], cwd=REPO, text=True,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "[]", done.stdout
