"""make html's machinery on tiny notebooks (no engines): progress, failures, incremental."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import nbformat
import pytest

from conftest import REPO


def _notebook(path, *sources: str, title: str = "# 99 · tiny\n\n**What you will learn**\n- a line"):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(title)]
    nb.cells += [nbformat.v4.new_code_cell(src) for src in sources]
    for cell in nb.cells[1:]:        # the page's picture (tools.thumbnails): its plot
        cell.metadata["tags"] = ["thumbnail"] if cell.source == PLOT else []
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def _build(tmp_path, *notebooks, site: bool = False):
    """tools.build on `notebooks`; the site is rendered only when a test looks at it, in
    English only (the Chinese site: tests/tools/test_site.py, test_browser.py)."""
    env = {**os.environ, "TUTORIAL_BUILD_DIR": str(tmp_path / "build")}
    flags = ["--languages", "en"] if site else ["--no-site"]
    return subprocess.run([sys.executable, "-m", "tools.build", *flags, *map(str, notebooks)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


PLOT = ("import matplotlib.pyplot as plt\n"
        "def plot_it():\n"
        "    fig = plt.figure(figsize=(2, 1)); fig.add_subplot().plot([0, 1]); plt.close(fig)\n"
        "    return fig\n"
        "plot_it()")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("build")
    good = _notebook(tmp / "91_good.ipynb", "print('hello from the page')", PLOT)
    first = _build(tmp, good, site=True)
    return tmp, good, first


def test_a_page_per_notebook_and_an_index(built):
    tmp, good, first = built
    assert first.returncode == 0, first.stdout + first.stderr
    assert "91_good.ipynb" in first.stdout and " ok" in first.stdout
    assert "site (cards, Sphinx)" in first.stdout and "1 pages" in first.stdout
    html = tmp / "build" / "html"
    page = (html / "91_good.html").read_text()
    assert "hello from the page" in page
    assert "<title>99 · tiny" in page           # the page's title is the notebook's heading
    plots = re.findall(r'<img[^>]+src="(_images/[^"]+\.png)"', page)
    assert plots and all((html / src).stat().st_size > 0 for src in plots), plots
    assert oct((html / "91_good.html").stat().st_mode & 0o777) == "0o644"
    # the download button offers the executed notebook, as it ran
    assert (html / "_sources" / "91_good.ipynb").read_bytes() == \
        (tmp / "build" / "executed" / "91_good.ipynb").read_bytes()
    index = (html / "index.html").read_text()
    assert 'href="91_good.html"' in index and "99 · tiny" in index and "A line" in index
    assert 'src="_static/thumbs/91_good.png"' in index
    assert (html / "_static" / "thumbs" / "91_good.png").stat().st_size > 0
    for stamp in ("torch 2.13.0", "backend gloo", "world size 4", "CPU"):
        assert stamp in index
    assert not [p.name for p in html.parent.iterdir() if p.name.startswith(".site-")]
    # --languages en: the English site alone, with no switch to a language it lacks
    assert not (html / "zh_CN").exists() and "series-language" not in page


def test_languages_must_start_with_english_and_be_the_sites():
    for bad in ("zh_CN", "en,fr"):
        run = subprocess.run([sys.executable, "-m", "tools.build", "--languages", bad],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
        assert run.returncode == 2 and "--languages: en first" in run.stderr, run.stderr


PRIVATE_KERNEL = (
    "import json, os, stat, psutil\n"
    "from ipykernel.connect import get_connection_info\n"
    "info = get_connection_info(unpack=True)\n"
    "folder = os.path.dirname(info['ip'])\n"
    "channels = [f\"{info['ip']}-{info[c + '_port']}\" for c in\n"
    "            ('shell', 'iopub', 'stdin', 'control', 'hb')]\n"
    "sockets = [stat.S_ISSOCK(os.stat(path).st_mode) for path in channels]\n"
    "print('KERNEL', json.dumps({'transport': info['transport'], 'sockets': sockets,\n"
    "      'mode': oct(stat.S_IMODE(os.stat(folder).st_mode)),\n"
    "      'owner': os.stat(folder).st_uid == os.getuid()}))")


def test_kernels_listen_on_owner_only_unix_sockets_and_the_output_is_one_line_each(tmp_path):
    import json

    nb = _notebook(tmp_path / "93_private.ipynb", PRIVATE_KERNEL)
    run = _build(tmp_path, nb)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = (run.stdout + run.stderr).splitlines()
    assert not [line for line in lines if "WARNING" in line.upper()], lines
    assert len([line for line in lines if line.startswith("93_private.ipynb")]) == 1, lines
    page = (tmp_path / "build" / "executed" / "93_private.ipynb").read_text()
    shown = json.loads(nbformat.reads(page, as_version=4).cells[1].outputs[0].text
                       .split("KERNEL ", 1)[1])
    # The five Jupyter channels are unix sockets in an owner-only folder. (ipykernel 7 itself
    # still opens one loopback TCP listener of its own: docs/security.md.)
    assert shown == {"transport": "ipc", "sockets": [True] * 5, "mode": "0o700",
                     "owner": True}, shown


def test_unchanged_notebook_is_not_executed_again(built):
    tmp, good, _ = built
    page = tmp / "build" / "html" / "91_good.html"
    again = _build(tmp, good)
    assert again.returncode == 0 and "up to date" in again.stdout
    assert "site" not in again.stdout and page.is_file()      # --no-site: html/ untouched


def test_changed_notebook_or_settings_are_executed_again(built, monkeypatch):
    tmp, good, _ = built
    monkeypatch.setenv("TUTORIAL_RANKS", "3")
    assert "up to date" not in _build(tmp, good).stdout
    monkeypatch.delenv("TUTORIAL_RANKS")
    assert " ok" in _build(tmp, good).stdout   # back to the old settings: a new key again


def test_a_failing_notebook_is_named_with_its_cell_and_keeps_the_old_page(tmp_path):
    source = tmp_path / "92_bad.ipynb"
    good = _notebook(source, "print('the last good run')", PLOT)
    assert _build(tmp_path, good, site=True).returncode == 0
    page = tmp_path / "build" / "html" / "92_bad.html"
    assert "the last good run" in page.read_text()
    bad = _notebook(source, "x = 1", "raise RuntimeError('boom in cell two')")
    run = _build(tmp_path, bad, site=True)
    assert run.returncode == 1
    assert "92_bad.ipynb" in run.stdout and "FAILED in cell [2]" in run.stdout
    assert "boom in cell two" in run.stdout
    assert "the last good run" in page.read_text()      # the page of the last good run
    leftovers = [p.name for folder in (page.parent, page.parent.parent / "executed")
                 for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert not leftovers


def test_a_page_without_its_tagged_figure_fails_the_build_by_name(tmp_path):
    bare = _notebook(tmp_path / "94_bare.ipynb", "print('no figure here')")
    run = _build(tmp_path, bare, site=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "94_bare.ipynb" in run.stdout and "FAILED" in run.stdout
    assert "tagged 'thumbnail'" in run.stdout, run.stdout
    again = _build(tmp_path, bare, site=True)            # no stamp: it is built again
    assert "up to date" not in again.stdout and again.returncode == 1


def test_a_failed_render_leaves_the_old_site_whole(tmp_path, monkeypatch):
    from tools import site

    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text("the old site")
    book = tmp_path / "book"
    (book / "_static").mkdir(parents=True)
    (book / "conf.py").write_text("raise RuntimeError('a broken configuration')\n")
    monkeypatch.setattr(site, "BOOK_DIR", book)
    with pytest.raises(RuntimeError, match=r"sphinx-build \(en\) exited"):
        site.render([], html, tmp_path / "thumbs", "stamp")
    assert (html / "index.html").read_text() == "the old site"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book", "html"]   # nothing half-written


def _source_copy(tmp_path):
    """The parts of the repository a page depends on, copied so a test may edit them."""
    import shutil
    root = tmp_path / "repo"
    for name in ("helpers", "tools", "images", "notebooks"):
        shutil.copytree(REPO / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / "requirements.txt", root / "requirements.txt")
    return root


def test_each_card_is_drawn_once_where_its_notebook_was_built(tmp_path, monkeypatch):
    """A card picture is drawn right after its notebook executes (in its lane, with two);
    the site step draws only the cards of pages not executed now; --no-site draws none."""
    from tools import build

    notebooks = [_notebook(tmp_path / f"9{i}_card.ipynb", "1") for i in (1, 2, 3)]
    events: list[tuple[str, str]] = []

    def fake_execute(notebook, timeout_s):
        events.append(("execute", notebook.stem))
        return nbformat.v4.new_notebook()

    monkeypatch.setattr(build, "fingerprint", lambda nb: nb.read_text())
    monkeypatch.setattr(build, "execute", fake_execute)
    monkeypatch.setattr(build, "write_card_picture",
                        lambda stem, executed: events.append(("card", stem)) or "")
    monkeypatch.setattr(build.site, "render", lambda *args, **kwargs: events.append(("site", "")))
    monkeypatch.setattr(build, "NOTEBOOK_DIR", tmp_path)
    for name in ("HTML_DIR", "STAMP_DIR", "EXECUTED_DIR"):
        monkeypatch.setattr(build, name, tmp_path / "build" / name.lower())

    assert build.build(notebooks[:2], render_site=False) == 0
    assert events == [("execute", "91_card"), ("execute", "92_card")]     # no card
    events.clear()
    assert build.build(notebooks) == 0      # 91 and 92 up to date, 93 executed now
    assert events == [("execute", "93_card"), ("card", "93_card"), ("card", "91_card"),
                      ("card", "92_card"), ("site", "")]


def test_only_what_a_notebook_uses_executes_it_again(tmp_path, monkeypatch, capsys):
    from tools import build

    root = _source_copy(tmp_path)
    notebooks = sorted((root / "notebooks").glob("[0-9]*.ipynb"))
    executed: list[str] = []

    def fake_execute(notebook, timeout_s):
        executed.append(notebook.name)
        return nbformat.v4.new_notebook()

    original = build.fingerprint
    monkeypatch.setattr(build, "fingerprint", lambda nb: original(nb, root))
    monkeypatch.setattr(build, "execute", fake_execute)
    monkeypatch.setattr(build, "write_card_picture", lambda stem, executed: "")
    monkeypatch.setattr(build.site, "render", lambda *args, **kwargs: None)
    for name in ("HTML_DIR", "STAMP_DIR", "EXECUTED_DIR"):
        monkeypatch.setattr(build, name, tmp_path / "build" / name.lower())

    assert len(notebooks) >= 20     # 00-19
    assert build.build(notebooks) == 0 and executed == [p.name for p in notebooks]
    executed.clear()
    for tooling in ("classroom.py", "shared_cells.py", "gpu_check.py", "build.py", "site.py",
                    "pages.py"):
        with open(root / "tools" / tooling, "a") as f:
            f.write("\n# an edit to the site tooling\n")
    assert build.build(notebooks) == 0 and executed == []     # executes nothing
    assert capsys.readouterr().out.count("up to date") == len(notebooks)

    with open(root / "helpers" / "collectives" / "ring.py", "a") as f:
        f.write("\n# an edit to notebook 10's helper\n")
    build.build(notebooks)
    assert executed == ["10_ring_all_reduce.ipynb", "25_algorithms.ipynb"]   # 25 imports it too
    executed.clear()

    with open(root / "helpers" / "bench" / "measurement.py", "a") as f:
        f.write("\n# an edit to the measurement\n")
    (root / "images" / "scatter.png").write_bytes(b"\x89PNG\r\n\x1a\n redrawn")
    build.build(notebooks)
    # 25 and 27 reach measurement.py through bench.traffic and bench.sweep
    assert executed == ["01_scatter.ipynb", "11_bandwidth.ipynb", "25_algorithms.ipynb",
                        "27_planning.ipynb"]


WARM_SETTING = "import os; print('WARM_START=' + os.environ.get('TUTORIAL_WARM_START', 'unset'))"


def test_the_build_is_warm_by_default_and_cold_with_the_flag(tmp_path):
    nb = _notebook(tmp_path / "94_mode.ipynb", WARM_SETTING)
    executed = tmp_path / "build" / "executed" / "94_mode.ipynb"
    for flags, expected in [((), "WARM_START=1"), (("--cold",), "WARM_START=0"),
                            (("--warm",), "WARM_START=1")]:
        run = _build(tmp_path, *flags, nb)
        assert run.returncode == 0, run.stdout + run.stderr
        # a new mode is a new setting: the page is executed again, in that mode
        assert "up to date" not in run.stdout, (flags, run.stdout)
        assert expected in executed.read_text(), (flags, executed.read_text()[-500:])


def test_make_html_passes_cold_only_when_asked():
    def html_command(*variables: str) -> str:
        run = subprocess.run(["make", "-n", "html", *variables], cwd=REPO, capture_output=True,
                             text=True, timeout=60, env={**os.environ, "VIRTUAL_ENV": sys.prefix})
        assert run.returncode == 0, run.stdout + run.stderr
        return next(line for line in run.stdout.splitlines() if "-m tools.build" in line)

    assert html_command().rstrip().endswith("-m tools.build")
    assert html_command("COLD=1").rstrip().endswith("-m tools.build --cold")
    assert "--cold" not in html_command("WARM=1")
    assert html_command("LANGUAGES=en").split("-m tools.build")[1].split() == ["--languages", "en"]


def test_the_progress_line_says_when_engines_were_reused():
    from tools.build import engines_note

    def with_output(*texts: str) -> nbformat.NotebookNode:
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("cluster = start_cluster()") for _ in texts]
        for cell, text in zip(nb.cells, texts):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
        return nb

    summary = "4 rank(s) · backend gloo · collective timeout 60 s · checks off · {}\n"
    assert engines_note(with_output(summary.format(
        "warm start: engines reused, group re-created"))) == " · engines reused"
    assert engines_note(with_output(summary.format(
        "warm start: engines kept for the next notebook"))) == ""
    assert engines_note(with_output(summary.format("local"))) == ""
    assert engines_note(with_output(       # a later start reused this notebook's engines
        summary.format("warm start: engines kept for the next notebook"),
        summary.format("warm start: engines reused, group re-created"))) == ""


WHERE = ("import os, time; time.sleep(1)\n"
         "print('LANE', os.getppid(), os.environ.get('IPYTHONDIR', 'default'))")


def test_two_lanes_build_at_once_on_engines_of_their_own(tmp_path):
    """--jobs 2: two lane processes (the kernels' parents), the second with an IPYTHONDIR
    of its own (so warm engines are never shared), removed at the end; a failure in a lane
    is still named with its cell, and every progress line is whole."""
    good = [_notebook(tmp_path / f"9{i}_lane.ipynb", WHERE) for i in (5, 6, 7)]
    bad = _notebook(tmp_path / "98_bad.ipynb", "raise RuntimeError('boom in a lane')")
    run = _build(tmp_path, "--jobs", "2", *good, bad)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert sorted(line.split()[0] for line in lines) == \
        sorted(p.name for p in [*good, bad]), lines
    assert "98_bad.ipynb" in run.stdout and "FAILED in cell [1]" in run.stdout
    assert "boom in a lane" in run.stdout
    seen = set()
    for nb in good:
        page = (tmp_path / "build" / "executed" / nb.name).read_text()
        seen.add(tuple(nbformat.reads(page, as_version=4).cells[1].outputs[0].text.split()[1:]))
    assert len({parent for parent, _ in seen}) == 2, seen          # two lanes
    folders = {folder for _, folder in seen}
    assert len(folders) == 2, seen                                  # an IPYTHONDIR each
    assert not [f for f in folders if f != os.environ.get("IPYTHONDIR", "default")
                and os.path.exists(f)]                              # the lane's own: removed
    assert all((tmp_path / "build" / ".stamps" / f"{nb.stem}.seconds").is_file() for nb in good)


def test_jobs_must_be_positive(tmp_path):
    run = _build(tmp_path, "--jobs", "0", _notebook(tmp_path / "99_x.ipynb", "1"))
    assert run.returncode == 2 and "--jobs must be 1 or more" in run.stderr


def test_lanes_take_the_longest_first_by_last_build_else_by_the_kit(tmp_path):
    """A notebook's expected time: its .seconds stamp; in a clean build (no stamp), its
    run time in the kit's measured.json; else UNKNOWN_S."""
    import json

    from tools.lanes import UNKNOWN_S, expected_seconds

    stamps, kit = tmp_path / "stamps", tmp_path / "measured.json"
    stamps.mkdir()
    kit.write_text(json.dumps({"91_a": {"run_s": 40.5}, "92_b": {"run_s": 3.0}}))
    (stamps / "92_b.seconds").write_text("7.5")
    got = {stem: expected_seconds(tmp_path / f"{stem}.ipynb", stamps, kit)
           for stem in ("91_a", "92_b", "93_c")}
    assert got == {"91_a": 40.5, "92_b": 7.5, "93_c": UNKNOWN_S}
    from tools.lanes import KIT_TIMES
    assert set(json.loads(KIT_TIMES.read_text())) == {
        p.stem for p in (REPO / "notebooks").glob("[0-9]*.ipynb")}   # the kit has them all



def test_the_site_stamp_names_torch_without_importing_it_on_a_cpu_machine():
    """The stamp under every page says which torch computed it; without a GPU driver the
    build's own process does not import torch for it (1.5 CPU-s a build)."""
    import torch

    from helpers.runtime.config import visible_gpu_count

    probe = ("import sys\n"
             "from tools.build import environment_stamp\n"
             "stamp = environment_stamp()\n"
             "print('torch' in sys.modules, stamp, sep='|')")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TUTORIAL_")}
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    imported, stamp = done.stdout.strip().split("|")
    assert stamp.startswith(f"torch {torch.__version__} · backend gloo · world size 4 · "), stamp
    if visible_gpu_count() == 0:
        assert imported == "False" and stamp.split(" · ")[3] == "CPU", done.stdout
