"""How a built page reads at 1280 px: its height, the shares of code, printed output and
figures, and where its first picture starts (issue 50's measure of the reader's layer).

    python -m tools.page_metrics build/html [--json out.json]
    python -m tools.page_metrics --page build/executed/27_planning.ipynb [...]

The second form builds the book of just those executed notebooks in a temporary folder
and measures their pages; both exit 1 when a page misses a target (TARGETS, issue 50:
code + output ≤ 45 % of the page, figures ≥ 15 %).

Each page of the book is opened from disk in headless Chromium (Debian's `chromium`, driven
by Playwright, the network cut) at 1280×800, and measured in CSS px as the reader scrolls
it: code = the code cells' inputs, output = their outputs less the figures in them,
figures = every visible image of the article (plots, diagrams, animation frames). Folded
content (a closed <details>, a hidden input) counts only as the line that shows.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

CHROMIUM = Path("/usr/lib/chromium/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 800}
CODE_OUTPUT_MAX = 0.45     # code + printed output, of the page's height
FIGURES_MIN = 0.15         # figures, of the page's height

# Is `el` inside a closed <details>, not in its summary line? Folded, so not seen, though
# Chromium still gives it a box (tests/support/slides.py's deck check uses it too).
FOLDED_JS = """el => {
    for (let d = el.closest('details'); d; d = d.parentElement.closest('details'))
      if (!d.open && !el.closest('summary')) return true;
    return false;
  }"""

MEASURE_JS = """() => {
  const folded = %s;
  const visible = el => el.getClientRects().length > 0 && el.offsetParent !== null
      && !folded(el);
  const height = els => els.filter(visible)
      .reduce((sum, el) => sum + el.getBoundingClientRect().height, 0);
  const article = document.querySelector('article.bd-article') || document.body;
  const images = [...article.querySelectorAll('img')].filter(visible)
      .filter(img => img.getBoundingClientRect().height > 40);
  const inOutputs = images.filter(img => img.closest('div.cell_output'));
  const page = document.documentElement.scrollHeight;
  const code = height([...article.querySelectorAll('div.cell_input')]);
  const output = height([...article.querySelectorAll('div.cell_output')]) - height(inOutputs);
  const figures = height(images);
  const first = images.length ? Math.min(...images.map(
      img => img.getBoundingClientRect().top + window.scrollY)) : null;
  return {page_px: page, code_px: code, output_px: output, figure_px: figures,
          first_picture_px: first};
}""" % FOLDED_JS


def measure(html_dir: Path) -> dict[str, dict]:
    """{page stem: its measures} for every notebook page (NN_*.html) of html_dir."""
    from playwright.sync_api import sync_playwright

    pages = sorted(p for p in html_dir.glob("[0-9][0-9]_*.html"))
    found = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        context = browser.new_context(viewport=VIEWPORT)
        context.route("**/*", lambda route: route.continue_()
                      if route.request.url.startswith(("file:", "data:")) else route.abort())
        tab = context.new_page()
        for page in pages:
            tab.goto(page.as_uri(), wait_until="load")
            m = tab.evaluate(MEASURE_JS)
            total = m["page_px"] or 1
            found[page.stem] = {**m, "code_share": m["code_px"] / total,
                                "output_share": m["output_px"] / total,
                                "figure_share": m["figure_px"] / total}
        browser.close()
    return found


def table(found: dict[str, dict]) -> str:
    """A markdown table: a row per page, then the median."""
    head = ("| page | height (px) | code | output | code + output | figures | first picture "
            "(px) |\n|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for stem, m in found.items():
        first = "none" if m["first_picture_px"] is None else f"{m['first_picture_px']:,.0f}"
        rows.append(f"| {stem[:2]} | {m['page_px']:,.0f} | {m['code_share']:.0%} | "
                    f"{m['output_share']:.0%} | {m['code_share'] + m['output_share']:.0%} | "
                    f"{m['figure_share']:.0%} | {first} |")
    values = list(found.values())

    def median(key):
        return statistics.median(v[key] for v in values)

    firsts = [v["first_picture_px"] for v in values if v["first_picture_px"] is not None]
    rows.append(f"| median | {median('page_px'):,.0f} | {median('code_share'):.0%} | "
                f"{median('output_share'):.0%} | "
                f"{statistics.median(v['code_share'] + v['output_share'] for v in values):.0%}"
                f" | {median('figure_share'):.0%} | "
                f"{statistics.median(firsts):,.0f} |" if firsts else "")
    return "\n".join([head, *rows])


def misses(found: dict[str, dict]) -> list[str]:
    """A line for each page that misses a target: its page, the share and the target."""
    lines = []
    for stem, m in found.items():
        shown = m["code_share"] + m["output_share"]
        if shown > CODE_OUTPUT_MAX:
            lines.append(f"{stem}: code + output {shown:.1%} of the page, over "
                         f"{CODE_OUTPUT_MAX:.0%}")
        if m["figure_share"] < FIGURES_MIN:
            lines.append(f"{stem}: figures {m['figure_share']:.1%} of the page, under "
                         f"{FIGURES_MIN:.0%}")
    return lines


def measure_pages(executed: list[Path]) -> dict[str, dict]:
    """Build the book of these executed notebooks in a temporary folder (tools.site, as
    make html does) and measure their pages."""
    import tempfile

    from tools import site

    with tempfile.TemporaryDirectory(prefix="page-metrics-") as tmp:
        html_dir = Path(tmp) / "html"
        site.render(sorted(executed), html_dir, Path(tmp) / "thumbs", "page metrics",
                    languages=("en",))
        return measure(html_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html_dir", type=Path, nargs="?")
    parser.add_argument("--page", type=Path, nargs="+", default=[],
                        help="executed notebooks: build their pages here, then measure")
    parser.add_argument("--json", type=Path, help="write the measures here too")
    args = parser.parse_args(argv)
    if args.page:
        found = measure_pages(args.page)
    elif args.html_dir is None or not (args.html_dir / "index.html").is_file():
        parser.error(f"{args.html_dir} holds no built book (no index.html): run make html")
    else:
        found = measure(args.html_dir)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    print(table(found))
    missed = misses(found)
    print("\n".join(missed) or f"every page within the targets (code + output ≤ "
          f"{CODE_OUTPUT_MAX:.0%}, figures ≥ {FIGURES_MIN:.0%})")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
