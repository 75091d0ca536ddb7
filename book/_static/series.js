// sphinx-book-theme 1.4 and pydata-sphinx-theme 0.20 wire only the first ".primary-toggle"
// and ".secondary-toggle" of a page: the top bar's, which series.css hides (and which the
// theme hides on phones). The buttons a reader sees, in the article's bar, pass their
// click on to them: the sidebar folds on a laptop and opens as a drawer on a phone.
document.addEventListener("DOMContentLoaded", () => {
  for (const which of ["primary", "secondary"]) {
    const wired = document.querySelector(`.${which}-toggle`);
    if (!wired) continue;
    document.querySelectorAll(`.bd-header-article .${which}-toggle`).forEach((button) => {
      if (button === wired) return;
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        wired.click();
      });
    });
  }
});

// Search results with a snippet, from disk. Sphinx cuts a result's snippet from the page it
// fetch()es, which file:// refuses; book/conf.py writes every page's text into
// _static/series-search-texts.js instead. Here that script is loaded on the search page, and
// each result Sphinx lists gets, under its link, the words around the first searched word
// found on that page (class "context", as Sphinx's own snippets).
const SNIPPET_CHARS = 240;

function seriesSnippet(text, words) {
  const lower = text.toLowerCase();
  let at = -1, word = "";
  for (const candidate of words) {
    // Sphinx searches stems ("collectives" finds "collective"): try the word, then its stem.
    for (const form of [candidate, candidate.slice(0, Math.max(4, candidate.length - 2))]) {
      const found = lower.indexOf(form);
      if (found >= 0 && (at < 0 || found < at)) { at = found; word = form; }
    }
  }
  if (at < 0) return null;
  const start = Math.max(0, at - SNIPPET_CHARS / 2);
  const snippet = document.createElement("p");
  snippet.className = "context";
  const before = (start > 0 ? "…" : "") + text.slice(start, at);
  const after = text.slice(at + word.length, start + SNIPPET_CHARS);
  const mark = document.createElement("span");
  mark.className = "highlighted";
  mark.textContent = text.slice(at, at + word.length);
  snippet.append(before, mark, after + (start + SNIPPET_CHARS < text.length ? "…" : ""));
  return snippet;
}

document.addEventListener("DOMContentLoaded", () => {
  const results = document.getElementById("search-results");
  const query = new URLSearchParams(window.location.search).get("q");
  if (!results || !query) return;
  const words = query.toLowerCase().split(/[^\p{L}\p{N}_]+/u).filter((w) => w.length > 1);
  const annotate = () => {
    const texts = window.SERIES_SEARCH_TEXTS;
    if (!texts) return;
    results.querySelectorAll("ul.search > li").forEach((item) => {
      if (item.querySelector("p.context")) return;
      const link = item.querySelector("a");
      const page = (link ? link.getAttribute("href") : "").split("#")[0].replace(/\.html$/, "");
      const snippet = texts[page] && seriesSnippet(texts[page], words);
      if (snippet) item.appendChild(snippet);
    });
  };
  new MutationObserver(annotate).observe(results, {childList: true, subtree: true});
  const root = document.documentElement.dataset.content_root || "";
  const script = document.createElement("script");
  script.src = `${root}_static/series-search-texts.js`;
  script.onload = annotate;
  document.head.appendChild(script);
});

// The language switch (_templates/series-language.html) keeps the reader's place: a heading
// has the same id in every language (each is Sphinx's translation of the same English pages).
document.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a.series-language");
  if (link && window.location.hash) link.hash = window.location.hash;
});
